"""The LLM-shaped benchmark's torch-free parts: tasks, restore, GiGPO, budget matching, judges, report checks.

The parts that need torch (the transformer, its cache, the loss, behaviour cloning) are tested in
tests/adapters/test_trl_llm_bench.py, which runs in the TRL environment (it has CPU torch).
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prover_bench.llm import report
from prover_bench.llm import tasks as T
from prover_bench.llm.credit import (
    ContrastiveOracleJudge,
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
from tests.conftest import load_script

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
    assert traj.turns[0].info == {"state": (0, T.NONE, 0), "pivot": True, "keep": False, "mistake": False}
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


# --- issue 36: the task variants and the regime check (benchmarks/llm_regime.py) ----------------------------------


def _reader(task: T.Task, record: T.Record) -> T.Action:
    """A policy that sees only the current observation's tokens: in a key room, ``local`` takes iff the item's
    colour equals the first token (the goal colour), ``marked`` takes iff the item is the word ``goal``; anything
    else walks on. It cannot know the goal on the ``default`` variant, so it takes every key there."""
    first, _, item = T.observation_tokens(task, record.final)
    if task.rooms[record.final.room] >= 0:
        take = item == first if task.variant == "local" else item == T.TOKEN["goal"] or task.variant == "default"
        return TAKE if take else SKIP
    return GO if task.rooms[record.final.room] == T.HALL else OPEN


def test_task_variants_change_only_the_observation_tokens() -> None:
    for i in range(60):
        base = T.make_task(i)
        for variant in ("local", "marked"):
            task = T.make_task(i, variant)
            assert (task.goal, task.rooms, task.limit, task.variant) == (base.goal, base.rooms, base.limit, variant)
            assert T.prefix_tokens(task) == T.prefix_tokens(base)
    assert T.make_task(3, "default") == T.make_task(3)
    with pytest.raises(ValueError, match="unknown task variant"):
        T.make_task(0, "nope")
    task = T.make_task(2)
    local, marked = T.make_task(2, "local"), T.make_task(2, "marked")
    goal, other = task.goal_room, next(r for r, c in enumerate(task.rooms) if c >= 0 and c != task.goal)
    tok = T.TOKEN
    colour = tok[T.COLOURS[task.goal]]
    held = T.State(room=other, held=task.goal)
    # by hand: [room, held, item] / [goal colour, held, item] / [room, held, `goal` in the goal key's room]
    assert T.observation_tokens(task, T.State(room=goal)) == [tok[f"r{goal}"], tok["none"], colour]
    assert T.observation_tokens(local, T.State(room=goal)) == [colour, tok["none"], colour]
    assert T.observation_tokens(marked, T.State(room=goal)) == [tok[f"r{goal}"], tok["none"], tok["goal"]]
    other_item = tok[T.COLOURS[task.rooms[other]]]
    assert T.observation_tokens(local, held) == [colour, colour, other_item]
    assert T.observation_tokens(marked, held) == [tok[f"r{other}"], colour, other_item]
    assert T.observation_tokens(local, T.State(room=0)) == [colour, tok["none"], tok["hall"]]
    door = T.State(room=len(task.rooms) - 1)
    assert T.observation_tokens(marked, door) == [tok[f"r{door.room}"], tok["none"], tok["door"]]
    # the transitions and the pivot are the variant's too: the same play gives the same episode
    for variant in ("local", "marked"):
        v = T.make_task(2, variant)
        a = _play(task, {"goal": TAKE, "before": SKIP, "after": SKIP})
        b = _play(v, {"goal": TAKE, "before": SKIP, "after": SKIP})
        assert a.states == b.states and a.success and b.success and a.actions == b.actions
        assert not _play(v, {"goal": SKIP, "before": TAKE, "after": TAKE}).success
        restored = T.restored(b, 3)
        assert restored.task.variant == variant and restored.tokens == b.tokens[: b.obs_start[3]]


def test_the_pivot_is_decided_from_the_current_observation_in_the_local_variants() -> None:
    """A policy reading only the current observation solves every task of ``local`` and ``marked`` (no slips);
    on ``default`` the same reader cannot tell the goal key and succeeds only where the goal key is the last."""
    for i in range(100):
        for variant in ("local", "marked", "default"):
            task = T.make_task(i, variant)
            record = T.start_record(task)
            while not record.final.done:
                T.play(record, T.action_tokens(_reader(task, record)), 0.99)
            last_key = max(r for r, c in enumerate(task.rooms) if c >= 0)
            assert record.success == (variant != "default" or task.goal_room == last_key)


def test_exact_success_of_random_key_choices() -> None:
    """Exact (all 2^4 take/skip choices over the 4 key rooms, no slips, no waits): success iff the goal key is
    taken and every later key skipped, so the success rate is 2^-(1 + keys after the goal room); the same on
    every variant. Averaged over tasks it is about 1/4 x (1/2 + 1/4 + 1/8 + 1/16) = 0.234: the BC start's
    teacher, before its waits and the turn limit."""
    import itertools

    rates = []
    for i in range(40):
        for variant in T.VARIANTS:
            task = T.make_task(i, variant)
            keys = [r for r, c in enumerate(task.rooms) if c >= 0]
            wins = 0
            for choice in itertools.product((TAKE, SKIP), repeat=len(keys)):
                by_room = dict(zip(keys, choice, strict=True))
                record = T.start_record(task)
                while not record.final.done:
                    room = record.final.room
                    item = task.rooms[room]
                    action = by_room[room] if item >= 0 else GO if item == T.HALL else OPEN
                    T.play(record, T.action_tokens(action), 0.99)
                wins += record.success
            after = sum(r > task.goal_room for r in keys)
            assert wins / 16 == 2.0 ** -(1 + after)
            if variant == "default":
                rates.append(wins / 16)
            if variant == "last":  # the goal key last: nothing after it, so 1/2 on every task
                assert wins / 16 == 0.5
    assert abs(np.mean(rates) - 0.234) < 0.06


@dataclass
class _Curve:
    seed: int
    success: list[float]
    group_size: int = 4
    eval_steps: list[int] = field(default_factory=lambda: [0, 20, 40])


def _regime(
    base: dict[float, float], matched: dict[float, float], start: float = 0.2, seeds: int = 6, spread: float = 0.01
) -> dict[str, dict[float, list[_Curve]]]:
    """Hand-made runs: each arm's final success per lr (plus a small per-seed spread), the same start."""

    def arm(finals: dict[float, float], g: int) -> dict[float, list[_Curve]]:
        return {lr: [_Curve(s, [start, (start + f) / 2, f + spread * (s % 3)], g) for s in range(seeds)]
                for lr, f in finals.items()}  # fmt: skip

    return {report.BASE: arm(base, 4), report.MATCHED: arm(matched, 6)}


