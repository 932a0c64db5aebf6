"""Stage 1, Trigger: which groups enter the pipeline, and which successful run represents each.

A group with success rate ``p = (#successes) / G`` is eligible iff ``low < p < high`` (strict;
the paper uses ``(0, 0.5)``, i.e. 1..3 successes of 8). Its representative is the shortest
successful trajectory; ties go to the smallest trajectory id, so the choice does not depend on the
order in which a host hands over the batch. With negative credit on, groups with a rate in
``(negative_trigger_low, negative_trigger_high)`` get negative credit instead, through their longest failed run.
:func:`capped` draws the subset ``max_verified_groups`` keeps (:mod:`prover_core.allocate`), each eligible group
equally likely (a seeded draw that depends on the group ids, not on their order).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from prover_core.data import Trajectory
from prover_core.report import Direction, GroupRecord
from prover_core.stages import TriggerSettings

__all__ = ["capped", "is_eligible", "longest_failure", "representative", "success_rate", "trigger"]


def success_rate(group: Sequence[Trajectory]) -> float:
    """Fraction of the group's trajectories that succeeded."""
    return sum(t.success for t in group) / len(group)


def is_eligible(rate: float, low: float = 0.0, high: float = 0.5) -> bool:
    """``low < rate < high``: a mixed group where success is still the minority."""
    return low < rate < high


def representative(group: Sequence[Trajectory]) -> Trajectory:
    """The shortest successful trajectory (fewest turns; ties: smallest id)."""
    successes = [t for t in group if t.success]
    if not successes:
        raise ValueError("the group has no successful trajectory")
    return min(successes, key=lambda t: (t.num_turns, t.id))


def longest_failure(group: Sequence[Trajectory]) -> Trajectory:
    """The longest failed trajectory (most turns; ties: smallest id): the run negative credit segments."""
    failures = [t for t in group if not t.success]
    if not failures:
        raise ValueError("the group has no failed trajectory")
    return min(failures, key=lambda t: (-t.num_turns, t.id))


def capped(group_ids: Sequence[str], limit: int | None, seed: int = 0) -> tuple[list[str], list[str]]:
    """``(kept, left)``: at most ``limit`` of ``group_ids`` kept, a uniformly random subset (``None``: all).

    Each id's rank is a hash of ``(seed, id)``, so every subset of size ``limit`` is equally likely over seeds,
    and the choice does not depend on the order of ``group_ids``. Both lists keep the input order.
    """
    if limit is None or limit >= len(group_ids):
        return list(group_ids), []
    rank = {g: hashlib.sha256(f"{seed}\x00{g}".encode()).digest() for g in group_ids}
    chosen = set(sorted(group_ids, key=rank.__getitem__)[:limit])
    return [g for g in group_ids if g in chosen], [g for g in group_ids if g not in chosen]


def trigger(
    groups: Mapping[str, Sequence[Trajectory]], settings: TriggerSettings
) -> tuple[list[tuple[str, Direction]], dict[str, GroupRecord]]:
    """Stage 1 over a batch: ``(eligible, records)``.

    ``eligible`` lists ``(group_id, direction)`` in batch order: ``gain`` for a success rate inside
    ``(low, high)``, ``drop`` inside the negative band with ``negative_credit`` (``ProverConfig.stages.trigger``).
    ``records`` holds every other group, ``not_eligible``. Which eligible groups are verified is
    :mod:`prover_core.allocate`'s (``max_verified_groups`` among them, with :func:`capped`).
    """
    records: dict[str, GroupRecord] = {}
    directions: dict[str, Direction] = {}
    for gid, members in groups.items():
        rate, successes = success_rate(members), sum(t.success for t in members)
        if is_eligible(rate, settings.low, settings.high):
            directions[gid] = "gain"
        elif settings.negative_credit and is_eligible(rate, *settings.negative):
            directions[gid] = "drop"
        else:
            records[gid] = GroupRecord(
                group_id=gid,
                size=len(members),
                successes=successes,
                status="not_eligible",
                reason=f"success rate {successes}/{len(members)} outside ({settings.low}, {settings.high})",
            )
    return list(directions.items()), records
