"""Bad input from users, environments, policies and judges: a typed error or a recorded, visible skip
(the group keeps plain GRPO credit), never a silently wrong bonus and never a hang (issue 13).

Each test names the defect it guards; docs/reliability.md lists them with their node ids."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from prover_core import (
    DivergenceJudge,
    Outcome,
    Proposal,
    ProverConfig,
    ReplayEnv,
    ReplayMismatchError,
    Segment,
    SegmentRules,
    SnapshotEnv,
    Trajectory,
    Turn,
    acompute_bonus,
    compute_bonus,
)
from prover_core.bonus import BonusResult
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.errors import (
    EventLoopError,
    InvalidOutcomeError,
    MissingReseedError,
    ProtocolError,
    ProverError,
)
from prover_core.executors import LocalExecutor
from prover_core.protocols import PolicyContext, Step
from tests.conftest import make_trajectory
from tests.verify_support import BATCH


class FixedJudge:
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal:
        return Proposal(segment=Segment(trajectory_id=success.id, start=self.start, end=self.end))


class KeyRoom:
    """Deterministic: ``take`` picks up the key, ``drop`` loses it; the episode ends after 4 turns and
    succeeds iff the key is held. The observation never shows the key, so replay cannot tell states
    apart by text: only restoring the right actions gives the right state."""

    def __init__(self, reseedable: bool = True) -> None:
        self.key, self.t = False, 0
        if reseedable:
            self.reseed = lambda seed: None  # deterministic: nothing to reseed

    def reset(self, spec: Mapping[str, Any]) -> Step:
        self.key, self.t = False, 0
        return Step(observation="turn 0", info={"actions": ("wait", "take", "drop")})

    def step(self, action: str) -> Step:
        self.key = True if action == "take" else False if action == "drop" else self.key
        self.t += 1
        return Step(observation=f"turn {self.t}", done=self.t >= 4, success=self.key, info={"actions": ("wait",)})


class Wait:
    def act(self, context: PolicyContext) -> str:
        return "wait"


def key_group(winner: Sequence[str]) -> list[Trajectory]:
    """1 success of 4 (eligible): ``winner``'s actions, then three runs that never take the key."""
    seen = [f"turn {t}" for t in range(4)]
    return [make_trajectory("g0", "g", True, winner, seen)] + [
        make_trajectory(f"g{i}", "g", False, ["wait"] * 4, seen) for i in (1, 2, 3)
    ]


