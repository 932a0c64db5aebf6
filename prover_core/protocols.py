"""What a host implements: a :class:`Judge`, a :class:`RestorableEnv` and a :class:`Policy` (or a :class:`BatchPolicy`).

Every method may be synchronous or ``async``; the library awaits whatever is awaitable. A policy that acts on many
contexts in one call (a model's ``generate``: a batch in, a batch out) declares :class:`BatchPolicy`: the core then
serves each round of every running continuation with one ``act_batch`` call, so verification costs as many
sequential policy calls as its longest continuation has turns. A one-context :class:`Policy` is called once per turn
of each continuation, one after another unless its ``act`` is ``async`` and overlaps on its own.

A judge's optional hooks are declared here too, each checked with ``isinstance``: :class:`OthersJudge` (its
``propose`` takes the group's other runs), :class:`PerStepJudge` (``new_step()`` once per ``compute_bonus`` call)
and :class:`ReportingJudge` (``stats()`` in the report). An environment's optional ``close()`` is declared by
:class:`Closable`.

Stacks that own their agent loop can skip env and policy and hand ``compute_bonus`` a
:data:`ContinueFn` instead.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from prover_core.data import Decline, Outcome, Proposal, SegmentRules, Trajectory, Turn
from prover_core.errors import ProtocolError

__all__ = [
    "BatchPolicy",
    "Closable",
    "ContinueFn",
    "Episode",
    "FunctionPolicy",
    "Judge",
    "OthersJudge",
    "PerStepJudge",
    "Policy",
    "POLICY_STREAM",
    "PolicyContext",
    "PolicyFn",
    "ReportingJudge",
    "RestorableEnv",
    "Step",
    "as_policy",
    "policy_rng",
]


@dataclass(frozen=True)
class Step:
    """What an environment returns after a reset or a step."""

    observation: Any
    done: bool = False
    success: bool = False
    """Meaningful only when ``done``: the binary terminal reward."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """Anything else the policy may use, e.g. ``{"actions": (...)}`` for the admissible actions."""


@runtime_checkable
class Episode(Protocol):
    """A live episode: ``last`` is the latest :class:`Step`; ``step`` acts in it."""

    @property
    def last(self) -> Step: ...

    def step(self, action: Any) -> Step | Awaitable[Step]: ...


@runtime_checkable
class Closable(Protocol):
    """An optional hook of an environment: ``close()`` releases what it holds (a game process, a window, files).

    The restorers (:class:`~prover_core.restore.ReplayEnv`, :class:`~prover_core.restore.SnapshotEnv`) call it once on
    every environment they made, when its continuation ends, fails or is dropped; never on one they did not make."""

    def close(self) -> None: ...


@runtime_checkable
class RestorableEnv(Protocol):
    """Re-creates the live episode of a recorded trajectory, positioned exactly before a turn."""

    def restore(self, trajectory: Trajectory, turn: int, seed: int) -> Episode | Awaitable[Episode]:
        """Return a fresh episode in state ``s_turn`` (after turns ``0..turn-1`` of ``trajectory``).

        ``seed`` seeds the randomness of everything that happens *after* the restored state, so that
        K continuations from one state are independent and continuation i from the pre and the post
        boundary can share random numbers. Raise :class:`~prover_core.errors.RestoreError` when the
        state cannot be restored exactly.
        """
        ...


@dataclass(frozen=True)
class PolicyContext:
    """What the current policy sees when it acts during a continuation.

    ``history`` is the recorded trajectory's turns before the boundary followed by the turns this
    continuation has taken, so the agent's context is restored along with the environment.
    """

    trajectory: Trajectory | None
    """The recorded trajectory being continued (``None`` while recording a fresh episode)."""
    history: tuple[Turn, ...]
    observation: Any
    info: Mapping[str, Any]
    seed: int
    rng: np.random.Generator
    """``policy_rng(seed)``: a sampling policy should draw from it (common random numbers)."""
    boundary: int | None = None
    """The turn this continuation first acts at: ``history[:boundary]`` is recorded (restored, or replayed under
    ``delta_of="choices"``), the rest is this continuation's own."""
    replayed: int = 0
    """How many of those recorded turns were replayed with fresh transitions (``delta_of="choices"``); when the
    last one left the recorded path, ``observation`` differs from the recorded one at ``boundary``."""


POLICY_STREAM = 0x9E3779B9
"""The stream constant of the policy's per-turn generator (:func:`policy_rng`)."""


def policy_rng(seed: int) -> np.random.Generator:
    """The policy's generator for a continuation with ``seed``.

    A stream of its own: an environment reseeded with ``seed`` draws numbers independent of the
    policy's (sharing one stream would correlate actions with transitions and bias ``Delta``).
    """
    return np.random.default_rng([seed, POLICY_STREAM])


@runtime_checkable
class Policy(Protocol):
    """The current policy; ``act`` may be a plain or an ``async`` method."""

    def act(self, context: PolicyContext) -> Any: ...


@runtime_checkable
class BatchPolicy(Protocol):
    """The current policy, acting on many contexts in one call: ``act_batch(contexts)`` returns one action per
    context, in order (plain or ``async``). Every continuation waiting for an action joins the same call
    (:class:`~prover_core.batching.BatchedPolicy`), so one round of continuations is one call."""

    def act_batch(self, contexts: Sequence[PolicyContext]) -> Sequence[Any] | Awaitable[Sequence[Any]]: ...