def test_the_regime_check_passes_only_when_all_three_criteria_hold() -> None:
    good = _regime({1e-4: 0.3, 3e-4: 0.4, 1e-3: 0.35}, {1e-4: 0.35, 3e-4: 0.5, 1e-3: 0.45})
    passed, lines = report.regime_check(good)
    assert passed and lines[0] == "regime check: pass"
    assert lines[1].startswith("GRPO learns: yes. At its best lr 0.0003 (G=4)")
    assert "+0.210 ± " in lines[1]  # 0.41 - 0.2 on average (spread 0, 0.01, 0.02)
    assert lines[2].startswith("More samples help: yes. Budget-matched GRPO (G=6) at its best lr 0.0003")
    assert "+0.100 ± 0.000" in lines[2]
    assert lines[5].startswith("Budget-matched minus GRPO at each lr (paired): lr 0.0001: +0.050 ± 0.000;")
    # GRPO does not learn (by more than the margin)
    flat = _regime({1e-4: 0.22, 3e-4: 0.24, 1e-3: 0.23}, {1e-4: 0.35, 3e-4: 0.5, 1e-3: 0.45})
    passed, lines = report.regime_check(flat)
    assert not passed and lines[0] == "regime check: fail (GRPO does not learn)"
    # more samples do not help (the matched arm at its best is below GRPO at its best)
    same = _regime({1e-4: 0.3, 3e-4: 0.4, 1e-3: 0.35}, {1e-4: 0.3, 3e-4: 0.38, 1e-3: 0.36})
    passed, lines = report.regime_check(same)
    assert not passed and lines[0] == "regime check: fail (budget-matched GRPO not above GRPO)"
    # a best lr on the edge of the grid
    edge = _regime({1e-4: 0.3, 3e-4: 0.4, 1e-3: 0.45}, {1e-4: 0.35, 3e-4: 0.5, 1e-3: 0.55})
    passed, lines = report.regime_check(edge)
    assert not passed and lines[0] == "regime check: fail (a best lr on the grid's edge)"
    assert "not interior (highest)" in lines[3] and "not interior (highest)" in lines[4]
    # too few lrs: an interior best needs a grid of 3
    two = _regime({1e-4: 0.3, 3e-4: 0.4}, {1e-4: 0.35, 3e-4: 0.5})
    passed, lines = report.regime_check(two)
    assert not passed and "not interior (too few lrs)" in lines[3]
    # a noisy difference: the paired CI includes 0
    noisy = _regime({1e-4: 0.3, 3e-4: 0.4, 1e-3: 0.35}, {1e-4: 0.35, 3e-4: 0.5, 1e-3: 0.45}, spread=0.0)
    for i, r in enumerate(noisy[report.MATCHED][3e-4]):
        r.success[-1] = 0.5 + (0.3 if i % 2 else -0.3)  # +0.1 on average, +-0.3 per seed
    passed, lines = report.regime_check(noisy)
    assert not passed and "More samples help: no." in lines[2]
    # every criterion at once, and unpaired seeds
    passed, lines = report.regime_check(_regime({1e-4: 0.2, 3e-4: 0.21}, {1e-4: 0.1, 3e-4: 0.05}))
    assert lines[0] == (
        "regime check: fail (GRPO does not learn; budget-matched GRPO not above GRPO; a best lr on the grid's edge)"
    )
    unpaired = _regime({1e-4: 0.3, 3e-4: 0.4, 1e-3: 0.35}, {1e-4: 0.35, 3e-4: 0.5, 1e-3: 0.45})
    unpaired[report.MATCHED][3e-4] = unpaired[report.MATCHED][3e-4][1:]
    assert report.regime_check(unpaired) == (False, ["regime check: fail (the two arms' seeds differ: no pairing)"])
    assert report.regime_check({report.BASE: {}})[0] is False


