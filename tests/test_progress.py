"""compute_bonus reports progress on the ``prover_core`` logger (a line per finished eligible group and
a summary line per call at INFO, each group's trigger, proposal and verification at DEBUG), to an
optional ``progress`` callback, and the wall time of each stage in ``Report.timings``."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence

import pytest

from prover_core import (
    Decline,
    Outcome,
    PolicyContext,
    Proposal,
    ProverConfig,
    ReplayEnv,
    Segment,
    SegmentRules,
    Step,
    Trajectory,
    Turn,
    compute_bonus,
)
from prover_core.errors import ProtocolError
from prover_core.progress import Progress, union_length
from prover_core.report import Report
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
    # rounds and continuations are logged at most once a second: none in a call this short, unless the machine stalls
    return [
        m
        for r in caplog.records
        if r.name.startswith("prover_core") and not (m := r.getMessage()).startswith("verifying:")
    ]


def test_a_line_per_finished_group_and_one_summary_line_at_info(caplog: pytest.LogCaptureFixture) -> None:
    lines = run(caplog, logging.INFO)
    assert len(lines) == 3
    # the judge declines at once; g-win finishes after its 8 continuations
    assert re.fullmatch(r"group g-decline declined: nothing stands out; 1/2 eligible groups done, \d+\.\d s", lines[0])
    assert re.fullmatch(r"group g-win accepted \(Delta = \+1\.000\); 2/2 eligible groups done, \d+\.\d s", lines[1])
    # 8 continuations (K = 4 from each boundary), 2 turns each, against a rollout of 12 x 4 = 48 turns
    assert lines[2].startswith(
        "compute_bonus: 3 groups, 2 eligible: 1 accepted, 0 rejected, 1 declined, 0 skipped; "
        "8 continuations, 16 policy turns (+33.3% of the rollout's 48); "
    )
    assert lines[2].endswith(" s")


def test_each_stage_of_each_group_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    lines = run(caplog, logging.DEBUG)
    assert lines[:-1] == [
        "group g-win: success rate 1/4, eligible",
        "group g-lose: success rate 0/4, not eligible",
        "group g-decline: success rate 1/4, eligible",
        "group g-win: proposed turns [2, 2] of w0",
        "group g-decline: the judge declined: nothing stands out",
        lines[5],
        "group g-win: verified, Delta = +1.000 (pre 0/4, post 4/4, 8 continuations): accepted",
        lines[7],
    ]
    assert lines[5].startswith("group g-decline declined") and lines[7].startswith("group g-win accepted")
    assert lines[-1].startswith("compute_bonus: 3 groups")


def test_silent_above_info(caplog: pytest.LogCaptureFixture) -> None:
    assert run(caplog, logging.WARNING) == []


def test_the_callback_sees_each_eligible_group_once_in_the_order_they_finish() -> None:
    seen: list[Progress] = []
    compute_bonus(
        BATCH,
        judge=TurnTwo(),
        continue_from=lambda t, turn, seed: Outcome(success=turn == 3, turns=2),
        config=ProverConfig(k=4),
        progress=seen.append,
    )
    groups = [e for e in seen if e.kind == "group"]
    assert [(e.done, e.total, e.group.group_id, e.group.status) for e in groups if e.group] == [
        (1, 2, "g-decline", "declined"),
        (2, 2, "g-win", "accepted"),
    ]
    assert groups[0].seconds <= groups[1].seconds
    # g-win's 8 continuations each end with an event, before the group's; a synchronous hook runs them one after
    # another, and each one's 2 turns move the rounds on when it ends
    ended = [e for e in seen if e.kind == "continuation"]
    assert [e.continuations for e in ended] == list(range(1, 9)) and all(e.group is None for e in ended)
    assert seen.index(ended[-1]) < seen.index(groups[1])
    assert [e.rounds for e in seen if e.kind == "round"] == list(range(2, 17, 2))


def test_a_callback_that_raises_is_logged_and_the_step_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: Progress) -> None:
        raise RuntimeError("progress bar closed")

    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(
            BATCH,
            judge=TurnTwo(),
            continue_from=lambda t, turn, seed: Outcome(success=turn == 3, turns=2),
            config=ProverConfig(k=4),
            progress=broken,
        )
    assert result.report.count("accepted") == 1
    # logged once, though it is called (and raises) for every round, continuation and group
    assert [r.exc_info[1].args for r in caplog.records if r.exc_info] == [("progress bar closed",)]  # type: ignore[index]


def test_a_progress_that_is_not_callable_is_refused() -> None:
    with pytest.raises(ProtocolError, match="progress"):
        compute_bonus(BATCH, judge=TurnTwo(), continue_from=lambda t, turn, s: True, progress="bar")  # type: ignore[arg-type]


def test_stage_times_are_wall_times_of_each_stage() -> None:
    """Each judge call waits for the other (a barrier), g-win's then 0.2 s more: propose covers at least 0.2 s of wall
    time. g-win's 8 continuations of 0.05 s each take at least 0.05 s. (Upper bounds would be timing
    assertions; :func:`union_length` is checked exactly below.)"""
    both = threading.Barrier(2, timeout=30)

    class SlowJudge(TurnTwo):
        def propose(self, success: Trajectory, failures: list[Trajectory], rules: SegmentRules) -> Proposal | Decline:
            both.wait()
            if success.group_id == "g-win":  # g-decline's call ends first, inside g-win's
                time.sleep(0.2)
            return super().propose(success, failures, rules)

    def slow(t: Trajectory, turn: int, seed: int) -> Outcome:
        time.sleep(0.05)
        return Outcome(success=turn == 3, turns=2)

    result = compute_bonus(BATCH, judge=SlowJudge(), continue_from=slow, config=ProverConfig(k=4))
    timings = result.report.timings
    assert timings["propose"] >= 0.2 and timings["verify"] >= 0.05
    assert timings["total"] >= timings["propose"] + timings["verify"] - 1e-9  # g-win verifies after both proposed
    assert 0 <= timings["outside"] < timings["total"]
    outside = timings["outside"]  # the time outside propose and verify
    metrics = result.report.metrics()
    assert {k: metrics[k] for k in metrics if k.startswith("prover/time/")} == {
        "prover/time/propose": timings["propose"],
        "prover/time/verify": timings["verify"],
        "prover/time/outside": outside,
        "prover/time/total": timings["total"],
    }


def test_a_report_without_timings_logs_zero_times() -> None:
    metrics = Report().metrics()
    assert [metrics[f"prover/time/{s}"] for s in ("propose", "verify", "outside", "total")] == [0.0] * 4
    assert "prover/time/credit" not in metrics  # the unreleased former name is gone


@pytest.mark.parametrize(
    "intervals, length",
    [([], 0.0), ([(0, 1)], 1.0), ([(0, 1), (0.5, 2)], 2.0), ([(0, 3), (1, 2)], 3.0), ([(2, 3), (0, 1)], 2.0)],
)
def test_union_length_counts_overlaps_once(intervals: list[tuple[float, float]], length: float) -> None:
    assert union_length(intervals) == length


class OneRoom:
    """Two turns: "take" at turn 0 wins, anything else loses."""

    def reset(self, spec: dict[str, object]) -> Step:
        self.turn = 0
        return Step(observation="room", info={})

    def step(self, action: object) -> Step:
        self.turn += 1
        if self.turn == 2:
            return Step(observation="end", done=True, success=self.took)
        self.took = action == "take"
        return Step(observation="hall", info={})


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_plain_function_is_a_policy(asynchronous: bool) -> None:
    """A function ``act(context) -> action`` (plain or async) is taken as the policy. The group: one run
    took at turn 0, three waited; from before turn 0 the function waits (0/4), after it the run has taken
    (4/4): Delta = 1."""
    seen: list[PolicyContext] = []

    def wait(context: PolicyContext) -> str:
        seen.append(context)
        return "wait"

    async def await_wait(context: PolicyContext) -> str:
        return wait(context)

    def run_of(i: int, action: str) -> Trajectory:
        return Trajectory(
            id=f"r{i}",
            group_id="g",
            turns=(Turn(observation="room", action=action), Turn(observation="hall", action="wait")),
            success=action == "take",
        )

    batch = [run_of(0, "take"), *(run_of(i, "wait") for i in (1, 2, 3))]

    class TurnZero:
        def propose(self, success: Trajectory, failures: list[Trajectory], rules: SegmentRules) -> Proposal:
            return Proposal(segment=Segment(trajectory_id=success.id, start=0, end=0))

    result = compute_bonus(
        batch,
        judge=TurnZero(),
        env=ReplayEnv(OneRoom),
        policy=await_wait if asynchronous else wait,
        config=ProverConfig(k=4),
    )
    v = result.report.groups[0].verification
    assert v is not None and (v.pre_successes, v.post_successes, v.delta) == (0, 4, 1.0)
    assert len(seen) == 4 * 2 + 4 * 1  # pre: turns 0 and 1; post: turn 1 only


class Bar:
    """A tqdm-style counter: ``update(n)`` moves ``n``; ``moves`` holds, for each move, how many policy calls the
    run had made by then (the call's time: each call is a model's ``generate``, which dominates a step)."""

    def __init__(self, calls: list[int]) -> None:
        self.n, self.calls, self.moves = 0, calls, list[int]()

    def update(self, n: int = 1) -> None:
        self.n += n
        self.moves.append(self.calls[0])


def test_a_progress_bar_moves_during_verification_not_only_at_its_end() -> None:
    """Every group is verified together, so groups finish near the end; continuations and rounds move all along:
    the bar fed by ``kind == "continuation"`` events has made most of its moves before the policy's last 10% of
    calls, and a round event comes with every call."""
    from prover_core import ChoiceJudge, SnapshotEnv
    from prover_core.demo import MDPEnv, VaultBatchPolicy, VaultMDP
    from prover_core.demo.run import rollout_batch

    calls = [0]

    class Counting(VaultBatchPolicy):
        def act_batch(self, contexts: Sequence[PolicyContext]) -> list[str]:
            calls[0] += 1
            return super().act_batch(contexts)

    continuations, groups, rounds = Bar(calls), Bar(calls), Bar(calls)
    bars = {"continuation": continuations, "group": groups, "round": rounds}
    result = compute_bonus(
        rollout_batch(VaultMDP(), groups=16, group_size=8, seed=0),
        judge=ChoiceJudge(),
        env=SnapshotEnv(lambda: MDPEnv(VaultMDP())),
        policy=Counting(),
        config=ProverConfig(k=4),
        progress=lambda event: bars[event.kind].update(1),
    )
    m = result.report.metrics(prefix="")
    total = calls[0]
    assert total == m["verify_policy_rounds"] >= 10
    assert continuations.n == m["continuations"] and groups.n == m["groups_eligible"]
    last_tenth = 0.9 * total  # moves made while calls after this one ran are in the call's last 10%
    early = [c for c in continuations.moves if c <= last_tenth]
    assert continuations.moves[0] < total / 2 and len(early) >= continuations.n / 2
    assert rounds.moves == list(range(1, total + 1))  # the round bar moves with every call


def test_rounds_and_continuations_reach_the_log_at_most_once_a_second(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prover_core.progress import ProgressLog, format_progress

    monkeypatch.setattr("prover_core.progress.LOG_EVERY_S", 0.0)  # every event
    with caplog.at_level(logging.INFO, logger="prover_core"):
        compute_bonus(
            BATCH,
            judge=TurnTwo(),
            continue_from=lambda t, turn, seed: Outcome(success=turn == 3, turns=2),
            config=ProverConfig(k=4),
        )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("verifying:")]
    assert len(lines) == 16  # 8 continuations, each moving the rounds on
    assert re.fullmatch(
        r"verifying: round 16 of policy calls, 8 continuations ended; 1/2 eligible groups done, \d+\.\d s", lines[-1]
    )
    log = ProgressLog(every=1.0, last=0.0)
    event = Progress(0, 2, None, 0.5, "round", 0, 1)
    assert log.wants(event) and not log.wants(event)  # the second within the second is left out
    assert format_progress(event).startswith("verifying: round 1 of policy calls, 0 continuations ended")
