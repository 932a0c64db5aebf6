"""A hard cap on verification's extra policy turns per ``compute_bonus`` call (``ProverConfig.max_extra_share``).

The cap is ``floor(max_extra_share x the rollout's policy turns)``, the rollout's turns being the turns of every
trajectory of the batch (``Report.rollout_turns``: one policy call per turn, the denominator of
``prover/extra_turn_share``). One :class:`TurnBudget` holds it for the call, and every policy turn of verification
is taken from it before it is acted:

* a continuation that runs here (env and policy, a ``LocalExecutor`` with env and policy: ``Metered``) takes one
  turn before each policy call and stops, with :class:`~prover_core.errors.BudgetExhaustedError`, when none is
  left;
* one that runs elsewhere (a ``continue_from`` hook, a remote executor) reports its turns only at its end, so it
  reserves ``max_continuation_turns`` before it starts (not started when they are not left) and gives back what it
  did not use. Such a hook must keep that turn limit (``Outcome.turns <= max_continuation_turns``) for the cap to
  hold; an outcome reporting more is counted as failed (``turn_limit``) and its excess reported.

So the turns taken never exceed the cap (tested with continuations in flight). A verification whose continuations
the budget stopped is decided only where the outcomes already in settle it (every way the stopped ones could have
ended gives the same decision under the rule, :func:`settled_by`), else its group is skipped with a reason that
says ``budget`` and keeps GRPO credit.

**In policy tokens too** (``ProverConfig.max_extra_token_share``, where the host gives token counts): the cap is
``floor(max_extra_token_share x rollout_tokens)``, the rollout's tokens being the trainable action tokens the host
recorded (the lengths of every turn's ``Turn.token_span`` in the batch, :func:`rollout_tokens`; a batch with a turn
without a span is refused, :func:`token_cap_of`). Only a policy that reports its tokens (:class:`TokenPolicy`) can
be held to it: before each action the most tokens it may generate (``max_action_tokens``) are taken from a second
:class:`TurnBudget` of the call, counted in tokens, and after it the part it did not generate (``action_tokens``)
goes back; an action the tokens left cannot cover is not taken (:class:`~prover_core.errors.BudgetExhaustedError`,
its turn given back). So the tokens generated never exceed the cap, continuations in flight in threads or tasks
included, for a policy whose actions keep to their ``max_action_tokens`` (one that reports more fails its
continuation, ``turn_limit``). The stopped verifications are decided as above.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from prover_core.acceptance import AcceptanceRule, Direction
from prover_core.data import Trajectory
from prover_core.errors import BudgetExhaustedError, InvalidBatchError
from prover_core.protocols import PolicyContext

__all__ = [
    "Admission",
    "GroupShare",
    "TokenPolicy",
    "TurnBudget",
    "expected_cost",
    "plan",
    "rollout_tokens",
    "settled_by",
    "stopped_counts",
    "token_cap_of",
    "upper_cost",
]


@runtime_checkable
class TokenPolicy(Protocol):
    """A :class:`~prover_core.protocols.Policy` that reports the tokens of its actions, so that verification's cost
    can be capped in policy tokens (``ProverConfig.max_extra_token_share``), as
    :class:`~prover_engine.EnginePolicy` does.

    ``max_action_tokens(context)``: the most tokens the action ``act(context)`` is about to take may generate
    (reserved before ``act`` is called, e.g. the engine's ``max_tokens``); ``action_tokens(context)``: the tokens the
    action ``act(context)`` just returned did generate (at most the former; the rest of the reservation goes back).
    Both return non-negative ints."""

    def act(self, context: PolicyContext) -> object: ...

    def max_action_tokens(self, context: PolicyContext) -> int: ...

    def action_tokens(self, context: PolicyContext) -> int: ...


def rollout_tokens(trajectories: Sequence[Trajectory]) -> int:
    """The rollout's trainable action tokens: the length of every turn's ``token_span``, summed (turns without one
    count 0)."""
    return sum(span[1] - span[0] for t in trajectories for turn in t.turns if (span := turn.token_span) is not None)


def token_cap_of(share: float | None, trajectories: Sequence[Trajectory]) -> int | None:
    """``floor(share x rollout_tokens)``, or ``None`` uncapped (``share`` ``None``). Raises
    :class:`~prover_core.errors.InvalidBatchError` when a turn of the batch has no ``token_span``: its tokens are
    unknown, so the rollout's tokens, and the cap, would be wrong."""
    if share is None:
        return None
    missing = [(t.id, i) for t in trajectories for i, turn in enumerate(t.turns) if turn.token_span is None]
    if missing:
        tid, turn = missing[0]
        raise InvalidBatchError(
            f"max_extra_token_share caps verification's tokens as a share of the rollout's action tokens (the turns' "
            f"token spans), but {len(missing)} turns of the batch have no token_span (the first: turn {turn} of "
            f"trajectory {tid!r}), so the rollout's tokens are unknown; give every Turn its token_span, or cap in "
            f"policy turns alone (max_extra_share)"
        )
    return math.floor(share * rollout_tokens(trajectories))


class TurnBudget:
    """``limit`` policy turns, taken and given back (thread-safe: continuations may run in threads). The token cap
    counts its tokens in one too."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"a turn budget cannot be negative, got {limit}")
        self.limit, self.used, self.peak = limit, 0, 0
        self._lock = threading.Lock()

    def take(self, turns: int = 1) -> bool:
        """Take ``turns`` if that many are left; whether it did."""
        with self._lock:
            if self.used + turns > self.limit:
                return False
            self.used += turns
            self.peak = max(self.peak, self.used)
            return True

    def give_back(self, turns: int) -> None:
        """Return ``turns`` taken and not used (a reservation's unused part)."""
        with self._lock:
            self.used -= min(turns, self.used)

    @property
    def left(self) -> int:
        return self.limit - self.used


class GroupShare(TurnBudget):
    """One verification's part of the call's budget (``budget_plan`` other than ``off``, continuations that take
    their turns one by one: env and policy, ``LocalExecutor``; a hook's reservation of a whole turn limit per
    continuation draws on the pool as before): the turns the plan expects
    it to cost, taken from ``pool`` when it starts. Past them it draws on what the pool has left, and its unused
    part goes back to the pool when it ends (:meth:`release`), where a group still running may use it. So an
    overrun stops the group that overran once nothing is left, instead of every group still running: turns are spent
    on groups that can finish. The turns taken still never exceed the pool's cap."""

    def __init__(self, pool: TurnBudget, expected: int) -> None:
        reserved = max(0, min(expected, pool.left))
        pool.take(reserved)
        super().__init__(reserved)
        self.pool, self.borrowed = pool, 0

    def take(self, turns: int = 1) -> bool:
        if super().take(turns):
            return True
        if self.pool.take(turns):
            with self._lock:
                self.borrowed += turns
            return True
        return False

    def give_back(self, turns: int) -> None:
        with self._lock:
            back = min(turns, self.borrowed)
            self.borrowed -= back
        self.pool.give_back(back)
        super().give_back(turns - back)

    @property
    def left(self) -> int:
        return super().left + self.pool.left

    def release(self) -> None:
        """The verification ended: its unused part goes back to the pool."""
        with self._lock:
            unused, self.limit = self.limit - self.used, self.used
        self.pool.give_back(unused)


class Admission:
    """Starts planned verifications one share at a time (:class:`GroupShare`, ``reserve`` turns each) while what is
    left of the call's cap covers the next one's reservation; the others wait for running verifications to end and
    give back what they did not use. One that nothing left running could make room for is never started
    (:meth:`enter` returns ``None``: the group stays unverified, no turn spent on it). Near the cap, verifications
    therefore run in waves (more rounds of policy calls) instead of all at once and mostly cut short."""

    def __init__(self, pool: TurnBudget) -> None:
        self.pool, self.running = pool, 0
        self._changed = asyncio.Condition()

    async def enter(self, reserve: int) -> GroupShare | None:
        async with self._changed:
            while self.pool.left < reserve:
                if self.running == 0:
                    return None
                await self._changed.wait()
            self.running += 1
            return GroupShare(self.pool, reserve)

    async def leave(self, share: GroupShare) -> None:
        share.release()
        async with self._changed:
            self.running -= 1
            self._changed.notify_all()


def settled_by(
    rule: AcceptanceRule,
    k: int,
    pre: tuple[int, int],
    post: tuple[int, int],
    stopped: tuple[int, int],
    direction: Direction = "gain",
) -> tuple[bool, str] | None:
    """The decision of ``rule`` on ``k`` continuations per boundary whatever the stopped ones would have given, or
    ``None`` when they could change it.

    ``pre``/``post``: ``(successes, finished)``; ``stopped``: how many the budget stopped at each boundary. Every
    completion (``i`` of the stopped pre continuations and ``j`` of the post ones succeed) is tried. An acceptance
    needs a finished continuation at each boundary (its ``Delta`` is measured on them).
    """
    decisions: set[bool] = set()
    reason = ""
    for i in range(stopped[0] + 1):
        for j in range(stopped[1] + 1):
            ok, reason = rule.accept(pre[0] + i, pre[1] + stopped[0], post[0] + j, post[1] + stopped[1], direction)
            decisions.add(ok)
    if len(decisions) != 1 or (True in decisions and not (pre[1] and post[1])):
        return None
    return decisions.pop(), reason


def stopped_counts(pre: Sequence[object], post: Sequence[object]) -> tuple[int, int]:
    """How many results of each boundary are :class:`~prover_core.errors.BudgetExhaustedError`."""
    return (
        sum(isinstance(r, BudgetExhaustedError) for r in pre),
        sum(isinstance(r, BudgetExhaustedError) for r in post),
    )


def expected_cost(lengths: Sequence[int], start: int, end: int, k: int) -> float:
    """What verifying ``[start, end]`` is expected to cost before it runs: ``k`` continuations from each boundary,
    each as long as the turns the group's recorded runs had left after it, ``mean_i max(1, T_i - b)`` for
    ``b = start`` and ``b = end + 1``. An estimate, not a bound: curtailment often saves one boundary's share, but a
    continuation may run longer than the recorded runs did (on the vault it fell short of what was spent)."""
    left = [sum(max(1, t - b) for t in lengths) / len(lengths) for b in (start, end + 1)]
    return k * sum(left)


def upper_cost(lengths: Sequence[int], start: int, end: int, k: int) -> int:
    """A cautious estimate for reserving turns: ``k`` continuations from each boundary, each as long as the
    *longest* of the group's recorded runs had left, ``max_i max(1, T_i - b)``. Still not a bound (a continuation may
    outlast every recorded run); :class:`Admission` reserves it, and what a verification does not use goes back."""
    return k * sum(max(max(1, t - b) for t in lengths) for b in (start, end + 1))


def plan(costs: Sequence[float], scores: Sequence[float], cap: int) -> list[bool]:
    """Which groups to verify under a cap of ``cap`` turns: in decreasing ``scores`` (ties: the given order), each
    group whose expected cost still fits beside those already kept (a greedy knapsack, so a cheaper group later in
    the order may still fit)."""
    keep, total = [False] * len(costs), 0.0
    for i in sorted(range(len(costs)), key=lambda i: -scores[i]):
        if total + costs[i] <= cap:
            keep[i], total = True, total + costs[i]
    return keep