def _load_regime_script() -> Any:
    return load_script(Path(__file__).resolve().parents[1] / "benchmarks" / "llm_regime.py", "llm_regime")


def test_the_regime_script_keeps_whole_seeds_and_stops_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch: the grid rule, the budget-matched size, a deadline's leftovers, and whole seeds only."""
    import time

    script = _load_regime_script()
    r1 = script.REGIMES["R1"]
    assert (r1.variant, r1.optimizer, r1.group_size, r1.matched, r1.tasks_per_step) == ("local", "adam", 4, 6, 4)
    assert script.Regime("x", "local", "adam", group_size=8).matched == 12
    monkeypatch.setitem(script.CALIBRATED, "R1", 3e-4)
    assert script.grid(r1) == pytest.approx((1e-4, 3e-4, 9e-4))
    with pytest.raises(SystemExit, match="calibrat"):
        script.grid(script.Regime("x", "local", "sgd"))
    pool = script.Pool(1, deadline=time.monotonic() + 60)
    assert list(pool.map(pow, [(2, 3), (3, 2)])) == [8, 9]
    pool.deadline = time.monotonic() - 1
    assert list(pool.map(pow, [(2, 3)])) == [None]
    runs = _regime({1e-4: 0.3, 3e-4: 0.4}, {1e-4: 0.35, 3e-4: 0.5}, seeds=4)
    runs[report.MATCHED][3e-4] = runs[report.MATCHED][3e-4][:2] + runs[report.MATCHED][3e-4][3:]  # seed 2 missing
    kept = script.complete(runs)
    assert {lr: [r.seed for r in rs] for lr, rs in kept[report.BASE].items()} == {1e-4: [0, 1, 3], 3e-4: [0, 1, 3]}
    assert [r.seed for r in kept[report.MATCHED][3e-4]] == [0, 1, 3]


