"""Launching one verification's continuations: the concurrency and wall-time limits, a :class:`Meter` each.

A continuation's failure is returned as its result, not raised (programming errors are raised:
:func:`~prover_core.continuations.usage_error`); :func:`tally` counts the finished ones for a
:class:`~prover_core.data.Verification`, :func:`failures` the others by kind, and :func:`incomplete_reason` says
when too few finished to decide.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

from prover_core.budget import TurnBudget
from prover_core.clock import METER, Meter, PolicyClock
from prover_core.config import ProverConfig
from prover_core.continuations import Continuer, failure_kind, metered, usage_error
from prover_core.data import Outcome, Segment, Trajectory
from prover_core.errors import BudgetExhaustedError, ContinuationLimitError, ContinuationTimeoutError

__all__ = ["Result", "Runner", "failures", "halt", "incomplete_reason", "tally"]

Result = Outcome | BaseException
"""A continuation's outcome, or the exception it failed with."""


class Runner:
    """Launches the continuations of one verification, with the concurrency and wall-time limits, each
    with a :class:`Meter` on the call's :class:`PolicyClock`."""

    def __init__(
        self,
        trajectory: Trajectory,
        continuer: Continuer,
        config: ProverConfig,
        limit: asyncio.Semaphore,
        clock: PolicyClock | None = None,
        budget: TurnBudget | None = None,
    ) -> None:
        self.trajectory, self.continuer, self.config, self.limit = trajectory, continuer, config, limit
        self.clock = clock or PolicyClock()
        self.budget = budget
        """The call's turn budget (:mod:`prover_core.budget`): metered continuations take each turn from it, the
        others reserve ``max_continuation_turns`` before they start."""
        self.reserve = 0 if budget is None or metered(continuer) else config.max_continuation_turns
        self.budget_stopped = 0
        """Continuations the budget stopped (or did not start)."""
        self.budget_turns = 0
        """Policy turns taken by continuations the budget then stopped: spent, and no outcome for them."""
        self._budget_meters: set[int] = set()
        self.spent = 0
        """Continuations launched (started running; finished, failed or stopped)."""
        self.cancelled = 0
        """Continuations launched, then stopped or discarded because the other boundary settled the decision."""
        self.cancelled_turns = 0
        self.last_round = 0
        """The clock's round at which this verification's last continuation ended."""

    def meters(self, count: int) -> list[Meter]:
        return [Meter(self.clock) for _ in range(count)]

    async def one(self, turn: int, seed: int, replay: int = 0, meter: Meter | None = None) -> Result:
        """One continuation from ``s_turn``; failures are returned, not raised."""
        if turn == self.trajectory.num_turns:  # terminal post boundary: its outcome is recorded
            return Outcome(success=self.trajectory.success)
        meter = meter or Meter(self.clock)
        meter.budget = self.budget
        async with self.limit:
            if self.reserve and self.budget is not None and not self.budget.take(self.reserve):
                self.budget_stopped += 1
                return BudgetExhaustedError(
                    f"the call's budget of extra policy turns is spent: not started ({self.reserve} turns reserved "
                    f"per continuation, {self.budget.left} left; ProverConfig.max_extra_share)"
                )
            meter.start, meter.started = self.clock.now, True  # one that waited for a slot starts later
            self.spent += 1
            token = METER.set(meter)
            used = 0
            try:
                outcome = await self._call(turn, seed, replay)
                used = outcome.turns
                meter.finish(outcome.turns)
                if outcome.turns > self.config.max_continuation_turns:  # a hook's or an executor's own count
                    reserved = " that the turn budget reserved for it" if self.reserve else ""
                    raise ContinuationLimitError(
                        f"the continuation reported {outcome.turns} policy turns, more than max_continuation_turns "
                        f"({self.config.max_continuation_turns}){reserved}"
                    )
                return outcome
            except BudgetExhaustedError as exc:
                self.budget_stopped += 1
                self.budget_turns += meter.turns
                self._budget_meters.add(id(meter))  # its turns are counted here, not again if curtailment discards it
                return exc
            except Exception as exc:
                fatal = usage_error(exc)
                if fatal is exc:
                    raise
                if fatal is not None:
                    raise fatal from exc
                if self.config.strict:
                    raise
                return exc
            finally:
                METER.reset(token)
                self.last_round = max(self.last_round, meter.start + meter.turns)
                if self.reserve and self.budget is not None:
                    self.budget.give_back(max(0, self.reserve - used))

    async def _call(self, turn: int, seed: int, replay: int) -> Outcome:
        if replay:
            call = self.continuer(self.trajectory, turn, seed, replay=replay)
        else:
            call = self.continuer(self.trajectory, turn, seed)
        timeout = self.config.continuation_timeout_s
        if timeout is None:
            return await call
        try:
            return await asyncio.wait_for(call, timeout)
        except asyncio.TimeoutError as exc:
            raise ContinuationTimeoutError(f"continuation ran past {timeout} s of wall time") from exc

    def pre(self, segment: Segment, seeds: list[int], meters: Sequence[Meter] = ()) -> list[Awaitable[Result]]:
        """Continuations from ``s_l``, one per seed (each with its meter, if given)."""
        return self._launch(segment.start, 0, seeds, meters)

    def post(self, segment: Segment, seeds: list[int], meters: Sequence[Meter] = ()) -> list[Awaitable[Result]]:
        """Continuations from ``s_{r+1}`` (``delta_of="states"``), or from ``s_l`` replaying the segment's
        ``r - l + 1`` recorded actions (``delta_of="choices"``), one per seed."""
        if self.config.delta_of == "choices":
            return self._launch(segment.start, segment.num_turns, seeds, meters)
        return self._launch(segment.end + 1, 0, seeds, meters)

    def _launch(self, turn: int, replay: int, seeds: list[int], meters: Sequence[Meter]) -> list[Awaitable[Result]]:
        none: list[None] = [None] * len(seeds)
        return [self.one(turn, seed, replay, meter) for seed, meter in zip(seeds, list(meters) or none, strict=True)]

    async def pairs(self, segment: Segment, pre_seeds: list[int], post_seeds: list[int]) -> list[Result]:
        """Pre results then post results, in seed order, all launched at once."""
        return await asyncio.gather(*self.pre(segment, pre_seeds), *self.post(segment, post_seeds))

    async def discard(self, tasks: Sequence[asyncio.Future[Result]], meters: Sequence[Meter]) -> None:
        """Stop ``tasks`` (a boundary the decision no longer needs), wait until they have let go, count their cost.

        One that has not started (waiting for a concurrency slot) is cancelled; one that has stops
        before its next turn, after the call it is in (see :mod:`prover_core.clock`), so its turns are all counted.
        """
        halt(tasks, meters)
        await asyncio.gather(*tasks, return_exceptions=True)
        started = [m for m in meters if m.started and id(m) not in self._budget_meters]
        self.cancelled += len(started)
        self.cancelled_turns += sum(m.turns for m in started)