@runtime_checkable
class Judge(Protocol):
    """Nominates the segment of the successful trajectory where it did what the failed runs did not.

    ``propose`` may be a plain or an ``async`` method. It returns a :class:`Proposal` whose segment
    satisfies ``rules``, or a :class:`Decline` with a reason; the library re-checks the segment.
    Optional hooks: :class:`OthersJudge` (a keyword-only ``others``: the group's other runs with ``success``'s
    outcome), :class:`PerStepJudge` (``new_step``) and :class:`ReportingJudge` (``stats``).
    """

    def propose(
        self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules
    ) -> Proposal | Decline | Awaitable[Proposal | Decline]: ...


class OthersJudge(abc.ABC):
    """A :class:`Judge` whose ``propose`` also takes ``others``, keyword-only: the group's other runs with
    ``success``'s outcome (the other successful runs), as :class:`~prover_core.judges.ChoiceJudge`,
    :class:`~prover_core.judges.FirstOf` and :class:`~prover_core.judges.LLMJudge` do.

    Declared by the signature ``propose(success, failures, rules, *, others=())`` (read once per class), by
    subclassing, or by ``OthersJudge.register(cls)``; ``isinstance(judge, OthersJudge)`` says which. Keyword-only,
    so a plain judge that happens to call its second argument ``others`` keeps the three-argument protocol.
    """

    @abc.abstractmethod
    def propose(
        self,
        success: Trajectory,
        failures: Sequence[Trajectory],
        rules: SegmentRules,
        *,
        others: Sequence[Trajectory] = (),
    ) -> Proposal | Decline | Awaitable[Proposal | Decline]: ...

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:  # True, or NotImplemented: the usual subclass rules decide
        if cls is not OthersJudge:
            return NotImplemented
        try:
            param = inspect.signature(other.propose).parameters.get("others")  # type: ignore[attr-defined]
        except (AttributeError, TypeError, ValueError):  # no propose, or one without a signature (a builtin)
            return NotImplemented
        return True if param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY else NotImplemented


@runtime_checkable
class PerStepJudge(Protocol):
    """A judge with per-step state (a budget, counters): ``compute_bonus`` calls ``new_step()`` once per call, one
    call being one training step, before any proposal."""

    def new_step(self) -> None: ...


@runtime_checkable
class ReportingJudge(Protocol):
    """A judge that reports about itself: ``stats()`` becomes ``Report.judge_stats`` (e.g. tokens and retries)."""

    def stats(self) -> Mapping[str, float]: ...


ContinueFn = Callable[[Trajectory, int, int], "bool | Outcome | Awaitable[bool | Outcome]"]
"""The low-level hook: ``continue_from(trajectory, turn, seed)`` runs one continuation of the current
policy from state ``s_turn`` of ``trajectory`` and returns its binary outcome (or an
:class:`~prover_core.data.Outcome` that also counts the policy turns spent)."""

PolicyFn = Callable[[PolicyContext], Any]
"""A policy as a plain (or ``async``) function ``act(context) -> action``."""


class FunctionPolicy:
    """A :class:`Policy` whose ``act`` is the function ``fn`` (plain or ``async``, kept as it is, so an
    async function still lets a batched engine batch the concurrent continuations)."""

    def __init__(self, fn: PolicyFn) -> None:
        self.fn = fn

    def __repr__(self) -> str:
        return f"FunctionPolicy({getattr(self.fn, '__qualname__', self.fn)!r})"

    def act(self, context: PolicyContext) -> Any:
        return self.fn(context)


class _AsyncFunctionPolicy(FunctionPolicy):
    async def act(self, context: PolicyContext) -> Any:
        return await self.fn(context)


def described(value: object) -> str:
    """How an error message names a value that misses its protocol: ``None``, a function, a class or an object."""
    if value is None:
        return "None"
    if isinstance(value, type):
        return f"the class {value.__qualname__!r}"
    if inspect.isfunction(value):
        return f"the function {value.__qualname__!r}"
    return f"a {type(value).__name__}"


def require(value: object, name: str, protocol: type, signature: str, hint: str = "") -> None:
    """Raise :class:`~prover_core.errors.ProtocolError` unless ``value`` is an instance of ``protocol`` (a runtime
    checkable :class:`typing.Protocol`); a class passed where its instance belongs is refused by name."""
    if isinstance(value, type):
        raise ProtocolError(
            f"{name} must be an object, not a class: got {described(value)}; pass an instance, e.g. "
            f"{name}={value.__qualname__}()"
        )
    if not isinstance(value, protocol):
        raise ProtocolError(
            f"{name} must be an object with a method {signature}; got {described(value)}" + (hint and f". {hint}")
        )


def as_policy(policy: Policy | PolicyFn) -> Policy:
    """``policy`` itself when it has an ``act`` method, else a plain function wrapped as one."""
    if isinstance(policy, Policy | type) or not callable(policy):
        return policy  # type: ignore[return-value]  # one without act is refused by the protocol check
    if inspect.iscoroutinefunction(policy):
        return _AsyncFunctionPolicy(policy)
    return FunctionPolicy(policy)
