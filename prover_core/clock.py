"""Latency of verification in rounds of sequential policy calls, and how verification stops a continuation.

A :class:`PolicyClock` is shared by every verification of one ``compute_bonus`` call. Each continuation carries a
:class:`Meter`: the round it started at (the clock's reading then) and the policy turns it has taken; every turn
moves the clock to ``start + turns``. That is how a policy that batches every pending call into one (TRL's
``TrainerPolicy``, :class:`~prover_core.batching.Batcher`; a serving engine) makes its calls, so the clock's reading
at the end is verification's critical path in sequential policy calls (``prover/verify_policy_rounds``). A
continuation that runs elsewhere (a ``continue_from`` hook, a Ray worker) moves the clock only when it ends.

Setting ``Meter.stopped`` stops a continuation cooperatively: :func:`~prover_core.continuations.run_continuation` checks
it before each turn (in a worker thread too) and a :class:`~prover_core.batching.Batcher` leaves its queued call
out, so the turns it did take are all counted.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from prover_core.budget import TurnBudget


class PolicyClock:
    """Rounds of sequential policy calls since verification began, as a batching policy makes them.

    Every continuation starts at the clock's current reading and moves it to ``start + turns`` as it takes
    turns: in lockstep, ``now`` is the number of policy calls one after another that verification has needed
    so far. Thread-safe: continuations may run in threads. ``on_round(now)`` is called each time the reading
    moves (in the thread that moved it), e.g. to report progress.
    """

    def __init__(self, on_round: Callable[[int], None] | None = None) -> None:
        self.now = 0
        self.on_round = on_round
        self._lock = threading.Lock()

    def reach(self, round_: int) -> None:
        """A continuation has reached ``round_``."""
        with self._lock:
            moved = round_ > self.now
            if moved:
                self.now = round_
        if moved and self.on_round is not None:
            self.on_round(round_)


@dataclass
class Meter:
    """One continuation's progress: the round it started at, the policy turns it has taken, whether it has
    started (once it holds a concurrency slot) and whether verification has stopped it."""

    clock: PolicyClock = field(default_factory=PolicyClock)
    start: int = 0
    turns: int = 0
    started: bool = False
    stopped: bool = False
    budget: TurnBudget | None = None
    """The call's turn budget (``ProverConfig.max_extra_share``), from which each policy turn is taken."""
    token_budget: TurnBudget | None = None
    """The call's token budget (``ProverConfig.max_extra_token_share``), from which each action's most tokens are
    reserved (:class:`~prover_core.budget.TokenPolicy`)."""
    tokens: int = 0
    """Policy tokens this continuation's actions generated (a :class:`~prover_core.budget.TokenPolicy` under a
    token cap; 0 otherwise)."""

    def acquire(self) -> bool:
        """Take one policy turn from the budget before acting (always, without one); whether it may act."""
        return self.budget is None or self.budget.take(1)

    def tick(self) -> None:
        """One more policy turn taken."""
        self.turns += 1
        self.clock.reach(self.start + self.turns)

    def finish(self, turns: int) -> None:
        """The continuation ended after ``turns`` policy turns (as its :class:`Outcome` says)."""
        self.turns = max(self.turns, turns)
        self.clock.reach(self.start + self.turns)


METER: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("prover_core_meter", default=None)
"""The running continuation's meter: set by verification in the continuation's own task (and carried into
the threads that :func:`~prover_core._aio.in_thread` starts), ticked by
:func:`~prover_core.continuations.run_continuation`."""


__all__ = ["METER", "Meter", "PolicyClock"]
