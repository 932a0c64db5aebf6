"""Boundary cases of the decision code that no other test reaches (issue 47): the terminal post boundary of a failed
run, the seed reaching the cap's draw, byte-like rewards, the longest failure by length alone."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from prover_core import DivergenceJudge, Outcome, ProverConfig, Segment, SegmentRules, Trajectory, compute_bonus
from prover_core.allocate import Case, Context, cap
from prover_core.data import Decline, Proposal, as_binary
from prover_core.errors import InvalidOutcomeError
from prover_core.trigger import capped, longest_failure, trigger
from tests.conftest import make_trajectory


class Fixed:
    """Proposes turns ``start..end`` of whatever run it is asked about."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end

    def propose(self, success: Trajectory, others: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        return Proposal(segment=Segment(trajectory_id=success.id, start=self.start, end=self.end))


def test_a_failed_runs_terminal_post_boundary_is_its_recorded_failure() -> None:
    """Negative credit with ``nonterminal_end=False``: the segment ends on the failed run's last turn, so the post
    boundary is the end of the episode. Its outcome is the recorded one (a failure: ``0/K``), not a continuation's:
    the drop from ``K/K`` is ``-1`` and is debited."""
    good = [make_trajectory(f"s{i}", "g", True, ["a", "b", "c"]) for i in range(3)]
    bad = make_trajectory("f", "g", False, ["a", "b", "x", "y", "z"])  # 5 turns: the post boundary of (3, 4) is 5
    calls: list[int] = []

    def hook(trajectory: Trajectory, turn: int, seed: int) -> bool:
        calls.append(turn)
        return True  # every continuation that runs succeeds: only the recorded outcome can fail

    for curtail in (True, False):
        calls.clear()
        config = ProverConfig(k=4, negative_credit=True, nonterminal_end=False, curtail=curtail)
        result = compute_bonus([*good, bad], judge=Fixed(3, 4), continue_from=hook, config=config)
        (record,) = result.report.groups
        assert (record.direction, record.trajectory_id, record.status) == ("drop", "f", "accepted")
        v = record.verification
        assert v is not None and (v.pre_successes, v.pre_count, v.post_successes, v.post_count) == (4, 4, 0, 4)
        assert v.delta == -1.0 and set(calls) == {3}  # no continuation from the end of the episode
        np.testing.assert_array_equal(result.turn_bonus["f"], [0.0, 0.0, 0.0, -1.0, -1.0])
    # the same segment of a successful run's end: its recorded success, K/K at the post boundary
    won = make_trajectory("w", "h", True, ["a", "b", "c", "d", "e"])
    lost = [make_trajectory(f"l{i}", "h", False, ["a", "b"]) for i in range(3)]
    config = ProverConfig(k=4, nonterminal_end=False)
    result = compute_bonus([won, *lost], judge=Fixed(3, 4), continue_from=lambda t, turn, seed: False, config=config)
    (record,) = result.report.groups
    v = record.verification
    assert v is not None and (v.pre_successes, v.post_successes, record.status) == (0, 4, "accepted")


def one_success_groups(n: int) -> list[Trajectory]:
    return [
        make_trajectory(f"g{g}-{i}", f"g{g}", i == 0, ["a", "b", "c"] if i == 0 else ["a", "x", "y", "z"])
        for g in range(n)
        for i in range(4)
    ]


def test_the_config_seed_draws_the_capped_groups() -> None:
    """``max_verified_groups`` keeps the subset :func:`capped` draws with ``ProverConfig.seed``: a different seed
    keeps other groups, through the allocation step :func:`~prover_core.allocate.cap` and through
    :func:`compute_bonus`; the trigger itself lets every group of the band through."""
    batch = one_success_groups(6)
    groups: dict[str, list[Trajectory]] = {}
    for t in batch:
        groups.setdefault(t.group_id, []).append(t)
    ids = list(groups)
    kept_sets = set()
    for seed in range(8):
        config = ProverConfig(max_verified_groups=2, seed=seed)
        eligible, records = trigger(groups, config.stages.trigger)
        assert [gid for gid, _ in eligible] == ids and not records
        want = capped(ids, 2, seed)[0]
        kept, left = cap([Case(gid, groups[gid], d) for gid, d in eligible], Context(config.stages))
        assert [c.group_id for c in kept] == want
        assert sorted(r.group_id for r in left) == sorted(set(ids) - set(want))
        assert all(r.status == "unverified" and "max_verified_groups=2" in r.reason for r in left)
        kept_sets.add(tuple(want))
        if seed < 3:
            result = compute_bonus(
                batch, judge=DivergenceJudge(), continue_from=lambda t, turn, s: turn > 1, config=config
            )
            verified = sorted(g.group_id for g in result.report.groups if g.status != "unverified")
            assert verified == sorted(want)
    assert len(kept_sets) >= 4  # the seed moves the draw (8 seeds over 15 subsets)


@pytest.mark.parametrize("value", [b"1", b"0", bytearray(b"1"), bytearray(b"0"), memoryview(b"1")])
def test_byte_like_rewards_are_refused(value: object) -> None:
    """``float(bytearray(b"1")) == 1.0``: a byte string must not pass as a reward of 1 (or 0)."""
    with pytest.raises(ValueError, match="binary reward"):
        as_binary(value)
    with pytest.raises(ValueError, match="binary"):
        Trajectory(id="t", group_id="g", turns=[], success=value)
    with pytest.raises(InvalidOutcomeError):
        Outcome(success=value)  # type: ignore[arg-type]


def test_the_longest_failure_is_chosen_by_length_alone() -> None:
    """Distinct lengths, so no tie-break decides: the longest failed run, wherever it stands and whatever its id."""
    runs = [
        make_trajectory("a", "g", False, list("xy")),
        make_trajectory("c", "g", True, list("xyzwvu")),  # longer, but a success
        make_trajectory("z", "g", False, list("xyzw")),
        make_trajectory("b", "g", False, list("xyz")),
    ]
    for order in (runs, runs[::-1], runs[1:] + runs[:1]):
        assert longest_failure(order).id == "z"
