"""compute_bonus reports progress on the ``prover_core`` logger: a summary line per call at INFO,
each group's trigger, proposal and verification at DEBUG."""

from __future__ import annotations

import logging

import pytest

from prover_core import Decline, Outcome, Proposal, ProverConfig, Segment, SegmentRules, Trajectory, compute_bonus
from tests.conftest import make_trajectory

# g-win: 1 success of 4 (eligible); g-lose: no success (not eligible); g-decline: 1 of 4, the judge declines.
BATCH = [
    make_trajectory("w0", "g-win", True, list("abcd")),
    *(make_trajectory(f"w{i}", "g-win", False, list("abxd")) for i in (1, 2, 3)),
    *(make_trajectory(f"l{i}", "g-lose", False, list("abxd")) for i in range(4)),
    make_trajectory("d0", "g-decline", True, list("abcd")),
    *(make_trajectory(f"d{i}", "g-decline", False, list("abxd")) for i in (1, 2, 3)),
]


class TurnTwo:
    """Proposes turn 2 for g-win and declines g-decline."""

    def propose(self, success: Trajectory, failures: list[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        if success.group_id == "g-decline":
            return Decline(reason="nothing stands out")
        return Proposal(segment=Segment(trajectory_id=success.id, start=2, end=2))


def run(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    """Continuations take 2 turns; they succeed from after turn 2 (the post boundary, turn 3) and fail
    from before it: Delta = 1."""
    with caplog.at_level(level, logger="prover_core"):
        compute_bonus(
            BATCH,
            judge=TurnTwo(),
            continue_from=lambda t, turn, seed: Outcome(success=turn == 3, turns=2),
            config=ProverConfig(k=4),
        )
    return [r.getMessage() for r in caplog.records if r.name.startswith("prover_core")]


def test_one_summary_line_per_call_at_info(caplog: pytest.LogCaptureFixture) -> None:
    lines = run(caplog, logging.INFO)
    assert len(lines) == 1
    # 8 continuations (K = 4 from each boundary), 2 turns each, against a rollout of 12 x 4 = 48 turns
    assert lines[0].startswith(
        "compute_bonus: 3 groups, 2 eligible: 1 accepted, 0 rejected, 1 declined, 0 skipped; "
        "8 continuations, 16 policy turns (+33.3% of the rollout's 48); "
    )
    assert lines[0].endswith(" s")


def test_each_stage_of_each_group_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    lines = run(caplog, logging.DEBUG)
    assert lines[:-1] == [
        "group g-win: success rate 1/4, eligible",
        "group g-lose: success rate 0/4, not eligible",
        "group g-decline: success rate 1/4, eligible",
        "group g-win: proposed turns [2, 2] of w0",
        "group g-decline: the judge declined: nothing stands out",
        "group g-win: verified Delta = +1.000 (pre 0/4, post 4/4, 8 continuations): accepted",
    ]
    assert lines[-1].startswith("compute_bonus: 3 groups")


def test_silent_above_info(caplog: pytest.LogCaptureFixture) -> None:
    assert run(caplog, logging.WARNING) == []
