"""Running continuations: restore a recorded state, let the current policy act until the episode ends.

A :data:`Continuer` is ``async (trajectory, turn, seed) -> Outcome``: one continuation from state ``s_turn``.
:func:`env_continuer` builds one from a :class:`~prover_core.protocols.RestorableEnv` and a policy
(:func:`run_continuation`, which ticks the continuation's :class:`~prover_core.clock.Meter` and stops when
verification says so), :func:`hook_continuer` from the user's ``continue_from``; the executors
(:mod:`prover_core.executors`) run them elsewhere. :mod:`prover_core.verify` decides with their outcomes.

Failures are typed so that verification counts them by kind (:func:`failure_kind`): the turn limit
:class:`~prover_core.errors.ContinuationLimitError`, the policy or environment raising
:class:`~prover_core.errors.ContinuationError`, ``restore`` failing :class:`~prover_core.errors.RestoreError`, a
non-binary outcome :class:`~prover_core.errors.InvalidOutcomeError`. Programming errors are not counted
(:func:`usage_error`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from prover_core._aio import call_user, in_thread, loop_mismatch
from prover_core.clock import METER
from prover_core.data import Outcome, Trajectory, Turn
from prover_core.errors import (
    ContinuationError,
    ContinuationLimitError,
    ContinuationTimeoutError,
    EventLoopError,
    InvalidOutcomeError,
    ProtocolError,
    ProverError,
    RestoreError,
    UsageError,
    WorkerLostError,
)
from prover_core.protocols import ContinueFn, Episode, Policy, PolicyContext, RestorableEnv, Step, policy_rng
from prover_core.report import FailureKind
from prover_core.restore import observations_equal

Continuer = Callable[..., Awaitable[Outcome]]
"""``async (trajectory, turn, seed) -> Outcome``: one continuation from state ``s_turn``. Under
``delta_of="choices"`` the post continuations are called with ``replay=n`` too (see :func:`run_continuation`)."""


def failure_kind(error: BaseException) -> FailureKind:
    """The bookkeeping class of a failed continuation."""
    if isinstance(error, InvalidOutcomeError):
        return "invalid_outcome"
    if isinstance(error, ContinuationLimitError):
        return "turn_limit"
    if isinstance(error, ContinuationTimeoutError | TimeoutError):
        return "timeout"
    if isinstance(error, WorkerLostError):
        return "worker_lost"
    if isinstance(error, RestoreError):
        return "restore"
    return "error"


async def restore_episode(
    env: RestorableEnv, trajectory: Trajectory, turn: int, seed: int, threaded: bool = False
) -> Episode:
    """``env.restore(trajectory, turn, seed)``, checked.

    Whatever ``restore`` raises is a :class:`RestoreError` (a failed ``reseed`` included: counted as
    ``restore``, not ``error``); a result without ``last`` and ``step(action)`` is a
    :class:`~prover_core.errors.ProtocolError` (a programming error: raised, never counted).
    """
    try:
        episode: Episode = await call_user(env.restore, trajectory, turn, seed, threaded=threaded)
    except ProverError:
        raise
    except Exception as exc:
        if loop_mismatch(exc) is not None:
            raise
        raise RestoreError(f"{type(env).__name__}.restore raised {type(exc).__name__}: {exc}") from exc
    if not hasattr(episode, "last") or not callable(getattr(episode, "step", None)):
        raise ProtocolError(
            f"{type(env).__name__}.restore must return an episode with .last (a Step) and .step(action); "
            f"it returned a {type(episode).__name__}"
        )
    return episode


async def run_continuation(
    env: RestorableEnv,
    policy: Policy,
    trajectory: Trajectory,
    turn: int,
    seed: int,
    max_turns: int,
    threaded: bool = False,
    replay: int = 0,
) -> Outcome:
    """Restore ``s_turn`` of ``trajectory`` and let ``policy`` act until the episode ends.

    The policy's context is the recorded history before ``turn`` plus its own new turns. With ``replay = n``
    the first ``n`` turns take the recorded actions of turns ``turn .. turn+n-1`` again (fresh transitions:
    the environment is reseeded with ``seed``) while the run stays on the recorded path, that is while each
    observation equals the recorded one; from the first difference on, the policy acts. ``Outcome.turns``
    counts the policy's turns only.
    Raises :class:`ContinuationLimitError` after ``max_turns`` turns without an end,
    :class:`ContinuationError` when the policy or the environment raises while acting, and
    :class:`InvalidOutcomeError` when the final step's ``success`` is not binary. With
    ``threaded``, synchronous ``restore``, ``act`` and ``step`` run in threads (see module docs).
    """
    meter = METER.get()
    episode = await restore_episode(env, trajectory, turn, seed, threaded)
    history: list[Turn] = list(trajectory.turns[:turn])
    step = episode.last
    rng = policy_rng(seed)
    replayed = 0
    for taken in range(max_turns):
        if meter is not None and meter.stopped:  # verification no longer needs it (prover_core.clock)
            raise asyncio.CancelledError("verification stopped this continuation")
        try:
            if taken < replay:  # on the recorded path: the recorded choice again
                recorded = trajectory.turns[turn + taken]
                action = recorded.action
                history.append(recorded)
                replayed += 1
            else:
                context = PolicyContext(
                    trajectory, tuple(history), step.observation, step.info, seed, rng, turn + replayed, replayed
                )
                action = await call_user(policy.act, context, threaded=threaded)
                if meter is not None:
                    meter.tick()
                history.append(Turn(observation=step.observation, action=action))
            step = await call_user(episode.step, action, threaded=threaded)
        except ProverError:
            raise
        except Exception as exc:
            raise ContinuationError(f"continuation raised at its turn {taken}: {type(exc).__name__}: {exc}") from exc
        if step.done:
            return Outcome(success=step.success, turns=taken + 1 - replayed)
        if taken + 1 < replay and not _on_path(trajectory, turn + taken + 1, step):
            replay = taken + 1  # a fresh transition left the recorded path: the policy acts from here
    raise ContinuationLimitError(f"continuation did not end within {max_turns} turns")


def _on_path(trajectory: Trajectory, turn: int, step: Step) -> bool:
    """Whether ``step`` observes what the recorded run observed before ``turn``."""
    return observations_equal(trajectory.turns[turn].observation, step.observation)


def env_continuer(env: RestorableEnv, policy: Policy, max_turns: int, threaded: bool = False) -> Continuer:
    """A :data:`Continuer` that restores ``env`` and runs ``policy`` in it.

    With ``threaded``, a fully synchronous pair (``restore`` and ``act`` plain methods) runs each
    whole continuation in one thread on its own event loop; otherwise each synchronous call does.
    """
    whole = threaded and not (inspect.iscoroutinefunction(env.restore) or inspect.iscoroutinefunction(policy.act))

    async def go(trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Outcome:
        if whole:
            outcome: Outcome = await in_thread(
                asyncio.run, run_continuation(env, policy, trajectory, turn, seed, max_turns, replay=replay)
            )
            return outcome
        return await run_continuation(env, policy, trajectory, turn, seed, max_turns, threaded, replay)

    go.metered = True  # type: ignore[attr-defined]  # run_continuation ticks its Meter: it can be stopped (_curtailed)
    return go


def hook_continuer(continue_from: ContinueFn, threaded: bool = False) -> Continuer:
    """A :data:`Continuer` over the user's low-level ``continue_from(trajectory, turn, seed)``.

    Its result must be a binary value or an :class:`Outcome`, else :class:`InvalidOutcomeError`.
    ``replay=n`` is passed on only when it is not 0 (``delta_of="choices"``).
    """

    async def go(trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Outcome:
        if replay:
            hook: Callable[..., Any] = continue_from
            replaying = functools.partial(hook, replay=replay)
            result = await call_user(replaying, trajectory, turn, seed, threaded=threaded)
        else:
            result = await call_user(continue_from, trajectory, turn, seed, threaded=threaded)
        if isinstance(result, Outcome):
            return result
        try:
            return Outcome(success=result)
        except InvalidOutcomeError:
            raise InvalidOutcomeError(
                f"invalid outcome: continue_from must return a bool or an Outcome, got {result!r}"
            ) from None

    return go


def usage_error(error: BaseException) -> UsageError | None:
    """``error`` as the programming error it reveals (raised, never counted), or ``None``."""
    if isinstance(error, UsageError):
        return error
    mismatch = loop_mismatch(error)
    if mismatch is None:
        return None
    return EventLoopError(
        f"async user code is bound to another event loop ({mismatch}). compute_bonus, called inside a "
        "running event loop (a notebook, an async trainer), runs on a fresh loop in a worker thread; "
        "call `await acompute_bonus(...)` on your loop instead"
    )


def metered(continuer: Continuer) -> bool:
    """Whether ``continuer`` runs :func:`run_continuation` here, ticking a :class:`~prover_core.clock.Meter` that can
    stop it (``env_continuer``, ``LocalExecutor`` with env and policy); not a hook or a remote executor."""
    return bool(getattr(continuer, "metered", False))


__all__ = [
    "Continuer",
    "env_continuer",
    "failure_kind",
    "hook_continuer",
    "metered",
    "restore_episode",
    "run_continuation",
    "usage_error",
]