def test_the_judge_counts_what_its_segment_and_a_random_one_hold() -> None:
    """``train._nomination`` by hand: the pivot, the keep (the second decision), the two-decision successes, and a
    random admissible segment of the same length drawn as ``SameLengthRandomJudge`` draws it."""
    from prover_bench.llm.train import StepLog, _nomination

    task = next(
        t for t in map(T.make_task, range(100)) if t.goal_room < max(r for r, c in enumerate(t.rooms) if c >= 0)
    )
    ok = _play(task, {"goal": TAKE, "before": TAKE, "after": SKIP})
    flags = [(T.is_pivot(task, s, a), T.is_keep(task, s, a)) for s, a in zip(ok.states, ok.actions, strict=True)]
    pivot = next(t for t, f in enumerate(flags) if f[0])
    keeps = [t for t, f in enumerate(flags) if f[1]]
    assert keeps and all(ok.states[t].room > task.goal_room and ok.states[t].held == task.goal for t in keeps)
    assert not any(f[1] for s, f in zip(ok.states, flags, strict=True) if s.room <= task.goal_room)
    traj = trajectory(ok, "s", "g")
    log = StepLog(0, 0, 0, 0, 0.0)
    _nomination(log, traj, pivot, pivot, np.random.default_rng(0))
    _nomination(log, traj, keeps[0], keeps[0], np.random.default_rng(0))
    _nomination(log, traj, 0, 1, np.random.default_rng(0))  # two hall turns
    assert (log.proposed, log.proposed_turns, log.proposed_pivot, log.proposed_keep) == (3, 4, 1, 1)
    assert (log.two_decisions, log.two_pivot, log.two_keep) == (3, 1, 1)
    many = StepLog(0, 0, 0, 0, 0.0)
    for seed in range(400):
        _nomination(many, traj, pivot, pivot, np.random.default_rng(seed))
    assert many.proposed_pivot == 400 and 0 < many.random_pivot < 400 * 3 / traj.num_turns
    last_key_goal = next(t for t in map(T.make_task, range(100)) if t.goal_room == max(
        r for r, c in enumerate(t.rooms) if c >= 0))  # fmt: skip
    one = StepLog(0, 0, 0, 0, 0.0)
    _nomination(one, trajectory(_play(last_key_goal, {"goal": TAKE, "before": SKIP, "after": SKIP}), "t", "g"),
                0, 0, np.random.default_rng(0))  # fmt: skip
    assert one.two_decisions == 0 and one.proposed == 1


def test_the_check_pools_the_runs_of_several_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--pool``: two calls' JSON files on other seeds are one set; ``1e-3 / 3`` and ``0.000333333`` are one lr; a
    run in two files is refused; the verdict comes first (by hand: +0.1 on every seed, GRPO +0.2 from 0.2)."""
    import dataclasses
    import json

    from prover_bench.llm.train import LLMRun, StepLog

    script = _load_regime_script()

    def runs(seeds: range, third: float) -> list[LLMRun]:
        out = []
        for seed in seeds:
            for lr, gain in ((1e-4, 0.1), (third, 0.2), (1e-3, 0.15)):
                for arm, g, extra in ((report.BASE, 4, 0.0), (report.MATCHED, 6, 0.1)):
                    final = 0.2 + gain + extra + 0.01 * (seed % 3)
                    out.append(
                        LLMRun(arm, seed, lr, g, [0, 20], [0.2, final], [0, 9], [0, 90], [StepLog(1, 0, 0, 0, 0.0)])
                    )
        return out

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"runs": [dataclasses.asdict(r) for r in runs(range(0, 3), 1e-3 / 3)]}))
    b.write_text(json.dumps({"runs": [dataclasses.asdict(r) for r in runs(range(3, 6), 0.000333333)]}))
    pooled = script.pooled([a, b])
    assert sorted(pooled[report.BASE]) == [1e-4, 0.000333333, 1e-3]
    assert [r.seed for r in pooled[report.MATCHED][0.000333333]] == [0, 1, 2, 3, 4, 5]
    assert isinstance(pooled[report.BASE][1e-4][0].logs[0], StepLog)
    with pytest.raises(SystemExit, match="in two of the files"):
        script.pooled([a, a])
    assert script.main(["--pool", str(a), str(b), "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("regime check: pass\n")
    assert (
        "+0.210 ± " in text and "+0.100 ± 0.000" in text and "Pooled from 2 files, 6 seeds (0, 1, 2, 3, 4, 5)" in text
    )
    assert (tmp_path / "pooled.md").read_text() == text


# --- issue 42: the ranking at one shared lr (benchmarks/llm_regime.py --rank) -------------------------------------


def test_the_fixed_lr_check_passes_only_when_grpo_learns_and_more_samples_help_at_that_lr() -> None:
    """``report.fixed_lr_check`` by hand: the lr given is the only one read (another lr's better figures do not
    count), GRPO's gain from 0.2 to 0.41 on average, budget-matched +0.1 on every seed."""
    runs = _regime({1e-4: 0.3, 3e-4: 0.4}, {1e-4: 0.3, 3e-4: 0.5})
    passed, lines = report.fixed_lr_check(runs, 3e-4)
    assert passed and lines[0] == "regime check (fixed lr): pass"
    assert lines[1].startswith("GRPO learns: yes. At lr 0.0003 (G=4)") and "+0.210 ± " in lines[1]
    assert lines[2].startswith("More samples help: yes.") and "+0.100 ± 0.000" in lines[2]
    # at 1e-4 the matched arm is no better: the check at that lr fails though 3e-4 would pass
    passed, lines = report.fixed_lr_check(runs, 1e-4)
    assert not passed and lines[0] == "regime check (fixed lr): fail (budget-matched GRPO not above GRPO)"
    flat = _regime({3e-4: 0.24}, {3e-4: 0.5})
    assert report.fixed_lr_check(flat, 3e-4)[1][0] == "regime check (fixed lr): fail (GRPO does not learn)"
    both = _regime({3e-4: 0.22}, {3e-4: 0.1})
    assert report.fixed_lr_check(both, 3e-4)[1][0] == (
        "regime check (fixed lr): fail (GRPO does not learn; budget-matched GRPO not above GRPO)"
    )
    assert report.fixed_lr_check(runs, 1e-3) == (
        False,
        ["regime check (fixed lr): fail (no runs of both arms at lr 0.001)"],
    )
    runs[report.MATCHED][3e-4] = runs[report.MATCHED][3e-4][1:]
    assert report.fixed_lr_check(runs, 3e-4)[1] == [
        "regime check (fixed lr): fail (the two arms' seeds differ: no pairing)"
    ]


