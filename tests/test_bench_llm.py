"""The LLM-shaped benchmark's torch-free parts: tasks, restore, GiGPO, budget matching, judges, report checks.

The parts that need torch (the transformer, its cache, the loss, behaviour cloning) are tested in
tests/adapters/test_trl_llm_bench.py, which runs in the TRL environment (it has CPU torch).
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest

from prover_bench.llm import report
from prover_bench.llm import tasks as T
from prover_bench.llm.credit import (
    OracleJudge,
    SameLengthRandomJudge,
    continuation_turns,
    gigpo_turns,
    grpo_turns,
    matched_group_size,
    trajectory,
)
from prover_bench.methods import step_advantages
from prover_core.data import Decline, Proposal, Segment, SegmentRules
from prover_core.judges import AnchorJudge

GO, TAKE, SKIP, OPEN = ("go", -1), ("take", -1), ("skip", -1), ("open", -1)


def test_tasks_are_generated_as_designed() -> None:
    for i in range(300):
        task = T.make_task(i)
        assert task == T.make_task(i)  # a pure function of the id
        keys = [r for r in task.rooms if r >= 0]
        assert T.HALLS[0] <= task.halls <= T.HALLS[1]
        assert len(keys) == 4 and len(set(keys)) == 4 and task.goal in keys
        assert task.rooms[0] == T.HALL and task.rooms[-1] == T.DOOR and T.DOOR not in task.rooms[:-1]
        assert task.limit == len(task.rooms) + math.ceil(task.halls / 2) + 2
        assert 20 <= task.limit <= 34
        prefix = len(T.prefix_tokens(task))
        assert prefix + task.limit * (3 + T.MAX_ACTION_TOKENS) <= 256  # fits the transformer's context
    goal_order = [sorted(r for r in T.make_task(i).rooms if r >= 0).index(T.make_task(i).goal) for i in range(400)]
    assert len(set(goal_order)) == 4


def _play(task: T.Task, policy: dict[str, T.Action], slip_free: bool = True) -> T.Record:
    """Walk ``task`` with ``go`` in halls, ``open`` at the door and ``policy["goal"|"before"|"after"]`` in key rooms."""
    record = T.start_record(task)
    while not record.final.done:
        s = record.final
        item = task.rooms[s.room]
        if item >= 0:
            where = "goal" if item == task.goal else "before" if s.room < task.goal_room else "after"
            action = policy[where]
        else:
            action = GO if item == T.HALL else OPEN
        T.play(record, T.action_tokens(action), 0.99 if slip_free else 0.0)
    return record


def test_the_pivot_decides_success_as_designed() -> None:
    for i in range(100):
        task = T.make_task(i)
        ok = _play(task, {"goal": TAKE, "before": SKIP, "after": SKIP})
        assert ok.success and ok.final.held == task.goal
        assert _play(task, {"goal": TAKE, "before": TAKE, "after": SKIP}).success  # earlier keys are replaced
        assert not _play(task, {"goal": SKIP, "before": TAKE, "after": TAKE}).success  # the pivot missed
        if task.goal_room < max(r for r, c in enumerate(task.rooms) if c >= 0):
            assert not _play(task, {"goal": TAKE, "before": SKIP, "after": TAKE}).success  # goal key replaced
        # the recorded pivot is exactly the goal-room take
        pivots = [t for t, (s, a) in enumerate(zip(ok.states, ok.actions, strict=True)) if T.is_pivot(task, s, a)]
        assert len(pivots) == 1 and ok.states[pivots[0]].room == task.goal_room
        # always slipping: the agent never leaves room 0 and runs out of turns
        stuck = _play(task, {"goal": TAKE, "before": SKIP, "after": SKIP}, slip_free=False)
        assert not stuck.success and stuck.turns == task.limit and stuck.final.room == 0


def test_a_mistake_is_exactly_a_decision_that_makes_success_impossible() -> None:
    """Hand-worked: leaving the goal room without its key, or replacing the goal key; and over 2000 expert
    episodes that reached the door, success iff no turn was a mistake."""
    tasks = [T.make_task(i) for i in range(100)]
    task = next(t for t in tasks if t.goal_room < max(r for r, c in enumerate(t.rooms) if c >= 0))

    def mistakes(record: T.Record) -> list[int]:
        pairs = zip(record.states, record.actions, strict=True)
        return [s.room for s, a in pairs if T.is_mistake(record.task, s, a)]

    assert mistakes(_play(task, {"goal": TAKE, "before": TAKE, "after": SKIP})) == []
    assert mistakes(_play(task, {"goal": SKIP, "before": TAKE, "after": SKIP})) == [task.goal_room]
    after = [r for r, c in enumerate(task.rooms) if c >= 0 and r > task.goal_room]
    assert mistakes(_play(task, {"goal": TAKE, "before": SKIP, "after": TAKE})) == after[:1]  # the first swap only
    rng = np.random.default_rng(5)
    at_door = 0
    for i in range(2000):
        record = T.simulate(T.make_task(i % 50), "expert", rng)
        if record.actions[-1] == OPEN:
            at_door += 1
            assert record.success == (mistakes(record) == [])
    assert at_door > 1500


def test_continuations_are_credited_against_their_own_boundary() -> None:
    """``A_c = R_c - mean of the other continuations from the same boundary`` (hand-worked), on every turn."""
    task = T.make_task(3)
    win = _play(task, {"goal": TAKE, "before": SKIP, "after": SKIP})
    lose = _play(task, {"goal": SKIP, "before": SKIP, "after": SKIP})
    records = [win, lose, lose, win, lose]
    rows = continuation_turns([("t", 2), ("t", 2), ("t", 2), ("t", 7), ("u", 2)], records)
    assert [r.shape[0] for r in rows] == [r.turns for r in records]
    assert [float(r[0]) for r in rows] == [1.0, -0.5, -0.5, 0.0, 0.0]  # 1 - 0, 0 - 1/2, 0 - 1/2; alone: 0
    assert all((r == r[0]).all() for r in rows)


def test_transitions_slip_at_the_stated_rate() -> None:
    task = T.make_task(0)
    hall = T.State(room=0)
    assert T.step(task, hall, GO, T.SLIP - 1e-9).room == 0  # u < SLIP: stays
    assert T.step(task, hall, GO, T.SLIP).room == 1  # u >= SLIP: advances
    rng = np.random.default_rng(0)
    n = 20_000
    stayed = sum(T.step(task, hall, GO, float(rng.random())).room == 0 for _ in range(n))
    assert abs(stayed / n - T.SLIP) < 4 * math.sqrt(T.SLIP * (1 - T.SLIP) / n)
    key = T.State(room=task.rooms.index(task.goal))
    for u in (0.0, 0.5, 0.999):  # key rooms and the door do not slip
        assert T.step(task, key, TAKE, u) == T.State(key.room + 1, task.goal, 1)
        assert T.step(task, key, SKIP, u) == T.State(key.room + 1, T.NONE, 1)
        assert T.step(task, key, ("wait", -1), u) == T.State(key.room, T.NONE, 1)
    door = T.State(room=len(task.rooms) - 1, held=task.goal)
    assert T.step(task, door, OPEN, 0.0) == T.State(door.room, task.goal, 1, done=True, success=True)


def test_actions_parse_and_invalid_sequences_waste_a_turn() -> None:
    for action in (GO, TAKE, SKIP, OPEN, ("wait", -1)):
        toks = T.action_tokens(action)
        assert 2 <= len(toks) <= 4 and toks[-1] == T.END and T.parse(toks) == action
    bad = [T.TOKEN["take"], T.TOKEN["ahead"], T.END]
    assert T.parse(bad) == ("invalid", -1)
    task = T.make_task(1)
    assert T.step(task, T.State(), T.parse(bad), 0.9) == T.State(0, T.NONE, 1)


def test_restore_is_exact() -> None:
    rng = np.random.default_rng(3)
    for i in range(20):
        rec = T.simulate(T.make_task(i), "expert", rng)
        for t in range(rec.turns):
            r = T.restored(rec, t)
            assert r.final == rec.states[t] and r.tokens == rec.tokens[: rec.obs_start[t]]
            for (a, b), u in zip(rec.spans[t:], rec.draws[t:], strict=True):  # replay: the same episode
                T.play(r, rec.tokens[a:b], u)
            assert r.tokens == rec.tokens and r.final == rec.final and r.states == rec.states[t:]
    with pytest.raises(ValueError, match="outside"):
        T.restored(rec, rec.turns)


def _two_turn_group() -> list[T.Record]:
    """Key room of colour 0 (the goal), then the door: take-and-open succeeds, skip-and-open fails."""
    task = T.Task(id=-1, goal=0, rooms=(0, T.DOOR), limit=4)
    out = []
    for first in (TAKE, SKIP):
        rec = T.start_record(task)
        T.play(rec, T.action_tokens(first), 0.5)
        T.play(rec, T.action_tokens(OPEN), 0.5)
        out.append(rec)
    return out


def test_gigpo_on_a_hand_worked_group() -> None:
    # step_advantages: returns centred within each anchor
    got = step_advantages(["a", "b", "a", "b", "c"], [1.0, 0.5, 0.0, 0.0, 0.9])
    np.testing.assert_allclose(got, [0.5, 0.25, -0.5, -0.25, 0.0])
    win, loss = _two_turn_group()
    assert win.success and not loss.success
    # A^E = +-0.5; turn 0 shares the anchor (room 0, key 0, none): returns 0.95 * 1 and 0 -> +-0.475;
    # turn 1 anchors differ (held 0 vs none): A^S = 0
    adv = gigpo_turns([[win, loss]], gamma=0.95, omega=1.0)
    np.testing.assert_allclose(adv[0], [0.5 + 0.475, 0.5])
    np.testing.assert_allclose(adv[1], [-0.5 - 0.475, -0.5])
    np.testing.assert_allclose(grpo_turns([[win, loss]])[0], [0.5, 0.5])


def test_budget_matching_arithmetic() -> None:
    assert matched_group_size(8, 1000, 500) == 12  # 50% extra env steps -> 12 members
    assert matched_group_size(8, 1000, 0) == 8
    assert matched_group_size(8, 1000, 60) == 8  # 8.48 rounds down
    assert matched_group_size(8, 1000, 70) == 9  # 8.56 rounds up
    assert matched_group_size(8, 200, 1000) == 48
    with pytest.raises(ValueError):
        matched_group_size(8, 0, 10)


def test_trajectory_carries_spans_state_and_the_pivot() -> None:
    win, _ = _two_turn_group()
    traj = trajectory(win, "t0", "g0")
    assert traj.success and traj.num_turns == 2
    assert [turn.token_span for turn in traj.turns] == win.spans
    assert traj.turns[0].info == {"state": (0, T.NONE, 0), "pivot": True, "mistake": False}
    assert traj.turns[0].action == "take the key ." and traj.turns[0].observation == (0, 0, T.NONE)
    assert not traj.turns[1].info["pivot"]


def test_oracle_and_same_length_random_judges() -> None:
    rng = np.random.default_rng(0)
    task = T.make_task(2)
    ok = _play(task, {"goal": TAKE, "before": SKIP, "after": SKIP})
    bad = [T.simulate(task, "expert", rng) for _ in range(3)]
    success = trajectory(ok, "s", "g")
    failures = [trajectory(b, f"f{i}", "g") for i, b in enumerate(bad)]
    rules = SegmentRules()
    proposal = OracleJudge().propose(success, failures, rules)
    pivot = next(t for t, s in enumerate(ok.states) if s.room == task.goal_room)
    assert isinstance(proposal, Proposal) and proposal.segment == Segment(trajectory_id="s", start=pivot, end=pivot)

    class Fixed:
        def __init__(self, answer: Proposal | Decline) -> None:
            self.answer = answer

        def propose(self, *_: object) -> Proposal | Decline:
            return self.answer

    import asyncio

    for width in (1, 3, 4):
        ref = Proposal(segment=Segment(trajectory_id="s", start=0, end=width - 1))
        judge = SameLengthRandomJudge(Fixed(ref), seed=1)
        got = asyncio.run(judge.propose(success, failures, rules))
        assert isinstance(got, Proposal) and got.segment.num_turns == width
        assert rules.violation(got.segment, success) is None
    declined = asyncio.run(SameLengthRandomJudge(Fixed(Decline(reason="no")), 1).propose(success, failures, rules))
    assert isinstance(declined, Decline)
    assert isinstance(AnchorJudge().propose(success, failures, rules), Proposal | Decline)


@dataclass
class _Run:
    seed: int
    success: list[float]
    group_size: int = 8
    logs: list[object] = field(default_factory=list)


def test_the_report_says_first_when_more_samples_do_not_help() -> None:
    flat = {
        "GRPO": {0.001: [_Run(s, [0.2, 0.4 + 0.01 * s]) for s in range(4)]},
        "GRPO budget-matched": {0.001: [_Run(s, [0.2, 0.4 + 0.01 * s], 12) for s in range(4)]},
    }
    assert report.checks(flat)[0].startswith("**This regime cannot show credit assignment**")
    better = dict(flat, **{"GRPO budget-matched": {0.001: [_Run(s, [0.2, 0.5 + 0.011 * s], 12) for s in range(4)]}})
    assert report.checks(better)[0].startswith("More samples help")
    edge = {"GRPO": {0.001: [_Run(0, [0.1, 0.3])], 0.003: [_Run(0, [0.1, 0.5])]}}
    assert any("highest of the grid" in line for line in report.checks(edge))
    middle = {"GRPO": {0.001: [_Run(0, [0.1, 0.3])], 0.002: [_Run(0, [0.1, 0.5])], 0.003: [_Run(0, [0.1, 0.4])]}}
    assert report.checks(middle) == []


@dataclass
class _Log:
    debited: int = 0
    debited_on_mistake: int = 0
    data_rows: int = 0


def test_the_report_counts_debits_and_continuations_trained_on() -> None:
    runs = {
        "GRPO": {1.0: [_Run(0, [0.2, 0.3], logs=[_Log(), _Log()])]},
        "neg": {1.0: [_Run(0, [0.2, 0.3], logs=[_Log(3, 1), _Log(1, 1)])]},
        "data": {1.0: [_Run(0, [0.2, 0.3], logs=[_Log(data_rows=32), _Log(data_rows=16)])]},
    }
    assert report.extra_credit(runs) == [
        "neg (lr 1): 4 failed runs debited in 2 steps, 2 (50%) on a decision that made success impossible.",
        "data (lr 1): 48 continuations trained on in 2 steps (24.0 per step, next to the step's group samples).",
    ]


def test_every_module_imports_without_torch() -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        "import prover_bench.llm as pkg\n"
        "for m in pkgutil.iter_modules(pkg.__path__, 'prover_bench.llm.'):\n"
        "    importlib.import_module(m.name)\n"
        "import prover_core\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_only_llm_without_torch_names_the_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from prover_bench.llm import TORCH_INSTALL
    from prover_core.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["bench", "--only", "llm", "--quick", "--out", "unused"]) == 2
    assert TORCH_INSTALL in capsys.readouterr().err
    assert main(["bench", "--only", "llm,neural", "--out", "unused"]) == 2
    assert "on its own" in capsys.readouterr().err
