"""Running continuations: restore a recorded state, let the current policy act until the episode ends.

A :data:`Continuer` is ``async (trajectory, turn, seed) -> Outcome``: one continuation from state ``s_turn``.
:func:`make_continuer` is the one place one is built from what the user passed, and its parts checked (for
``compute_bonus`` and every executor): :func:`env_continuer` from a :class:`~prover_core.protocols.RestorableEnv` and
a policy (:func:`run_continuation`, which ticks the continuation's :class:`~prover_core.clock.Meter` and stops when
verification says so), :func:`hook_continuer` from the user's ``continue_from``; the executors
(:mod:`prover_core.executors`) run them elsewhere. A policy declaring
:class:`~prover_core.protocols.BatchPolicy` is served by :class:`~prover_core.batching.BatchedPolicy` (one
``act_batch`` per round). A continuer whose turns tick the meter declares it: :class:`Metered`. Under a token cap
(``count_tokens``) the policy must report its tokens (:class:`~prover_core.budget.TokenPolicy`): each action then
reserves its most tokens from the meter's token budget and gives back what it did not generate
(:func:`counts_tokens`).
:mod:`prover_core.verify` decides with their outcomes.

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
from typing import Any, Protocol, runtime_checkable

from prover_core._aio import call_user, in_thread, loop_mismatch
from prover_core.batching import BatchedPolicy
from prover_core.budget import TokenPolicy
from prover_core.clock import METER
from prover_core.data import Outcome, Trajectory, Turn
from prover_core.errors import (
    BudgetExhaustedError,
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
from prover_core.pairing import Pairing, paired
from prover_core.protocols import (
    BatchPolicy,
    ContinueFn,
    Episode,
    Policy,
    PolicyContext,
    RestorableEnv,
    Step,
    as_policy,
    described,
    policy_rng,
    require,
)
from prover_core.report import FailureKind
from prover_core.restore import Env, LiveEpisode, observations_equal

Continuer = Callable[..., Awaitable[Outcome]]
"""``async (trajectory, turn, seed) -> Outcome``: one continuation from state ``s_turn``. Under
``delta_of="choices"`` the post continuations are called with ``replay=n`` too (see :func:`run_continuation`)."""


@runtime_checkable
class Metered(Protocol):
    """A continuer that declares whether its turns run here through :func:`run_continuation`, ticking the running
    continuation's :class:`~prover_core.clock.Meter` (so verification can stop it between turns): ``metered``.
    A continuer that does not declare it (a user's executor) is not metered."""

    metered: bool

    def __call__(self, trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Awaitable[Outcome]: ...


def failure_kind(error: BaseException) -> FailureKind:
    """The bookkeeping class of a failed continuation."""
    if isinstance(error, BudgetExhaustedError):
        return "budget"
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
    close = True
    try:
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
                    if meter is not None and not meter.acquire():
                        raise BudgetExhaustedError(
                            f"the call's budget of extra policy turns is spent: stopped before its policy turn "
                            f"{taken - replayed} (ProverConfig.max_extra_share)"
                        )
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
                raise ContinuationError(
                    f"continuation raised at its turn {taken}: {type(exc).__name__}: {exc}"
                ) from exc
            if step.done:
                return Outcome(success=step.success, turns=taken + 1 - replayed)
            if taken + 1 < replay and not _on_path(trajectory, turn + taken + 1, step):
                replay = taken + 1  # a fresh transition left the recorded path: the policy acts from here
        raise ContinuationLimitError(f"continuation did not end within {max_turns} turns")
    except asyncio.CancelledError:
        close = not threaded  # a thread may still be in the episode's step: it is closed once garbage (restore.py)
        raise
    finally:
        if close and isinstance(episode, LiveEpisode):  # a restorer's own episode: its environment is closed now
            episode.close()


def _on_path(trajectory: Trajectory, turn: int, step: Step) -> bool:
    """Whether ``step`` observes what the recorded run observed before ``turn``."""
    return observations_equal(trajectory.turns[turn].observation, step.observation)


class _TokenCounted:
    """A :class:`~prover_core.budget.TokenPolicy` whose every action, in a continuation with a token budget
    (:attr:`~prover_core.clock.Meter.token_budget`), first reserves ``max_action_tokens`` tokens from it (or is not
    taken: :class:`BudgetExhaustedError`, the turn it took given back) and then gives back what it did not generate
    (``action_tokens``). An action that raises keeps its whole reservation (its tokens are unknown); one that reports
    more than it reserved fails its continuation (:class:`ContinuationLimitError`). The tokens are counted on the
    meter (:attr:`~prover_core.clock.Meter.tokens`)."""

    def __init__(self, policy: TokenPolicy, threaded: bool) -> None:
        self.policy, self.threaded = policy, threaded

    async def act(self, context: PolicyContext) -> Any:
        meter = METER.get()
        budget = meter.token_budget if meter is not None else None
        most = _token_count(self.policy.max_action_tokens(context), self.policy, "max_action_tokens")
        if budget is not None and not budget.take(most):
            if meter is not None and meter.budget is not None:
                meter.budget.give_back(1)  # the turn taken for this action: it is not acted
            raise BudgetExhaustedError(
                f"the call's budget of extra policy tokens is spent: stopped before an action that may generate "
                f"{most} tokens ({budget.left} left; ProverConfig.max_extra_token_share)"
            )
        used = most
        try:
            action = await call_user(self.policy.act, context, threaded=self.threaded)
            used = _token_count(self.policy.action_tokens(context), self.policy, "action_tokens")
            if used > most:
                raise ContinuationLimitError(
                    f"the policy reported {used} tokens for one action, more than the {most} of its max_action_tokens "
                    f"that the token budget reserved for it"
                )
            return action
        finally:
            if meter is not None:
                meter.tokens += used
            if budget is not None:
                budget.give_back(max(0, most - used))


def _token_count(value: object, policy: object, name: str) -> int:
    """``value`` as a count of tokens: a non-negative int, else :class:`ProtocolError` (a programming error)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(f"{type(policy).__name__}.{name}(context) must return a non-negative int, got {value!r}")
    return value


class _EnvContinuer:
    """:func:`env_continuer`'s continuer: metered (it runs :func:`run_continuation` here)."""

    metered = True

    def __init__(
        self, env: RestorableEnv, policy: Policy, max_turns: int, threaded: bool, tokens: bool = False
    ) -> None:
        self.env, self.policy, self.max_turns, self.threaded = env, policy, max_turns, threaded
        self.tokens = tokens
        """Its policy reports its tokens to the meter (``make_continuer(count_tokens=True)``)."""
        sync = not (inspect.iscoroutinefunction(env.restore) or inspect.iscoroutinefunction(policy.act))
        self.whole = threaded and sync

    async def __call__(self, trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Outcome:
        if self.whole:
            label = _label(self.env, self.policy)
            outcome: Outcome = await in_thread(self._in_thread, trajectory, turn, seed, replay, label=label)
            return outcome
        return await run_continuation(
            self.env, self.policy, trajectory, turn, seed, self.max_turns, self.threaded, replay
        )

    def _in_thread(self, trajectory: Trajectory, turn: int, seed: int, replay: int) -> Outcome:
        """The whole continuation on an event loop of its own (in a thread of its own)."""
        return asyncio.run(
            run_continuation(self.env, self.policy, trajectory, turn, seed, self.max_turns, replay=replay)
        )


def _label(env: RestorableEnv, policy: Policy) -> str:
    """What a thread running a whole continuation is blocked in, for an error message."""
    return f"a continuation of {type(env).__name__} with {type(policy).__name__}"


def env_continuer(env: RestorableEnv, policy: Policy, max_turns: int, threaded: bool = False) -> Continuer:
    """A :data:`Continuer` that restores ``env`` and runs ``policy`` in it (:class:`Metered`).

    With ``threaded``, a fully synchronous pair (``restore`` and ``act`` plain methods) runs each
    whole continuation in one thread on its own event loop; otherwise each synchronous call does.
    """
    return _EnvContinuer(env, policy, max_turns, threaded)


class _HookContinuer:
    """:func:`hook_continuer`'s continuer: not metered (the hook's turns are its own)."""

    metered = False

    def __init__(self, continue_from: ContinueFn, threaded: bool) -> None:
        self.continue_from, self.threaded = continue_from, threaded

    async def __call__(self, trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Outcome:
        hook: Callable[..., Any] = self.continue_from
        if replay:
            hook = functools.partial(hook, replay=replay)
        result = await call_user(hook, trajectory, turn, seed, threaded=self.threaded)
        if isinstance(result, Outcome):
            return result
        try:
            return Outcome(success=result)
        except InvalidOutcomeError:
            raise InvalidOutcomeError(
                f"invalid outcome: continue_from must return a bool or an Outcome, got {result!r}"
            ) from None


def hook_continuer(continue_from: ContinueFn, threaded: bool = False) -> Continuer:
    """A :data:`Continuer` over the user's low-level ``continue_from(trajectory, turn, seed)``.

    Its result must be a binary value or an :class:`Outcome`, else :class:`InvalidOutcomeError`.
    ``replay=n`` is passed on only when it is not 0 (``delta_of="choices"``).
    """
    return _HookContinuer(continue_from, threaded)


def make_continuer(
    env: RestorableEnv | None = None,
    policy: Policy | BatchPolicy | Callable[[PolicyContext], Any] | None = None,
    continue_from: ContinueFn | None = None,
    executor: Continuer | None = None,
    *,
    max_turns: int,
    threaded: bool = False,
    pairing: Pairing = "sequential",
    replay: bool = False,
    count_tokens: bool = False,
) -> Continuer:
    """The continuer for what the user passed: ``executor`` alone (it runs continuations itself),
    ``continue_from`` alone, or ``env`` (a :class:`~prover_core.protocols.RestorableEnv`) and ``policy`` (a
    :class:`~prover_core.protocols.BatchPolicy`, served one ``act_batch`` call per round; a
    :class:`~prover_core.protocols.Policy`; or a function ``act(context) -> action``).

    ``threaded``: synchronous user code runs in threads, so that a wall-time limit holds while it blocks.
    ``pairing``: how continuations share randomness (:mod:`prover_core.pairing`). ``replay``: the continuer is called
    with ``replay=n`` (``delta_of="choices"``), so a user's ``executor`` or ``continue_from`` must take it.
    ``count_tokens`` (a token cap, ``ProverConfig.max_extra_token_share``): ``env`` and a ``policy`` that reports its
    tokens (:class:`~prover_core.budget.TokenPolicy`) are needed, whose actions then take their tokens from each
    continuation's token budget (:func:`counts_tokens`); a hook's or an executor's tokens are not known here.
    Raises ``ValueError`` on a wrong combination and :class:`~prover_core.errors.ProtocolError` on an object that
    misses its protocol (a class where its instance belongs included), before anything runs.
    """
    if count_tokens:
        _require_token_policy(policy, continue_from, executor)
    if executor is not None:
        if env is not None or policy is not None or continue_from is not None:
            raise ValueError("give executor alone, without env, policy or continue_from")
        _require_callable(executor, "executor", replay, "LocalExecutor and RayExecutor take it")
        return executor
    if continue_from is not None:
        if env is not None or policy is not None:
            raise ValueError("give either continue_from or env and policy, not both")
        _require_callable(continue_from, "continue_from", replay, "")
        return hook_continuer(continue_from, threaded)
    if env is None or policy is None:
        raise ValueError("continuations need env and policy, or continue_from")
    plain = isinstance(env, Env) and not isinstance(env, type)
    hint = "It looks like a plain environment (reset/step): pass ReplayEnv(make_env) or SnapshotEnv(make_env)"
    require(env, "env", RestorableEnv, "restore(trajectory, turn, seed)", hint if plain else "")
    acting: Policy
    if isinstance(policy, BatchPolicy) and not isinstance(policy, type):
        acting = BatchedPolicy(policy)
    else:
        acting = as_policy(policy)  # a plain function act(context) -> action is a policy too
        require(
            acting, "policy", Policy, "act(context) or act_batch(contexts)", "or pass a function act(context) -> action"
        )
    if count_tokens:
        acting = _TokenCounted(policy, threaded)  # type: ignore[arg-type]  # checked: _require_token_policy
    env, acting = paired(pairing, env, acting)
    return _EnvContinuer(env, acting, max_turns, threaded, tokens=count_tokens)


def _require_token_policy(policy: object, continue_from: object, executor: object) -> None:
    """A token cap needs ``env`` and a policy that reports its tokens: :class:`ProtocolError` otherwise."""
    what = "max_extra_token_share caps verification in policy tokens, so it needs env and a policy that reports them"
    protocol = "(act(context), max_action_tokens(context), action_tokens(context): prover_core.TokenPolicy)"
    if continue_from is not None or executor is not None:
        given = "a continue_from hook" if continue_from is not None else f"an executor ({described(executor)})"
        raise ProtocolError(f"{what} {protocol}; {given} runs its continuations' tokens out of sight")
    if policy is None:
        return  # make_continuer says what is missing
    if isinstance(policy, type) or not isinstance(policy, TokenPolicy):
        raise ProtocolError(
            f"{what} {protocol}; got {described(policy)}, which does not report its tokens "
            f"(prover_engine.EnginePolicy does), or cap in policy turns alone (max_extra_share)"
        )


def _require_callable(fn: object, name: str, replay: bool, who_takes_it: str) -> None:
    """``fn`` must be callable as ``fn(trajectory, turn, seed)`` (and take ``replay=`` when ``replay``)."""
    if isinstance(fn, type) or not callable(fn):
        raise ProtocolError(f"{name} must be callable as {name}(trajectory, turn, seed); got {described(fn)}")
    if replay and not _takes_replay(fn):
        raise ProtocolError(
            f"delta_of='choices' needs {name}(trajectory, turn, seed, replay=0)"
            + (f" ({who_takes_it})" if who_takes_it else "")
            + ": with replay=n it must take the recorded actions of turns turn .. turn+n-1 again (fresh "
            "transitions) while the run stays on the recorded path, then let the policy act"
        )


def _takes_replay(fn: Callable[..., object]) -> bool:
    """Whether ``fn`` accepts a ``replay`` keyword (or any keyword): a user's hook declares it in its signature."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "replay" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


class _Counted:
    """A continuer that calls ``on_end()`` as each of its continuations ends; as metered as the one it wraps."""

    def __init__(self, continuer: Continuer, on_end: Callable[[], None]) -> None:
        self.continuer, self.on_end = continuer, on_end
        self.metered, self.tokens = metered(continuer), counts_tokens(continuer)

    async def __call__(self, trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Outcome:
        try:
            if replay:  # passed on only when set, as verification does: a user's executor may not take it
                return await self.continuer(trajectory, turn, seed, replay=replay)
            return await self.continuer(trajectory, turn, seed)
        finally:
            self.on_end()


def counted(continuer: Continuer, on_end: Callable[[], None]) -> Continuer:
    """``continuer``, calling ``on_end()`` as each continuation ends (finished, failed or stopped)."""
    return _Counted(continuer, on_end)


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
    stop it (``env_continuer``, ``LocalExecutor`` with env and policy); not a hook or a remote executor. Declared:
    :class:`Metered`."""
    return isinstance(continuer, Metered) and continuer.metered


def counts_tokens(continuer: Continuer) -> bool:
    """Whether ``continuer``'s actions take their tokens from each continuation's token budget
    (``make_continuer(count_tokens=True)``: env and a :class:`~prover_core.budget.TokenPolicy`)."""
    return metered(continuer) and getattr(continuer, "tokens", False) is True


__all__ = [
    "Continuer",
    "Metered",
    "counted",
    "counts_tokens",
    "env_continuer",
    "failure_kind",
    "hook_continuer",
    "make_continuer",
    "metered",
    "restore_episode",
    "run_continuation",
    "usage_error",
]