def test_the_rank_verdict_follows_the_registered_rule() -> None:
    """*pays* only with the whole 95% interval above 0, *loses* only with it below, a tie otherwise (a bound on 0
    is a tie)."""
    assert report.rank_verdict((0.05, 0.04)) == "pays"
    assert report.rank_verdict((-0.05, 0.04)) == "loses"
    assert report.rank_verdict((0.01, 0.02)) == "ties at this size"
    assert report.rank_verdict((0.02, 0.02)) == "ties at this size"
    assert report.rank_verdict((-0.02, 0.02)) == "ties at this size"


@dataclass
class _Logged:
    seconds: float


@dataclass
class _Spent:
    seed: int
    policy_tokens: list[int]
    success: list[float]
    eval_steps: list[int]
    logs: list[_Logged]


def test_equal_token_and_equal_time_differences_by_hand() -> None:
    """``report.paired_at``: each pair at the smaller final budget, the other run interpolated linearly.
    a: tokens 0/100/200, success 0.2/0.4/0.6; b: tokens 0/150/300, success 0.2/0.3/0.5. At 200 tokens a is at 0.6 and
    b at 0.3 + 50/150 x 0.2 = 0.36667: +0.23333. Time: a's steps take 1 s (evaluations at steps 0, 1, 2: 0, 1, 2 s),
    b's 4 s (0, 4, 8 s); at 2 s b is at 0.2 + 2/4 x 0.1 = 0.25, a at 0.6: +0.35."""
    a = _Spent(0, [0, 100, 200], [0.2, 0.4, 0.6], [0, 1, 2], [_Logged(1.0), _Logged(1.0)])
    b = _Spent(0, [0, 150, 300], [0.2, 0.3, 0.5], [0, 1, 2], [_Logged(4.0), _Logged(4.0)])
    assert report.paired_at([a], [b], "tokens")[0] == pytest.approx(0.6 - (0.3 + 0.2 / 3))
    assert report.paired_at([b], [a], "tokens")[0] == pytest.approx(0.3 + 0.2 / 3 - 0.6)
    assert report.paired_at([a], [b], "time")[0] == pytest.approx(0.35)
    assert report.wall(b) == [0.0, 4.0, 8.0]
    c = _Spent(1, [0, 100, 200], [0.2, 0.2, 0.2], [0, 1, 2], [_Logged(1.0), _Logged(1.0)])
    mean, half = report.paired_at([a, c], [b, dataclasses_replace(c, success=[0.2, 0.1, 0.0])], "tokens")
    assert mean == pytest.approx(((0.6 - 0.3 - 0.2 / 3) + 0.2) / 2) and half > 0
    with pytest.raises(ValueError, match="unpaired"):
        report.paired_at([a], [c], "tokens")