def halt(tasks: Sequence[asyncio.Future[Result]], meters: Sequence[Meter]) -> None:
    """Stop continuations, at once: each one that has not started is cancelled, each one that has stops before its
    next turn (its meter says so)."""
    for task, meter in zip(tasks, meters, strict=True):
        meter.stopped = True
        if not meter.started:
            task.cancel()


def tally(pre: list[Result], post: list[Result]) -> dict[str, int]:
    """The counts of a :class:`~prover_core.data.Verification`: successes and finished continuations per
    boundary, the failed ones, and the policy turns of the finished ones."""
    pre_ok = [r for r in pre if isinstance(r, Outcome)]
    post_ok = [r for r in post if isinstance(r, Outcome)]
    return dict(
        pre_successes=sum(r.success for r in pre_ok),
        pre_count=len(pre_ok),
        post_successes=sum(r.success for r in post_ok),
        post_count=len(post_ok),
        failed_continuations=len(pre) + len(post) - len(pre_ok) - len(post_ok),
        policy_turns=sum(r.turns for r in pre_ok + post_ok),
    )


def failures(results: list[Result]) -> dict[str, int]:
    """The failed continuations among ``results``, by kind (:func:`~prover_core.continuations.failure_kind`)."""
    out: dict[str, int] = {}
    for r in results:
        if not isinstance(r, Outcome):
            kind = failure_kind(r)
            out[kind] = out.get(kind, 0) + 1
    return out


def incomplete_reason(
    pre: list[Result], post: list[Result], need: int, drawn: int, not_run: str | None = None
) -> str | None:
    """Why too few continuations finished to decide, or ``None``; the boundary ``not_run`` (curtailment) is exempt."""
    finished = {"pre": sum(isinstance(r, Outcome) for r in pre), "post": sum(isinstance(r, Outcome) for r in post)}
    if all(n >= need or name == not_run for name, n in finished.items()):
        return None
    first = next(r for r in pre + post if not isinstance(r, Outcome))
    counts = ", ".join(f"{name} not run" if name == not_run else f"{name} {n}/{drawn}" for name, n in finished.items())
    return f"too few finished continuations ({counts}, need {need}); first error: {type(first).__name__}: {first}"