def run_guarded(call: Callable[[], Any], limit_s: float = 60.0) -> Any:
    """``call()`` in a daemon thread: the test fails (instead of hanging) when it does not return."""
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still blocked after {limit_s} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event that user code blocks on; set at teardown so abandoned threads end."""
    event = threading.Event()
    yield event
    event.set()


def no_bonus(result: BonusResult) -> bool:
    return not any(b.any() for b in result.turn_bonus.values())


# --- stale restoration ----------------------------------------------------------------------------


def test_snapshots_are_keyed_by_content_so_reused_ids_get_no_credit_from_an_old_episode() -> None:
    env = SnapshotEnv(KeyRoom)
    first = compute_bonus(key_group(["wait", "take", "wait", "wait"]), judge=FixedJudge(1, 1), env=env, policy=Wait())
    assert first.report.groups[0].status == "accepted" and first.turn_bonus["g0"].tolist() == [0, 1, 0, 0]
    # next step: the same ids, another episode (the key is taken at turn 2; turn 1 is a harmless wait)
    second = compute_bonus(
        key_group(["wait", "wait", "take", "wait"]),
        judge=FixedJudge(1, 1),
        env=env,
        policy=Wait(),
        config=ProverConfig(curtail=False),  # both boundaries run: Delta is measured
    )
    g = second.report.groups[0]
    assert g.verification is not None and g.verification.delta == 0.0
    assert g.status == "rejected" and no_bonus(second)
    # identical content shares a snapshot whatever the id; clear() empties the cache
    a = key_group(["wait", "take", "wait", "wait"])[0]
    b = a.model_copy(update={"id": "other"})
    assert env.content_key(a, 2) == env.content_key(b, 2) != env.content_key(a, 1)


def test_compute_bonus_clears_snapshot_caches_each_call() -> None:
    env = SnapshotEnv(KeyRoom)
    compute_bonus(key_group(["wait", "take", "wait", "wait"]), judge=FixedJudge(1, 1), env=env, policy=Wait())
    assert len(env._snapshots) == 2
    env._snapshots[("bogus", 0)] = env._snapshots[next(iter(env._snapshots))]
    compute_bonus(key_group(["wait", "take", "wait", "wait"]), judge=FixedJudge(1, 1), env=env, policy=Wait())
    assert ("bogus", 0) not in env._snapshots and len(env._snapshots) == 2


# --- unvalidated outcomes -------------------------------------------------------------------------


@pytest.mark.parametrize("returned", [2, None, "no", -1, 0.5, math.nan, "True"])
def test_non_binary_continue_from_results_are_counted_invalid_never_successes(returned: Any) -> None:
    result = compute_bonus(
        key_group(["wait", "take", "wait", "wait"]), judge=FixedJudge(1, 1), continue_from=lambda t, turn, s: returned
    )
    g = result.report.groups[0]
    assert g.status == "skipped" and "invalid outcome" in g.reason and no_bonus(result)
    m = result.report.metrics(prefix="")
    assert (
        m["continuations_failed/invalid_outcome"] == m["continuations"] == ProverConfig().k
    )  # curtailed: the post boundary failed, pre never ran


@pytest.mark.parametrize(
    "fields", [dict(success=2), dict(success=None), dict(success="no"), dict(success=-1), dict(success=True, turns=-5)]
)
def test_outcome_validates_like_the_batch(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidOutcomeError):
        Outcome(**fields)
    result = compute_bonus(
        key_group(["wait", "take", "wait", "wait"]),
        judge=FixedJudge(1, 1),
        continue_from=lambda t, turn, s: Outcome(**fields),
    )
    assert result.report.groups[0].status == "skipped" and no_bonus(result)
    assert (
        result.report.metrics(prefix="")["continuations_failed/invalid_outcome"] == ProverConfig().k
    )  # curtailed: the post boundary failed, pre never ran
    assert result.report.metrics(prefix="")["policy_turns"] == 0  # never a negative cost


def test_outcome_accepts_binary_numbers_and_normalises_them() -> None:
    assert Outcome(success=np.bool_(True), turns=np.int64(3)) == Outcome(success=True, turns=3)
    assert Outcome(success=1.0).success is True and Outcome(success=0).success is False


@pytest.mark.parametrize("success", [0.5, "False", math.nan, None, 2])
def test_non_binary_step_success_at_the_end_of_a_continuation_is_invalid(success: Any) -> None:
    class Odd(KeyRoom):
        def step(self, action: str) -> Step:
            step = super().step(action)
            return Step(step.observation, step.done, success if step.done else False, step.info)

    result = compute_bonus(
        key_group(["wait", "take", "wait", "wait"]), judge=FixedJudge(1, 1), env=ReplayEnv(Odd), policy=Wait()
    )
    g = result.report.groups[0]
    assert g.status == "skipped" and "invalid outcome" in g.reason and no_bonus(result)
    assert (
        result.report.metrics(prefix="")["continuations_failed/invalid_outcome"] == ProverConfig().k
    )  # curtailed: the post boundary failed, pre never ran


# --- time limits ------------------------------------------------------------------------------------


def test_timeout_holds_for_a_blocking_synchronous_environment(gate: threading.Event) -> None:
    class Stuck(KeyRoom):
        def step(self, action: str) -> Step:
            if self.t >= 2:  # past the recorded boundaries: the continuation blocks
                gate.wait()
            return super().step(action)

    class AsyncWait:
        async def act(self, context: PolicyContext) -> str:
            return "wait"

    config = ProverConfig(curtail=False, k=2, continuation_timeout_s=0.3)
    batch = key_group(["wait", "take", "wait", "wait"])
    for policy in (Wait(), AsyncWait()):  # whole continuation in a thread / each sync call in a thread
        result = run_guarded(
            lambda p=policy: compute_bonus(batch, judge=FixedJudge(0, 0), env=ReplayEnv(Stuck), policy=p, config=config)
        )
        g = result.report.groups[0]
        assert g.status == "skipped" and "ContinuationTimeoutError" in g.reason and no_bonus(result)
        assert result.report.metrics(prefix="")["continuations_failed/timeout"] >= 1


def test_timeout_holds_for_a_blocking_synchronous_policy_and_hook(gate: threading.Event) -> None:
    class Blocking:
        def act(self, context: PolicyContext) -> str:
            gate.wait()
            return "wait"

    config = ProverConfig(curtail=False, k=2, continuation_timeout_s=0.3)
    batch = key_group(["wait", "take", "wait", "wait"])
    for kwargs in (
        dict(env=SnapshotEnv(KeyRoom), policy=Blocking()),
        dict(continue_from=lambda t, turn, s: gate.wait()),
        dict(executor=LocalExecutor(ReplayEnv(KeyRoom), Blocking(), timeout_s=0.3)),
    ):
        result = run_guarded(lambda kw=kwargs: compute_bonus(batch, judge=FixedJudge(1, 1), config=config, **kw))
        m = result.report.metrics(prefix="")
        assert m["continuations_failed/timeout"] == m["continuations"] == 4 and no_bonus(result)


def test_a_judge_that_never_answers_is_timed_out(gate: threading.Event) -> None:
    class Silent:
        def propose(self, *args: Any) -> Proposal:
            gate.wait()
            raise AssertionError("unreachable")

    class SilentAsync:
        async def propose(self, *args: Any) -> Proposal:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    config = ProverConfig(judge_timeout_s=0.3)
    for judge in (Silent(), SilentAsync()):
        result = run_guarded(
            lambda j=judge: compute_bonus(
                BATCH, judge=j, env=SnapshotEnv(lambda: MDPEnv(VaultMDP())), policy=Wait(), config=config
            )
        )
        skipped = result.report.skips
        assert skipped and all(g.stage == "propose" and "judge timed out" in g.reason for g in skipped)
        assert result.report.count("skipped") == len(result.report.groups) - result.report.count("not_eligible")
        assert no_bonus(result)
    assert ProverConfig().judge_timeout_s == 600.0


def test_synchronous_judges_run_concurrently() -> None:
    eligible = [g for g in {t.group_id for t in BATCH}]
    config = ProverConfig(judge_timeout_s=30)
    n = sum(0 < sum(t.success for t in BATCH if t.group_id == g) / 8 < 0.5 for g in eligible)
    assert n >= 2
    barrier = threading.Barrier(n, timeout=20)  # passes only if every group's judge call is in flight at once

    class Meeting(DivergenceJudge):
        def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Any:
            barrier.wait()
            return super().propose(success, failures, rules)

    env = SnapshotEnv(lambda: MDPEnv(VaultMDP()))
    result = run_guarded(lambda: compute_bonus(BATCH, judge=Meeting(), env=env, policy=vault_policy(), config=config))
    assert not result.report.skips


# --- silent bias ------------------------------------------------------------------------------------


def test_an_environment_without_reseed_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    batch = key_group(["wait", "take", "wait", "wait"])
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        compute_bonus(batch, judge=FixedJudge(1, 1), env=ReplayEnv(lambda: KeyRoom(reseedable=False)), policy=Wait())
    warned = [r for r in caplog.records if "reseed" in r.getMessage()]
    assert len(warned) == 1 and "identical" in warned[0].getMessage()  # once per restorer, not per continuation
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        compute_bonus(batch, judge=FixedJudge(1, 1), env=ReplayEnv(KeyRoom), policy=Wait())
    assert not [r for r in caplog.records if "reseed" in r.getMessage()]
    for restorer in (ReplayEnv, SnapshotEnv):
        with pytest.raises(MissingReseedError, match="reseed"):
            compute_bonus(
                batch,
                judge=FixedJudge(1, 1),
                env=restorer(lambda: KeyRoom(reseedable=False), missing_reseed="error"),  # type: ignore[operator]
                policy=Wait(),
            )
    with pytest.raises(ValueError, match="missing_reseed"):
        ReplayEnv(KeyRoom, missing_reseed="sometimes")  # type: ignore[arg-type]


# --- event loops ------------------------------------------------------------------------------------


class LoopBound:
    """A Jupyter-style async policy: it awaits futures of the loop it was created on."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()

    async def act(self, context: PolicyContext) -> str:
        future = self.loop.create_future()
        self.loop.call_soon(future.set_result, "wait")
        result: str = await future
        return result


