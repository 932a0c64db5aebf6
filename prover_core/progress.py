"""Progress of a ``compute_bonus`` call, round by round, continuation by continuation and group by group, and the
wall time of each stage.

A host hooks its progress bar to ``compute_bonus(..., progress=fn)``: ``fn`` receives a :class:`Progress` each time
verification's rounds of policy calls move on (``kind="round"``), each time a continuation ends (``"continuation"``)
and each time an eligible group is finished (``"group"``: accepted, rejected, declined or skipped), in the order they
happen. Since every group is verified together, groups tend to finish near the end of the call; rounds and
continuations move all along. Group events are logged at INFO on the ``prover_core`` logger, the others at most
once a second (:class:`ProgressLog`).

Stage times (``Report.timings``, logged as ``prover/time/<name>``): groups are judged and verified
concurrently, so a stage's time is the wall time during which at least one group was in it (the length
of the union of its intervals, :func:`union_length`), not a sum over groups. ``propose`` and ``verify``
can therefore overlap, and with ``outside`` (everything outside them: validation, trigger, GRPO and the
bonus) sum to more than ``total``, the wall time of the whole call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from prover_core.report import GroupRecord
from prover_core.text import shorten

__all__ = ["Progress", "ProgressKind", "ProgressFn", "StageClock", "format_progress", "union_length"]

ProgressKind = Literal["round", "continuation", "group"]
"""What a :class:`Progress` event reports: a round of policy calls moved on, a continuation ended, a group finished."""


@dataclass(frozen=True)
class Progress:
    """Where a ``compute_bonus`` call stands: ``done`` of its ``total`` eligible groups finished, ``continuations``
    ended, verification at round ``rounds`` of policy calls. ``kind`` says what just moved; ``group`` is the group
    that just finished (``kind="group"``), else ``None``.

    A bar of groups: ``progress=lambda e: e.kind == "group" and bar.update(1)`` (``total=event.total``); a bar that
    moves during verification: ``bar.update(1)`` on ``kind == "continuation"`` (``unit="continuation"``).
    """

    done: int
    total: int
    group: GroupRecord | None
    seconds: float
    """Wall time since the call started."""
    kind: ProgressKind = "group"
    continuations: int = 0
    """Continuations ended so far (finished, failed or stopped)."""
    rounds: int = 0
    """Verification's rounds of sequential policy calls so far (:class:`~prover_core.clock.PolicyClock`)."""


ProgressFn = Callable[[Progress], object]
"""A callback that receives each :class:`Progress` update."""


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by ``intervals`` ``[start, end]``; overlaps count once."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        covered += end - max(start, reach)
        reach = end
    return covered


@dataclass
class StageClock:
    """Records when each stage of each group ran (``perf_counter`` intervals)."""

    intervals: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.intervals.setdefault(name, []).append((start, time.perf_counter()))

    def wall(self, name: str) -> float:
        return union_length(self.intervals.get(name, ()))


def format_progress(event: Progress) -> str:
    """The INFO line of an event, e.g. ``group g03 accepted (Delta = +0.625); 3/11 eligible groups done, 4.2 s``
    or ``verifying: round 7 of policy calls, 40 continuations ended; 0/11 eligible groups done, 1.3 s``."""
    g = event.group
    tally = f"{event.done}/{event.total} eligible groups done, {event.seconds:.1f} s"
    if g is None:
        return f"verifying: round {event.rounds} of policy calls, {event.continuations} continuations ended; {tally}"
    found = f" ({g.verification.delta_text})" if g.verification is not None else ""
    why = f": {shorten(g.reason, 160)}" if g.status in ("declined", "skipped") and g.reason else ""
    return f"group {g.group_id} {g.status}{found}{why}; {tally}"


LOG_EVERY_S = 1.0
"""The least time between two logged round or continuation events."""


@dataclass
class ProgressLog:
    """Which events reach the log: every group's, and a round's or a continuation's at most every ``every`` s."""

    every: float = field(default_factory=lambda: LOG_EVERY_S)
    last: float = field(default_factory=time.perf_counter)

    def wants(self, event: Progress) -> bool:
        now = time.perf_counter()
        if event.kind == "group" or now - self.last >= self.every:
            self.last = now
            return True
        return False
