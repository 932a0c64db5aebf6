"""Progress of a ``compute_bonus`` call, group by group, and the wall time of each stage.

A host hooks its progress bar to ``compute_bonus(..., progress=fn)``: ``fn`` receives a :class:`Progress`
each time an eligible group is finished (accepted, rejected, declined or skipped), in the order they
finish. The same event is logged at INFO on the ``prover_core`` logger.

Stage times (``Report.timings``, logged as ``prover/time/<name>``): groups are judged and verified
concurrently, so a stage's time is the wall time during which at least one group was in it (the length
of the union of its intervals, :func:`union_length`), not a sum over groups. ``propose`` and ``verify``
can therefore overlap, and with ``outside`` (everything outside them: validation, trigger, GRPO and the
bonus; ``Report.timings["credit"]``, formerly logged as ``time/credit``) sum to more than ``total``, the wall time
of the whole call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from prover_core.report import GroupRecord
from prover_core.text import shorten

__all__ = ["Progress", "ProgressFn", "StageClock", "format_progress", "union_length"]


@dataclass(frozen=True)
class Progress:
    """One eligible group finished: the ``done``-th of ``total`` eligible groups of this call."""

    done: int
    total: int
    group: GroupRecord
    seconds: float
    """Wall time since the call started."""


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
    """The INFO line of one finished group, e.g. ``group g03 accepted (Delta = +0.625): 3/11 groups, 4.2 s``."""
    g = event.group
    found = f" ({g.verification.delta_text})" if g.verification is not None else ""
    why = f": {shorten(g.reason, 160)}" if g.status in ("declined", "skipped") and g.reason else ""
    return (
        f"group {g.group_id} {g.status}{found}{why}; {event.done}/{event.total} eligible groups done, "
        f"{event.seconds:.1f} s"
    )