def test_a_policy_bound_to_the_callers_loop_works_with_acompute_bonus_and_is_named_by_compute_bonus() -> None:
    batch = key_group(["wait", "take", "wait", "wait"])

    async def notebook_cell() -> None:
        policy = LoopBound()
        result = await acompute_bonus(batch, judge=FixedJudge(1, 1), env=SnapshotEnv(KeyRoom), policy=policy)
        assert result.turn_bonus["g0"].tolist() == [0, 1, 0, 0]
        with pytest.raises(EventLoopError, match="acompute_bonus"):
            compute_bonus(batch, judge=FixedJudge(1, 1), env=SnapshotEnv(KeyRoom), policy=policy)

    asyncio.run(notebook_cell())


# --- silently dropped credit -----------------------------------------------------------------------


def test_credit_on_a_turn_with_an_empty_token_span_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    batch = key_group(["wait", "take", "wait", "wait"])
    turns = list(batch[0].turns)
    turns[1] = Turn(observation=turns[1].observation, action="take", token_span=(8, 8))  # nothing to train on
    batch[0] = batch[0].model_copy(update={"turns": tuple(turns)})
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(batch, judge=FixedJudge(1, 2), env=SnapshotEnv(KeyRoom), policy=Wait())
    g = result.report.groups[0]
    assert g.status == "accepted" and g.uncredited_turns == (1,)
    assert result.report.metrics(prefix="")["uncredited_turns"] == 1
    assert any("token span is empty" in r.getMessage() for r in caplog.records)
    assert result.turn_bonus["g0"].tolist() == [0, 1, 1, 0] and result.token_bonus("g0", 20).sum() == 2.0


