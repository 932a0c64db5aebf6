"""Stage 3, Verify: Monte Carlo success rates at the segment's two boundaries.

For segment ``[l, r]`` of the successful trajectory, K continuations of the current policy run from
``s_pre = s_l`` and K from ``s_post = s_{r+1}``:

    Delta = (1/K) sum_i R_post,i  -  (1/K) sum_i R_pre,i

``Delta`` is an unbiased estimate of ``V(s_post) - V(s_pre)`` under the current policy. Continuation
``i`` from both boundaries gets the same seed (common random numbers) unless
``ProverConfig.paired_seeds`` is off. The paper accepts iff ``Delta > 0``.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable

import numpy as np

from prover_core._aio import resolve
from prover_core.config import ProverConfig
from prover_core.data import Outcome, Segment, Trajectory, Turn, Verification
from prover_core.errors import ContinuationError, ContinuationLimitError, ProverError
from prover_core.protocols import ContinueFn, Policy, PolicyContext, RestorableEnv, policy_rng

Continuer = Callable[[Trajectory, int, int], Awaitable[Outcome]]
"""``async (trajectory, turn, seed) -> Outcome``: one continuation from state ``s_turn``."""


def continuation_seeds(config: ProverConfig, trajectory_id: str) -> tuple[list[int], list[int]]:
    """Seeds of the K pre and K post continuations; equal pairwise when ``paired_seeds``.

    Derived from ``config.seed`` and the trajectory id only (stable across processes and runs).
    """
    root = np.random.SeedSequence([config.seed, zlib.crc32(trajectory_id.encode())])
    seeds = root.generate_state(2 * config.k, dtype=np.uint32).tolist()
    pre = seeds[: config.k]
    return pre, (pre if config.paired_seeds else seeds[config.k :])


def accept(
    pre_successes: int, pre_count: int, post_successes: int, post_count: int, config: ProverConfig
) -> tuple[bool, str]:
    """The acceptance rule; the paper's (``delta_positive``): accept iff ``Delta > 0``."""
    delta = post_successes / post_count - pre_successes / pre_count
    if config.acceptance == "delta_positive":
        if delta > 0:
            return True, f"Delta = {delta:+.3f} > 0"
        return False, f"Delta = {delta:+.3f} <= 0"
    raise ValueError(f"unknown acceptance rule {config.acceptance!r}")  # pragma: no cover


async def run_continuation(
    env: RestorableEnv, policy: Policy, trajectory: Trajectory, turn: int, seed: int, max_turns: int
) -> Outcome:
    """Restore ``s_turn`` of ``trajectory`` and let ``policy`` act until the episode ends.

    The policy's context is the recorded history before ``turn`` plus its own new turns.
    Raises :class:`ContinuationLimitError` after ``max_turns`` turns without an end, and
    :class:`ContinuationError` when the policy or the environment raises while acting.
    """
    episode = await resolve(env.restore(trajectory, turn, seed))
    history: list[Turn] = list(trajectory.turns[:turn])
    step = episode.last
    rng = policy_rng(seed)
    for taken in range(max_turns):
        try:
            context = PolicyContext(trajectory, tuple(history), step.observation, step.info, seed, rng)
            action = await resolve(policy.act(context))
            history.append(Turn(observation=step.observation, action=action))
            step = await resolve(episode.step(action))
        except ProverError:
            raise
        except Exception as exc:
            raise ContinuationError(f"continuation raised at its turn {taken}: {type(exc).__name__}: {exc}") from exc
        if step.done:
            return Outcome(success=bool(step.success), turns=taken + 1)
    raise ContinuationLimitError(f"continuation did not end within {max_turns} turns")


def env_continuer(env: RestorableEnv, policy: Policy, max_turns: int) -> Continuer:
    """A :data:`Continuer` that restores ``env`` and runs ``policy`` in it."""

    async def go(trajectory: Trajectory, turn: int, seed: int) -> Outcome:
        return await run_continuation(env, policy, trajectory, turn, seed, max_turns)

    return go


def hook_continuer(continue_from: ContinueFn) -> Continuer:
    """A :data:`Continuer` over the user's low-level ``continue_from(trajectory, turn, seed)``."""

    async def go(trajectory: Trajectory, turn: int, seed: int) -> Outcome:
        result = await resolve(continue_from(trajectory, turn, seed))
        if isinstance(result, Outcome):
            return result
        if isinstance(result, bool | np.bool_) or result in (0, 1):
            return Outcome(success=bool(result))
        raise ContinuationError(f"continue_from must return a bool or an Outcome, got {result!r}")

    return go


async def verify_segment(
    trajectory: Trajectory,
    segment: Segment,
    continuer: Continuer,
    config: ProverConfig,
    limit: asyncio.Semaphore | None = None,
) -> Verification:
    """Run K continuations from each boundary of ``segment`` and apply the acceptance rule.

    A boundary with fewer than ``config.required_finished`` finished continuations is not accepted;
    the first error is named in the reason. With ``config.strict`` the error is raised instead.
    """
    limit = limit or asyncio.Semaphore(config.max_concurrency)
    pre_seeds, post_seeds = continuation_seeds(config, trajectory.id)
    pre_turn, post_turn = segment.start, segment.end + 1

    async def one(turn: int, seed: int) -> Outcome | BaseException:
        if turn == trajectory.num_turns:  # terminal post boundary: its outcome is recorded
            return Outcome(success=trajectory.success)
        async with limit:
            try:
                return await continuer(trajectory, turn, seed)
            except Exception as exc:
                if config.strict:
                    raise
                return exc

    results = await asyncio.gather(*(one(pre_turn, s) for s in pre_seeds), *(one(post_turn, s) for s in post_seeds))
    pre, post = results[: config.k], results[config.k :]
    pre_ok = [r for r in pre if isinstance(r, Outcome)]
    post_ok = [r for r in post if isinstance(r, Outcome)]
    errors = [r for r in results if not isinstance(r, Outcome)]
    turns = sum(r.turns for r in pre_ok + post_ok)
    counts = dict(
        pre_successes=sum(r.success for r in pre_ok),
        pre_count=len(pre_ok),
        post_successes=sum(r.success for r in post_ok),
        post_count=len(post_ok),
        failed_continuations=len(errors),
        policy_turns=turns,
    )
    need = config.required_finished
    if len(pre_ok) < need or len(post_ok) < need:
        first = errors[0]
        reason = (
            f"too few finished continuations (pre {len(pre_ok)}/{config.k}, post {len(post_ok)}/{config.k}, "
            f"need {need}); first error: {type(first).__name__}: {first}"
        )
        return Verification(accepted=False, reason=reason, incomplete=True, **counts)
    accepted, reason = accept(counts["pre_successes"], len(pre_ok), counts["post_successes"], len(post_ok), config)
    return Verification(accepted=accepted, reason=reason, **counts)
