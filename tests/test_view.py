"""The credit view: per turn GRPO advantage, bonus and Delta (hand-worked), as data, text and a plot."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from prover_core import Decline, Outcome, Proposal, ProverConfig, Segment, SegmentRules, Trajectory, compute_bonus
from prover_core.text import shorten
from prover_core.view import credit_view, plot_credit, render_credit
from tests.conftest import importorskip, make_trajectory

LONG = "You are in a kitchen. " * 6 + "A fridge hums."
# g-win: w0 succeeds (1 of 4). g-decline: d0 succeeds (1 of 4), the judge declines.
BATCH = [
    make_trajectory("w0", "g-win", True, list("abcd"), observations=["start", LONG, "hall", "door"]),
    *(make_trajectory(f"w{i}", "g-win", False, list("abxd")) for i in (1, 2, 3)),
    make_trajectory("d0", "g-decline", True, list("abcd")),
    *(make_trajectory(f"d{i}", "g-decline", False, list("abxd")) for i in (1, 2, 3)),
]


class TurnsOneTwo:
    def propose(self, success: Trajectory, failures: list[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        if success.group_id == "g-decline":
            return Decline(reason="nothing stands out")
        return Proposal(segment=Segment(trajectory_id=success.id, start=1, end=2), rationale="turn 2 picks c " * 12)


def result(lam: float = 0.5):  # type: ignore[no-untyped-def]
    """Continuations from turn 3 (after the segment) succeed 3 of 4 times (all calls but the 4th), from
    turn 1 (before it) never: Delta = 3/4 - 0 = 0.75, bonus lam * Delta = 0.375 on turns 1 and 2.
    GRPO: 1 success of 4, A = 1 - 1/4 = 0.75 for w0, -0.25 for the others."""
    calls = Counter[int]()

    def continue_from(t: Trajectory, turn: int, seed: int) -> Outcome:
        calls[turn] += 1
        return Outcome(success=turn == 3 and calls[turn] != 4, turns=1)

    return compute_bonus(
        BATCH,
        judge=TurnsOneTwo(),
        continue_from=continue_from,
        config=ProverConfig(k=4, lam=lam, paired_seeds=True, seed=0),
    )


def test_the_view_holds_advantage_bonus_and_delta_per_turn() -> None:
    r = result()
    delta = r.report.groups[0].verification.delta  # type: ignore[union-attr]
    (view,) = credit_view(r)  # default: the runs the judge segmented (the decline proposed nothing)
    assert view.trajectory_id == "w0" and view.verified_run and view.group.status == "accepted"
    assert [(row.turn, row.advantage, row.bonus, row.delta, row.in_segment) for row in view.turns] == [
        (0, 0.75, 0.0, None, False),
        (1, 0.75, 0.5 * delta, delta, True),
        (2, 0.75, 0.5 * delta, delta, True),
        (3, 0.75, 0.0, None, False),
    ]
    assert [row.total for row in view.turns] == list(r.turn_advantages("w0"))
    assert view.evidence == "turn 2 picks c " * 12


def test_hand_worked_delta() -> None:
    v = result().report.groups[0].verification
    assert v is not None and (v.pre_successes, v.post_successes, v.delta) == (0, 3, 0.75)


def test_any_trajectory_can_be_viewed_and_a_declined_group_gives_its_reason() -> None:
    r = result()
    d0, w1 = credit_view(r, ["d0", "w1"])
    assert not d0.verified_run and d0.evidence == "nothing stands out" and d0.group.status == "declined"
    assert [row.bonus for row in d0.turns] == [0.0] * 4 and all(row.delta is None for row in d0.turns)
    assert [row.advantage for row in w1.turns] == [-0.25] * 4
    with pytest.raises(KeyError, match="nope"):
        credit_view(r, ["nope"])


def test_the_text_is_short_lines_with_observations_cut_at_words() -> None:
    text = render_credit(result(), width=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[:2] == ["w0: succeeded, 4 turns; group g-win (1/4 succeeded): accepted", "  judge: turns 1..2"]
    assert lines[2].startswith("  evidence: turn 2 picks c") and lines[3].startswith("    picks c turn 2")
    assert "  verify: pre 0/4, post 3/4, Delta = +0.750: accepted" in lines
    obs_width = 80 - 59
    row = next(line for line in lines if line.startswith("     1 "))
    assert row == (f"     1 {shorten(LONG, obs_width):<{obs_width}} {'b':<16}  +0.750   0.375   +1.125  +0.750 <")
    assert shorten(LONG, obs_width) == "You are in a…"  # whole words only ("kitchen." does not fit), then the mark
    assert [line for line in lines if line.startswith("     3 ")] == [
        f"     3 {'door':<{obs_width}} {'d':<16}  +0.750   0.000   +0.750"
    ]
    with pytest.raises(ValueError, match="width"):
        render_credit(result(), width=40)


def test_the_plot_draws_the_advantage_and_the_bonus_on_top(tmp_path: Path) -> None:
    importorskip("matplotlib", reason="plot_credit needs matplotlib (the bench extra)")
    r = result()
    fig = plot_credit(r, "w0", tmp_path / "credit.png")
    assert (tmp_path / "credit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (ax,) = fig.axes
    bars = [(p.get_x() + p.get_width() / 2, p.get_y(), p.get_height()) for p in ax.patches if p.get_width() < 1]
    assert bars == [
        *((t, 0.0, 0.75) for t in range(4)),
        (0, 0.75, 0.0),
        (1, 0.75, 0.375),
        (2, 0.75, 0.375),
        (3, 0.75, 0.0),
    ]
    assert "Delta = +0.750" in ax.get_title()


@pytest.mark.parametrize(
    "text, width, short",
    [
        ("short", 10, "short"),
        ("a  b\n c", 10, "a b c"),  # whitespace collapsed
        ("one two three", 9, "one two…"),  # the word that does not fit is dropped
        ("one two three", 8, "one two…"),
        ("one two three", 7, "one…"),
        ("abcdefghij", 5, "abcd…"),  # one long word: cut inside
        ("one, two", 6, "one…"),  # no dangling punctuation before the mark
    ],
)
def test_shorten_cuts_at_word_boundaries(text: str, width: int, short: str) -> None:
    assert shorten(text, width) == short and len(short) <= width