# --- programming errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, text",
    [
        (dict(env=SnapshotEnv(KeyRoom), policy="wait"), "policy"),  # a function is a policy; a string is not
        (dict(env=KeyRoom(), policy=Wait()), "ReplayEnv"),
        (dict(continue_from="not callable"), "continue_from"),
        (dict(executor=object()), "executor"),
    ],
)
def test_objects_that_miss_their_protocol_raise_at_once(kwargs: dict[str, Any], text: str) -> None:
    with pytest.raises(ProtocolError, match=text) as err:
        compute_bonus(key_group(["wait", "take", "wait", "wait"]), judge=FixedJudge(1, 1), **kwargs)
    assert isinstance(err.value, TypeError) and isinstance(err.value, ProverError)


def test_a_missing_judge_raises_at_once() -> None:
    for judge in (None, lambda success, failures, rules: None):
        with pytest.raises(ProtocolError, match="judge"):
            compute_bonus(key_group(["wait"] * 4), judge=judge, continue_from=lambda t, turn, s: True)  # type: ignore[arg-type]


def test_every_eligible_group_skipped_for_one_reason_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def propose(self, *args: Any) -> Proposal:
            raise ConnectionError("judge server down")

    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(BATCH, judge=Broken(), env=SnapshotEnv(lambda: MDPEnv(VaultMDP())), policy=Wait())
    skipped = len(result.report.skips)
    assert skipped >= 2
    [record] = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert f"all {skipped} eligible groups" in record.getMessage() and "judge server down" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        compute_bonus(
            BATCH, judge=DivergenceJudge(), env=SnapshotEnv(lambda: MDPEnv(VaultMDP())), policy=vault_policy()
        )
    assert not caplog.records


# --- serialisation ----------------------------------------------------------------------------------


def test_mismatch_message_shows_types_and_the_first_difference() -> None:
    long = "You are in a kitchen. " * 10
    traj = make_trajectory("a", "g", True, ["x", "y"], observations=[long + "A fridge.", "s1"])

    class Text:
        def reset(self, spec: Any) -> Step:
            return Step(observation=long + "A stove.")

        def step(self, action: Any) -> Step:
            return Step(observation="s1")

        def reseed(self, seed: int) -> None: ...

    with pytest.raises(ReplayMismatchError) as err:
        ReplayEnv(Text).restore(traj, 1, seed=0)
    message = str(err.value)
    assert "first difference at character 222" in message and "'fridge.' != 'stove.'" in message

    class Numbers(Text):
        def reset(self, spec: Any) -> Step:
            return Step(observation=(1, 2, 4))

    traj = make_trajectory("a", "g", True, ["x", "y"], observations=[[1, 2, 3], "s1"])
    with pytest.raises(ReplayMismatchError, match=r"list.*tuple.*first difference at \[2\]: 3 != 4"):
        ReplayEnv(Numbers).restore(traj, 1, seed=0)
