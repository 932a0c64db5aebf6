"""The TRL adapter's pure parts: turn spans, trajectories from rows, group ownership, report merging.

These need neither trl nor torch (importing ``prover_trl`` must not import them).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from prover_core import GroupRecord, ProverConfig, Report, Trajectory, Turn
from prover_trl import ProverTRLError, Row, build_trajectory, check_spans, mask_runs, owners
from prover_trl.batch import group_layout, merge_reports


def test_importing_prover_trl_imports_neither_trl_nor_torch() -> None:
    code = "import sys, prover_trl; print('torch' in sys.modules, 'trl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@pytest.mark.parametrize(
    ("mask", "runs"),
    [
        ([], []),
        ([0, 0], []),
        ([1, 1, 1], [(0, 3)]),
        ([1, 1, 0, 0, 1, 0, 1, 1], [(0, 2), (4, 5), (6, 8)]),
        ([0, 1, 0], [(1, 2)]),
    ],
)
def test_mask_runs(mask: list[int], runs: list[tuple[int, int]]) -> None:
    assert mask_runs(mask) == runs


@pytest.mark.parametrize("spans", [[(0, 2), (1, 3)], [(0, 0)], [(2, 9)], [(0, 1, 2)]])
def test_bad_explicit_spans_raise(spans: list[tuple[int, ...]]) -> None:
    with pytest.raises(ProverTRLError):
        check_spans(spans, 8)


def _decode(ids: object) -> str:
    return " ".join(f"w{i}" for i in ids)  # type: ignore[attr-defined]


def test_turns_from_mask_runs_with_decoded_text() -> None:
    # completion a0 a0 | o1 | a1 | o2 o2 | a2
    row = Row(
        prompt_ids=[7, 8],
        completion_ids=[1, 2, 3, 4, 5, 6, 9],
        trainable=[1, 1, 0, 1, 0, 0, 1],
        reward=1.0,
        reset={"task": 3},
    )
    t = build_trajectory(row, trajectory_id="s:0", group_id="s:g0", decode=_decode)
    assert [turn.token_span for turn in t.turns] == [(0, 2), (3, 4), (6, 7)]
    assert [turn.observation for turn in t.turns] == ["w7 w8", "w3", "w5 w6"]
    assert [turn.action for turn in t.turns] == ["w1 w2", "w4", "w9"]
    assert t.success is True and t.reset == {"task": 3} and t.group_id == "s:g0"


def test_turns_from_prover_extras() -> None:
    row = Row(
        prompt_ids=[1],
        completion_ids=[1, 2, 3, 4],
        trainable=[1, 1, 1, 1],  # explicit spans override the (single) run
        reward=0.0,
        extras={
            "prover_turn_spans": [[0, 1], [2, 4]],
            "prover_turns": [{"observation": {"room": 1}, "action": "go"}, ("lobby", "stop")],
            "prover_success": True,
        },
    )
    t = build_trajectory(row, trajectory_id="x", group_id="g", decode=_decode)
    assert [(u.observation, u.action, u.token_span) for u in t.turns] == [
        ({"room": 1}, "go", (0, 1)),
        ("lobby", "stop", (2, 4)),
    ]
    assert t.success is True  # prover_success wins over the reward


@pytest.mark.parametrize(
    ("row", "match"),
    [
        (Row([1], [1, 2], [1, 1], 0.5), "binary"),
        (Row([1], [1, 2], [1, 1], float("nan")), "binary"),
        (Row([1], [1, 2], [0, 0], 1.0), "no trainable tokens"),
        (Row([1], [1, 2], [1], 1.0), "trainable mask"),
        (Row([1], [1, 2, 3], [1, 0, 1], 1.0, extras={"prover_turns": [("o", "a")]}), "1 turns"),
        (Row([1], [1, 2], [1, 1], 1.0, extras={"prover_turns": ["oops"]}), "observation"),
    ],
)
def test_malformed_rows_raise(row: Row, match: str) -> None:
    with pytest.raises(ProverTRLError, match=match):
        build_trajectory(row, trajectory_id="r", group_id="g", decode=_decode)


def test_group_layout() -> None:
    assert group_layout(8, 4) == 2
    with pytest.raises(ProverTRLError):
        group_layout(6, 4)


def _traj(tid: str, gid: str, success: bool, turns: int = 2) -> Trajectory:
    return Trajectory(
        id=tid, group_id=gid, turns=[Turn(observation=i, action=i) for i in range(turns)], success=success
    )


def test_owner_is_the_process_holding_the_representative() -> None:
    # 3 processes x 2 rows; group g0 = rows 0-3 spans processes 0 and 1, group g1 = rows 4-7 spans 2 and 3.
    rows = [
        _traj("r0", "g0", False),
        _traj("r1", "g0", False),
        _traj("r2", "g0", True, turns=3),
        _traj("r3", "g0", True, turns=2),  # 2 of 4 succeed: not eligible (rate 0.5)
        _traj("r4", "g1", False),
        _traj("r5", "g1", False),
        _traj("r6", "g1", False),
        _traj("r7", "g1", True),  # 1 of 4: eligible, representative r7 on process 3
    ]
    assert owners(rows, 2, ProverConfig()) == {"g0": 0, "g1": 3}
    rows[3] = _traj("r3", "g0", False)  # now 1 of 4 in g0: representative r2 on process 1
    assert owners(rows, 2, ProverConfig()) == {"g0": 1, "g1": 3}
    rows[2] = _traj("r2", "g0", True, turns=5)
    rows[1] = _traj("r1", "g0", True, turns=4)  # 2 of 4 again
    assert owners(rows, 2, ProverConfig(trigger_high=0.75))["g0"] == 0  # shortest success r1 is on process 0


def test_merge_reports_adds_the_processes_turn_budgets() -> None:
    """Each process caps its own rollout's turns (``max_extra_share``): the step's cap is their sum."""
    assert merge_reports([Report(turn_budget=3), Report(turn_budget=4), Report()]).turn_budget == 7
    assert merge_reports([Report(), Report()]).turn_budget is None
    assert "prover/turn_budget" not in merge_reports([Report()]).metrics()


def test_merge_reports_sums_counts() -> None:
    a = Report(
        groups=[GroupRecord(group_id="g0", size=4, successes=0, status="not_eligible")],
        judge_calls=0,
        rollout_turns=8,
        rollout_episodes=4,
        judge_stats={"tokens": 3.0},
        timings={"propose": 0.5, "verify": 2.0, "total": 3.0},
    )
    b = Report(
        groups=[GroupRecord(group_id="g1", size=4, successes=1, status="declined")],
        judge_calls=1,
        rollout_turns=9,
        rollout_episodes=4,
        judge_stats={"tokens": 4.0, "retries": 1.0},
        timings={"propose": 1.5, "verify": 1.0, "outside": 0.25, "total": 2.5},
    )
    merged = merge_reports([a, b])
    assert [g.group_id for g in merged.groups] == ["g0", "g1"]
    assert (merged.judge_calls, merged.rollout_turns, merged.rollout_episodes) == (1, 17, 8)
    assert merged.judge_stats == {"tokens": 7.0, "retries": 1.0}
    assert merged.metrics()["prover/groups_declined"] == 1.0
    # processes verify at the same time: each stage took as long as on the slowest process
    assert merged.timings == {"propose": 1.5, "verify": 2.0, "outside": 0.25, "total": 3.0}
    assert merged.metrics()["prover/time/total"] == 3.0


def test_owners_leave_out_rows_of_skipped_groups() -> None:
    def t(i: int, g: str, ok: bool, n: int = 1) -> Trajectory:
        turns = tuple(Turn(observation="o", action="a", token_span=(2 * k, 2 * k + 1)) for k in range(n))
        return Trajectory(id=f"r{i}", group_id=g, reset={}, turns=turns, success=ok)

    # rows 0-3: g0 (left out), rows 4-7: g1 with its success on row 6 (process 3 at 2 rows per process)
    rows = [None] * 4 + [t(4, "g1", False), t(5, "g1", False), t(6, "g1", True), t(7, "g1", False)]
    assert owners(rows, 2, ProverConfig()) == {"g1": 3}