def dataclasses_replace(x: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(x, **changes)


def _rank_files(script: Any, folder: Path, seeds: range, lr: float, arms: tuple[str, ...], prover_gain: float) -> None:
    """Hand-made per-seed files as ``rank_seed`` writes them: GRPO 0.2 -> 0.5, budget-matched 0.6 (50% more tokens),
    every ProVer arm ``0.5 + prover_gain`` at GRPO's tokens (+ 0.01 x seed % 3 on every arm)."""
    import json

    from prover_bench.llm.train import LLMRun, StepLog

    regime = script.REGIMES["R12"]
    for seed in seeds:
        runs = []
        for arm in arms:
            g, tokens, final = 4, 1000, 0.5 + (prover_gain if arm not in (report.BASE, report.MATCHED) else 0.0)
            if arm == report.MATCHED:
                g, tokens, final = 6, 1500, 0.6
            final += 0.01 * (seed % 3)
            logs = [StepLog(10, 0, 100, 0, 0.5, seconds=1.0, verified=0) for _ in range(2)]
            runs.append(LLMRun(arm, seed, lr, g, [0, 1, 2], [0.2, (0.2 + final) / 2, final], [0, 5, 10],
                               [0, tokens // 2, tokens], logs, 2.0))  # fmt: skip
        record = {"regime": "R12", "seed": seed, "lr": lr, "start": 0.2, "runs": [script.compact(r) for r in runs]}
        script.rank_file(folder, regime, lr, seed).write_text(json.dumps(record))


def test_the_ranking_reports_the_check_first_then_a_verdict_per_prover_arm(tmp_path: Path) -> None:
    """``rank_report`` from per-seed files: the primary lr's check line first, one verdict per ProVer arm (here a
    ProVer arm at 0.7 + 0.01 m (m = seed % 3) at GRPO's 1000 tokens, against budget-matched at 1000 of its 1500
    tokens, between its evaluations at 750 (0.4 + 0.005 m) and 1500 (0.6 + 0.01 m): 0.4667 + 0.00667 m; the
    difference 0.2333 + 0.00333 m over seeds 32-37 (m = 2, 0, 1, 2, 0, 1): mean 0.2367, sd 0.00298, half-width
    2.571 x 0.00298 / sqrt(6) = 0.0031; so it pays; minus GRPO at its own 1000 tokens, 0.5 + 0.01 m: +0.200 exactly),
    then the rule's control: GRPO itself minus budget-matched at 1000 tokens, 0.0333 + 0.00333 m: +0.0367 ± 0.0031,
    "pays" too, so the line warns that the rule favours cheaper arms; the secondary lr's after it; fewer seeds than
    the design's: provisional; a seed missing one lr's file is left out of that lr only."""
    script = _load_regime_script()
    regime = script.REGIMES["R12"]
    _rank_files(script, tmp_path, range(32, 38), script.RANK_LR, script.RANK_ARMS, 0.2)
    _rank_files(script, tmp_path, range(32, 37), script.RANK_SECONDARY_LR, script.RANK_SECONDARY_ARMS, -0.3)
    text = script.rank_report(tmp_path, regime, range(32, 38), False, "cmd")
    lines = text.splitlines()
    assert lines[0] == "regime check (fixed lr): pass [primary lr 0.000333333]"
    verdicts = [x for x in lines if x.startswith("verdict: ")]
    prover = [a for a in script.RANK_ARMS if a not in (report.BASE, report.MATCHED)]
    assert len(verdicts) == len(prover) + 1
    for arm, line in zip(prover, verdicts, strict=False):
        assert line == (  # what it compares first, the verdict word last
            f"verdict: {arm} at lr 0.000333333, minus budget-matched GRPO at equal policy tokens +0.237 ± 0.003 "
            "(6 paired seeds; minus GRPO at equal policy tokens +0.200 ± 0.000): pays"
        )
    control = next(x for x in lines if x.startswith("rule control: "))
    assert control.startswith(
        "rule control: GRPO (G=4) itself at lr 0.000333333, minus budget-matched GRPO at equal policy tokens "
        "+0.037 ± 0.003, under the same rule: pays; the rule favours"
    )
    assert lines.index(control) == len(prover) + 1  # right after the primary lr's verdicts
    # the secondary lr: ProVer at 0.2 under GRPO's final, far below budget-matched at its tokens
    assert verdicts[-1].startswith(f"verdict: {script.DEFAULT} at lr 0.000111111, ") and verdicts[-1].endswith(
        ": loses"
    )
    assert "- 6 of 6 seeds finished." in lines and "- 5 of 6 seeds finished: provisional" in text
    assert text.index("[primary lr") < text.index("[secondary lr") < text.index("## R12 at the primary lr")
    empty = script.rank_report(tmp_path / "none", regime, range(32, 38), True, "cmd")
    assert empty.startswith("regime check (fixed lr): not run yet at the primary lr 0.000333333 (0 of 6 seeds)")


def test_a_compact_run_reads_back_as_it_was() -> None:
    """The per-seed files leave out a step log's zero counters and round its seconds to 0.1 ms; read back, the run is
    the same but for that rounding."""
    from prover_bench.llm.train import LLMRun, StepLog

    script = _load_regime_script()
    logs = [StepLog(10, 3, 100, 30, 0.25, verified=2, accepted=1, seconds=1.234567), StepLog(9, 0, 90, 0, 0.0)]
    run = LLMRun("x", 1, 1e-3 / 3, 4, [0, 2], [0.1, 0.3], [0, 22], [0, 220], logs, 3.14159)
    raw = script.compact(run)
    assert raw["logs"][1] == {"rollout_turns": 9, "extra_turns": 0, "rollout_tokens": 90, "extra_tokens": 0,
                              "train_success": 0.0}  # fmt: skip
    back = LLMRun(**(raw | {"logs": [StepLog(**x) for x in raw["logs"]]}))
    assert back.logs[0].seconds == 1.2346 and back.seconds == 3.14
    assert back.logs[0] == StepLog(10, 3, 100, 30, 0.25, verified=2, accepted=1, seconds=1.2346)
    assert (back.arm, back.lr, back.success, back.policy_tokens) == (run.arm, run.lr, run.success, run.policy_tokens)


def test_the_regime_scripts_start_cache_must_be_a_private_directory(tmp_path: Path) -> None:
    """Issue 46: the BC starts are loaded back from ``--cache``, by default a fixed path under /tmp."""
    import os
    import stat

    script = _load_regime_script()
    made = tmp_path / "new" / "starts"
    assert script.private_dir(str(made)) == str(made)
    assert stat.S_IMODE(made.stat().st_mode) & 0o077 == 0
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(SystemExit, match="not a private directory"):
        script.private_dir(str(shared))
    link = tmp_path / "link"
    link.symlink_to(made)
    with pytest.raises(SystemExit, match="not a private directory"):
        script.private_dir(str(link))
    assert os.access(made, os.W_OK)


def test_the_gpu_script_ranks_from_a_copy_of_the_repositorys_seed_files(tmp_path: Path) -> None:
    """``scripts/gpu-llm-regime --rank --report-only``: the committed seed files are copied to ``$OUT/llm-rank`` (so
    a bigger machine skips them) and the report is the one ``llm_regime.py --rank R12 --report-only`` prints."""
    import os

    root = Path(__file__).resolve().parents[1]
    committed = sorted(p.name for p in (root / "benchmarks" / "results" / "llm-rank").glob("*.json"))
    env = os.environ | {"PYTHON": sys.executable, "OUT": str(tmp_path)}
    done = subprocess.run([str(root / "scripts" / "gpu-llm-regime"), "--rank", "--report-only", "--primary-only"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "llm-rank").glob("*.json")) == committed
    assert done.stdout.startswith("regime check (fixed lr): ")
    assert (tmp_path / "llm-rank-report" / "rank-R12.md").read_text() == done.stdout


# --- issue 51: the ceiling regime (benchmarks/llm_ceiling.py) -----------------------------------------------------


def test_the_last_variant_puts_the_goal_key_in_the_last_key_room_and_leaves_no_keep() -> None:
    """``last``: the rooms, colours and limit of every other variant of the id, the goal the last key room's colour,
    the observation of ``marked``; taking the goal key alone decides (any earlier take is harmless), so no
    decision of any play is a keep, and skipping the goal room is the one mistake."""
    for i in range(60):
        base, last = T.make_task(i), T.make_task(i, "last")
        keys = [r for r, c in enumerate(base.rooms) if c >= 0]
        assert (last.rooms, last.limit) == (base.rooms, base.limit)
        assert last.goal == base.rooms[keys[-1]] and last.goal_room == keys[-1]
        assert T.observation_tokens(last, T.State(room=keys[-1]))[2] == T.TOKEN["goal"]
        assert T.observation_tokens(last, T.State(room=keys[0]))[2] == T.TOKEN[T.COLOURS[base.rooms[keys[0]]]]
        for before in (TAKE, SKIP):
            record = _play(last, {"goal": TAKE, "before": before, "after": SKIP})
            assert record.success
            assert not any(T.is_keep(last, s, a) for s, a in zip(record.states, record.actions, strict=True))
        failed = _play(last, {"goal": SKIP, "before": TAKE, "after": SKIP})
        assert not failed.success
        mistakes = [t for t, (s, a) in enumerate(zip(failed.states, failed.actions, strict=True))
                    if T.is_mistake(last, s, a)]  # fmt: skip
        assert [failed.states[t].room for t in mistakes] == [keys[-1]]
    # the goal differs from `default`'s for some ids (else the variant would change nothing)
    assert any(T.make_task(i, "last").goal != T.make_task(i).goal for i in range(60))


def test_group_sizes_spread_the_extra_members_by_hand() -> None:
    """2.26 extra members a step over 4 tasks of G = 4: floor(2.26 n) in all after n steps, one per task in turn:
    step 1: 2 (tasks 0, 1), step 2: 4 - 2 = 2 (tasks 2, 3), step 3: 6 - 4 = 2 (0, 1), step 4: 9 - 6 = 3 (2, 3, 0)."""
    from prover_bench.llm.train import group_sizes

    assert [group_sizes(4, 4, 2.26, n) for n in (1, 2, 3, 4)] == [[5, 5, 4, 4], [4, 4, 5, 5], [5, 5, 4, 4],
                                                                 [5, 4, 5, 5]]  # fmt: skip
    assert group_sizes(4, 4, 0.0, 7) == [4, 4, 4, 4] and group_sizes(6, 2, 0.5, 1) == [6, 6]
    assert group_sizes(6, 2, 0.5, 2) == [7, 6]
    for extra in (0.3, 1.0, 2.26, 7.9):
        total = sum(sum(group_sizes(4, 4, extra, n)) - 16 for n in range(1, 41))
        assert total == math.floor(40 * extra)
    with pytest.raises(ValueError):
        group_sizes(4, 4, -1.0, 1)


def test_the_contrastive_oracle_nominates_the_pivot_on_a_success_and_the_first_mistake_on_a_failure() -> None:
    rules = SegmentRules()
    task = T.make_task(3, "marked")
    won = trajectory(_play(task, {"goal": TAKE, "before": SKIP, "after": SKIP}), "w", "g")
    pivot = next(t for t, turn in enumerate(won.turns) if turn.info["pivot"])
    got = ContrastiveOracleJudge().propose(won, [], rules)
    assert isinstance(got, Proposal) and (got.segment.start, got.segment.end) == (pivot, pivot)
    # a failed run that skipped the goal key, then took another: the first mistake is the skip in the goal room
    lost_record = _play(task, {"goal": SKIP, "before": SKIP, "after": TAKE})
    lost = trajectory(lost_record, "l", "g")
    first = next(t for t, turn in enumerate(lost.turns) if turn.info["mistake"])
    assert lost_record.states[first].room == task.goal_room
    got = ContrastiveOracleJudge().propose(lost, [won], rules)
    assert isinstance(got, Proposal) and got.segment.start == got.segment.end == first
    assert isinstance(OracleJudge().propose(lost, [won], rules), Decline)  # the plain oracle has no pivot there
    # a failed run without a mistake (it waited until the turn limit) is declined
    stuck = T.start_record(task)
    while not stuck.final.done:
        T.play(stuck, T.action_tokens(("wait", -1)), 0.5)
    assert isinstance(ContrastiveOracleJudge().propose(trajectory(stuck, "s", "g"), [won], rules), Decline)


def _ceiling() -> Any:
    return load_script(Path(__file__).resolve().parents[1] / "benchmarks" / "llm_ceiling.py", "llm_ceiling")


@dataclass
class _Heldout:
    seed: int
    success: list[float]


def test_the_ceiling_rules_by_hand() -> None:
    """The registered rules: a collapse is success below half the start at some evaluation after it (0.15 of a 0.3
    start is not below half: no collapse); *pays* needs both lower bounds above 0, *loses* either upper bound below 0;
    McNemar's exact p for 5 discordant pairs all one way is 2 / 2^5 = 0.0625, for 3 against 1 it is
    2 (1 + 4) / 16 = 0.625."""
    c = _ceiling()
    assert not c.collapsed(_Heldout(0, [0.3, 0.15, 0.2])) and c.collapsed(_Heldout(0, [0.3, 0.6, 0.149]))
    assert not c.collapsed(_Heldout(0, [0.3, 0.3])) and c.collapsed(_Heldout(0, [0.3, 0.0, 0.9]))
    assert c.ceiling_verdict((0.05, 0.04), (0.03, 0.02)) == "pays"
    assert c.ceiling_verdict((0.05, 0.04), (0.01, 0.02)) == "ties at this size"
    assert c.ceiling_verdict((0.05, 0.04), (-0.03, 0.02)) == "loses"
    assert c.ceiling_verdict((-0.05, 0.04), (0.03, 0.02)) == "loses"
    assert c.ceiling_verdict((0.0, 0.04), (0.0, 0.02)) == "ties at this size"
    assert c.mcnemar([True] * 5 + [False] * 3, [False] * 8) == (5, 0, pytest.approx(0.0625))
    assert c.mcnemar([True, True, True, False, True], [False, False, False, True, True]) == (3, 1, pytest.approx(0.625))
    assert c.mcnemar([False] * 4, [False] * 4) == (0, 0, 1.0)
