"""Stage 3, Verify: Monte Carlo success rates at the segment's two boundaries.

For segment ``[l, r]`` of the successful trajectory, K continuations of the current policy run from
``s_pre = s_l`` and K from ``s_post = s_{r+1}``:

    Delta = (1/K) sum_i R_post,i  -  (1/K) sum_i R_pre,i

``Delta`` is an unbiased estimate of ``V(s_post) - V(s_pre)`` under the current policy. Continuation
``i`` from both boundaries gets the same seed (common random numbers) unless
``ProverConfig.paired_seeds`` is off. The paper accepts iff ``Delta > 0``; other rules live in
:mod:`prover_core.acceptance`, and adaptive (anytime-valid, early-stopping) sampling in
:mod:`prover_core.sequential`. With ``curtail`` (the default) the second boundary (pre for a gain) is not
finished once the first boundary's outcomes show that none of its own could be accepted
(:func:`prover_core.curtail.settled`; the schedules are :func:`prover_core.curtail.curtailed`): the
same decisions as running all ``2 K``, from fewer policy turns. ``curtail_mode="overlap"`` (the default) starts
both boundaries together and stops the second when settled: one round, as many sequential policy calls as the
longest continuation needs. ``curtail_mode="wait"`` starts the second boundary after the first has ended: the
fewest policy turns, up to twice the rounds.

The continuations of one verification are launched by :class:`prover_core.runner.Runner`.

Latency: every continuation carries a :class:`~prover_core.clock.Meter` of the policy turns it has taken, on a
:class:`~prover_core.clock.PolicyClock` shared by the call's verifications, whose reading at the end is the
critical path of verification in sequential policy calls (``prover/verify_policy_rounds``, :mod:`prover_core.clock`).

Failures never hang or silently count: a continuation that raises, runs past
``max_continuation_turns`` or past ``continuation_timeout_s`` seconds, ends with a non-binary
outcome, or whose worker dies, is counted by kind in :class:`~prover_core.report.VerifyStats`; a
boundary with more failures than ``k - required_finished`` is not accepted (the verification is
``incomplete``). With ``continuation_timeout_s`` set, synchronous user code (``restore``, ``act``,
``step``, ``continue_from``) runs in threads so that the limit holds while it blocks; a blocked
thread is abandoned, not killed. Programming errors (:class:`~prover_core.errors.UsageError`,
async code bound to another event loop) are raised, never counted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import pickle
import zlib
from typing import Any

import numpy as np

from prover_core.acceptance import AcceptanceRule, Direction
from prover_core.budget import TurnBudget, settled_by, stopped_counts
from prover_core.clock import PolicyClock
from prover_core.continuations import Continuer, metered
from prover_core.curtail import best_case, curtailed
from prover_core.data import Outcome, Segment, Trajectory, Verification, json_plain
from prover_core.report import VerifyStats
from prover_core.runner import Result, Runner, failures, incomplete_reason, tally
from prover_core.sequential import SequentialState
from prover_core.stages import VerifySettings

__all__ = [
    "continuation_seeds",
    "verify_segment",
    "verify_segment_detailed",
]


def continuation_seeds(
    settings: VerifySettings, trajectory: Trajectory | str, count: int | None = None
) -> tuple[list[int], list[int]]:
    """Seeds of ``count`` (default K) pre and post continuations; equal pairwise when ``paired_seeds``.

    Derived from ``settings.seed`` (``ProverConfig.seed``), the trajectory id and, given a :class:`Trajectory`, a
    digest of its content (reset spec, observations, actions): stable across processes and runs, so the same batch
    gets the same seeds, while each training step's new episodes get new ones even when the seed
    and the ids repeat (a ``ProverConfig`` built once and reused every step). Content that does not
    pickle falls back to the id alone. The pre seeds of a longer list start with those of a shorter
    one, so adaptive sampling's first K pre continuations are the fixed-K ones.
    """
    n = settings.k if count is None else count
    trajectory_id = trajectory if isinstance(trajectory, str) else trajectory.id
    words = [settings.seed, zlib.crc32(trajectory_id.encode())]
    if not isinstance(trajectory, str):
        words += _content_words(trajectory)
    seeds = np.random.SeedSequence(words).generate_state(2 * n, dtype=np.uint32).tolist()
    pre = seeds[:n]
    return pre, (pre if settings.paired_seeds else seeds[n:])


def _content_words(trajectory: Trajectory) -> list[int]:
    """Four 32-bit words of a SHA-256 of the trajectory's reset spec, observations and actions.

    Hashed in their JSON form (so a trajectory loaded back from JSON gets the same seeds), else
    pickled; ``[]`` when neither works.
    """
    content = (trajectory.reset, [(turn.observation, turn.action) for turn in trajectory.turns])
    try:
        blob = json.dumps(json_plain(content), sort_keys=True).encode()
    except (TypeError, ValueError):
        try:
            blob = pickle.dumps(content, protocol=5)
        except Exception:
            return []
    digest = hashlib.sha256(blob).digest()
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


async def verify_segment_detailed(
    trajectory: Trajectory,
    segment: Segment,
    continuer: Continuer,
    settings: VerifySettings,
    limit: asyncio.Semaphore | None = None,
    direction: Direction = "gain",
    clock: PolicyClock | None = None,
    budget: TurnBudget | None = None,
    tokens: TurnBudget | None = None,
) -> tuple[Verification, VerifyStats]:
    """Verify ``segment`` as ``settings`` say (``ProverConfig.stages.verify``: a fixed-K ``rule``, or adaptive
    sampling's ``test``) and return the verification with its cost and stopping.

    ``direction="drop"`` asks whether the segment *lowered* the success rate (negative credit). ``clock``: the
    :class:`PolicyClock` of every verification that runs together (default: one of its own). ``budget``: the call's
    :class:`~prover_core.budget.TurnBudget`; a fixed-K verification some of whose continuations it stopped is
    decided where the outcomes in settle it (:func:`~prover_core.budget.settled_by`), else incomplete, with
    ``stop="budget"``. ``tokens``: the call's token budget (``max_extra_token_share``), from which each action of a
    continuation reserves its most tokens (``continuer`` must count them: ``make_continuer(count_tokens=True)``);
    the verifications it stops are decided the same way.
    """
    limit = limit or asyncio.Semaphore(settings.concurrency_for(1))
    runner = Runner(trajectory, continuer, settings, limit, clock, budget, tokens)
    if settings.test is not None:
        return await _adaptive(runner, segment, direction)
    return await _fixed(runner, segment, direction)


async def _fixed(runner: Runner, segment: Segment, direction: Direction) -> tuple[Verification, VerifyStats]:
    settings, trajectory = runner.settings, runner.trajectory
    rule, k = settings.rule, settings.k
    pre_seeds, post_seeds = continuation_seeds(settings, trajectory)
    skipped = False
    if settings.curtail is not None:
        pre, post, skipped = await curtailed(runner, segment, pre_seeds, post_seeds, rule, direction)
    else:
        results = await runner.pairs(segment, pre_seeds, post_seeds)
        pre, post = results[:k], results[k:]
    counts = tally(pre, post)
    counts["policy_turns"] += runner.cancelled_turns + runner.budget_turns
    waited = settings.curtail is not None and not skipped
    waited = waited and (settings.curtail == "wait" or not metered(runner.continuer))
    stats = dict(
        sampling="fixed",
        rule=rule.name,
        direction=direction,
        budget=2 * k,
        fixed_budget=2 * k,
        spent=runner.spent,
        cancelled=runner.cancelled,
        rounds=2 if waited else 1,
        policy_rounds=runner.last_round,
        failures=failures(pre + post),
        budget_turns=runner.budget_turns,
        policy_tokens=runner.policy_tokens,
        budget_tokens=runner.budget_tokens,
    )
    stopped = stopped_counts(pre, post)
    if any(stopped) and not skipped:
        capped = (runner.budget is not None, runner.tokens is not None)
        which = {(True, True): "turn and token budgets", (False, True): "token budget"}.get(capped, "turn budget")
        return _budget_decision(counts, stopped, rule, direction, k, stats, which)
    second = ("pre" if direction == "gain" else "post") if skipped else None
    reason = incomplete_reason(pre, post, settings.finished, k, not_run=second)
    if reason is not None:
        return Verification(accepted=False, reason=reason, incomplete=True, **counts), VerifyStats(
            stop="incomplete", **stats
        )
    if skipped:
        first = "post" if direction == "gain" else "pre"
        successes, count = counts[f"{first}_successes"], counts[f"{first}_count"]
        _, why = best_case(successes, count, k, rule, direction)
        fate = f"were stopped after {runner.cancelled_turns} policy turns" if runner.cancelled else "were not run"
        reason = (
            f"curtailed: {first} {successes}/{count}; even with 0/{k} at {second} it would be rejected "
            f"({why}), so the {k} {second} continuations {fate}"
        )
        return Verification(accepted=False, reason=reason, curtailed=True, **counts), VerifyStats(
            stop="curtailed", **stats
        )
    accepted, reason = rule.accept(
        counts["pre_successes"], counts["pre_count"], counts["post_successes"], counts["post_count"], direction
    )
    return Verification(accepted=accepted, reason=reason, **counts), VerifyStats(stop="fixed", **stats)


def _budget_decision(
    counts: dict[str, int],
    stopped: tuple[int, int],
    rule: AcceptanceRule,
    direction: Direction,
    k: int,
    stats: dict[str, Any],
    which: str = "turn budget",
) -> tuple[Verification, VerifyStats]:
    """A verification the turn (or token) budget cut short: decided where the outcomes in settle it, else
    incomplete."""
    pre, post = (counts["pre_successes"], counts["pre_count"]), (counts["post_successes"], counts["post_count"])
    other = counts["failed_continuations"] - sum(stopped)
    cut = f"the {which} stopped {stopped[0]} pre and {stopped[1]} post continuations"
    decided = settled_by(rule, k, pre, post, stopped, direction) if other == 0 else None
    if decided is None:
        reason = (
            f"budget: {cut}, and the outcomes in (pre {pre[0]}/{pre[1]}, post {post[0]}/{post[1]}) do not settle it"
        )
        return Verification(accepted=False, reason=reason, incomplete=True, **counts), VerifyStats(
            stop="budget", **stats
        )
    accepted, why = decided
    reason = f"budget: {cut}; every outcome they could have had gives the same decision: {why}"
    return Verification(accepted=accepted, reason=reason, **counts), VerifyStats(stop="budget", **stats)


async def _adaptive(runner: Runner, segment: Segment, direction: Direction) -> tuple[Verification, VerifyStats]:
    settings, trajectory, test = runner.settings, runner.trajectory, runner.settings.test
    assert test is not None
    pre_seeds, post_seeds = continuation_seeds(settings, trajectory, test.max_pairs)
    state = SequentialState(test)
    pre: list[Result] = []
    post: list[Result] = []
    rounds = 0
    decision = "continue"
    incomplete: str | None = None
    while decision == "continue":
        lo, hi = state.drawn, min(state.drawn + test.round_pairs, test.max_pairs)
        results = await runner.pairs(segment, pre_seeds[lo:hi], post_seeds[lo:hi])
        rounds += 1
        new_pre, new_post = results[: hi - lo], results[hi - lo :]
        pre += new_pre
        post += new_post
        for a, b in zip(new_pre, new_post, strict=True):
            ra = a.success if isinstance(a, Outcome) else None
            rb = b.success if isinstance(b, Outcome) else None
            state.add(*((ra, rb) if direction == "gain" else (rb, ra)))
        incomplete = incomplete_reason(pre, post, max(1, state.drawn - settings.allowed_failures), state.drawn)
        if incomplete is not None:
            decision = "incomplete"
            break
        decision = state.decide()
    counts = tally(pre, post)
    stats = VerifyStats(
        sampling="adaptive",
        rule="sequential",
        direction=direction,
        budget=2 * test.max_pairs,
        fixed_budget=2 * settings.k,
        spent=runner.spent,
        rounds=rounds,
        policy_rounds=runner.last_round,
        policy_tokens=runner.policy_tokens,
        stop=decision,
        failures=failures(pre + post),
        accept_evidence=state.accept_evidence,
        futility_evidence=state.futility_evidence,
    )
    if incomplete is not None:
        return Verification(accepted=False, reason=incomplete, incomplete=True, **counts), stats
    delta = (counts["post_successes"] / counts["post_count"]) - (counts["pre_successes"] / counts["pre_count"])
    sign = "+1/-1 pairs" if direction == "gain" else "drop pairs (pre won)/(post won)"
    reason = (
        f"{'drop: ' if direction == 'drop' else ''}Delta = {delta:+.3f} after {state.drawn} pairs ({sign} "
        f"{state.plus}/{state.minus}); stop: {decision}; e-value {state.accept_evidence:.2f} "
        f"{'>=' if decision == 'accept' else '<'} 1/alpha = {1 / test.alpha:.1f}"
    )
    return Verification(accepted=decision == "accept", reason=reason, **counts), stats


async def verify_segment(
    trajectory: Trajectory,
    segment: Segment,
    continuer: Continuer,
    settings: VerifySettings,
    limit: asyncio.Semaphore | None = None,
) -> Verification:
    """Run continuations from each boundary of ``segment`` and apply the acceptance rule.

    ``settings`` is ``ProverConfig.stages.verify``. With fixed sampling (default) K run from each boundary; a
    boundary with fewer than ``required_finished`` finished continuations is not accepted and the first error is
    named in the reason. With ``strict`` the error is raised instead. See :func:`verify_segment_detailed` for the
    cost and stopping record.
    """
    verification, _ = await verify_segment_detailed(trajectory, segment, continuer, settings, limit)
    return verification
