"""The faults a long training run meets, and the mistakes users make (issue 23): nothing hangs past
its limit, nothing keeps the process from exiting, nothing is silently wrong.

Each test names the defect it guards; docs/reliability.md lists them with their node ids. User code
that "blocks forever" waits on an event (``gate``) set at teardown, or on a 30 s timeout, so that a
regression fails the test (a bound of several seconds against a 30 s block) instead of hanging it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from prover_core import (
    Decline,
    Proposal,
    ProverConfig,
    ReplayEnv,
    Segment,
    SegmentRules,
    SnapshotEnv,
    Trajectory,
    Turn,
    acompute_bonus,
    compute_bonus,
)
from prover_core.errors import ContinuationTimeoutError, EngineError, JudgeError, ProtocolError
from prover_core.executors import LocalExecutor
from prover_core.judges.llm import LLMJudge
from prover_core.judges.llm.answer import parse_answer
from prover_core.judges.llm.config import LLMJudgeConfig
from prover_core.protocols import PolicyContext, Step
from prover_core.restore import observations_equal
from prover_engine import EnginePolicy, Generation, OpenAICompletionsEngine, SamplingParams
from tests import engine_support as es
from tests.chat_server import ChatServer, answer
from tests.conftest import make_trajectory
from tests.test_llm_judge import make_group
from tests.test_reliability import FixedJudge, KeyRoom, Wait, key_group, no_bonus, run_guarded

ROOT = Path(__file__).resolve().parents[1]
BLOCK_S = 30.0
"""How long "forever" lasts: far past every limit below, so a regression shows as a failed bound."""

WINNER = ["wait", "take", "wait", "wait"]


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event that user code blocks on; set at teardown so abandoned threads end."""
    event = threading.Event()
    yield event
    event.set()


def failures(result: Any) -> dict[str, float]:
    m = result.report.metrics(prefix="")
    return {k.split("/")[1]: v for k, v in m.items() if k.startswith("continuations_failed/") and v}


# --- 1. a blocking synchronous TokenEngine under EnginePolicy(timeout_s=...) ------------------------


class BlockingEngine:
    """A synchronous engine whose ``generate`` blocks (until ``gate`` or ``BLOCK_S``)."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.calls = 0

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        self.calls += 1
        self.gate.wait(BLOCK_S)
        return Generation((50,))


def engine_batch() -> tuple[list[Trajectory], Any]:
    rows = es.key_group("g", successes=2)
    return [t for t, _, _ in rows], es.store_of(rows)


def engine_policy(engine: Any, store: Any, **kw: Any) -> EnginePolicy:
    return EnginePolicy(engine, store, render_observation=es.render, parse_action=es.parse, **kw)


def test_a_blocking_sync_engine_under_a_timeout_neither_holds_the_step_nor_starves_the_loop(
    gate: threading.Event,
) -> None:
    trajectories, store = engine_batch()
    engine = BlockingEngine(gate)
    policy = engine_policy(engine, store, timeout_s=0.3)
    env = ReplayEnv(lambda: es.KeyEnv(horizon=4))
    config = ProverConfig(curtail=False, k=8)

    started = time.monotonic()
    result = run_guarded(
        lambda: compute_bonus(trajectories, judge=es.FixedJudge(1, 1), env=env, policy=policy, config=config)
    )
    assert time.monotonic() - started < BLOCK_S / 3, "compute_bonus waited for the stuck generate calls"
    assert failures(result) == {"timeout": 16.0} and no_bonus(result) and engine.calls == 16

    async def step_then_other_work() -> int:
        await acompute_bonus(trajectories, judge=es.FixedJudge(1, 1), env=env, policy=policy, config=config)
        return await asyncio.wait_for(asyncio.to_thread(lambda: 7), BLOCK_S / 3)  # the default executor is free

    started = time.monotonic()
    assert run_guarded(lambda: asyncio.run(step_then_other_work())) == 7  # and asyncio.run returns
    assert time.monotonic() - started < BLOCK_S / 3


# --- 2. LocalExecutor(threads=N, timeout_s=...) and one hanging environment --------------------------


def test_one_hanging_continuation_does_not_poison_a_threaded_local_executor(gate: threading.Event) -> None:
    hang = make_trajectory("hang", "g", True, WINNER)
    healthy = make_trajectory("ok", "g", True, WINNER)

    def hook(trajectory: Trajectory, turn: int, seed: int) -> bool:
        if trajectory.id == "hang":
            gate.wait(BLOCK_S)
        return True

    executor = LocalExecutor(continue_from=hook, threads=2, timeout_s=1.0)  # ample for the healthy ones

    async def go() -> tuple[list[Any], list[Any]]:
        stuck = await asyncio.gather(*(executor(hang, 1, s) for s in range(2)), return_exceptions=True)
        later = await asyncio.gather(*(executor(healthy, 1, s) for s in range(16)), return_exceptions=True)
        return stuck, later

    stuck, later = run_guarded(lambda: asyncio.run(go()))
    assert all(isinstance(r, ContinuationTimeoutError) for r in stuck)
    assert [getattr(r, "success", r) for r in later] == [True] * 16


def test_the_interpreter_exits_with_a_continuation_still_hanging() -> None:
    script = textwrap.dedent(
        """
        import asyncio, threading
        from prover_core.executors import LocalExecutor
        from tests.conftest import make_trajectory

        executor = LocalExecutor(continue_from=lambda t, turn, seed: threading.Event().wait(), threads=2, timeout_s=0.2)
        trajectory = make_trajectory("t", "g", True, ["a", "b", "c"])
        try:
            asyncio.run(executor(trajectory, 1, 0))
        except Exception as exc:
            print(type(exc).__name__)
        executor.shutdown()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False, cwd=ROOT
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ContinuationTimeoutError"), done.stderr


# --- 3. non-finite configuration ---------------------------------------------------------------------

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    "build",
    [
        lambda: ProverConfig(lam=INF),
        lambda: ProverConfig(std_eps=INF),
        lambda: ProverConfig(negative_lam=INF),
        lambda: ProverConfig(continuation_timeout_s=INF),
        lambda: ProverConfig(judge_timeout_s=INF),
        lambda: OpenAICompletionsEngine("http://127.0.0.1:1/v1", "m", backoff_s=NAN),
        lambda: OpenAICompletionsEngine("http://127.0.0.1:1/v1", "m", timeout_s=NAN),
        lambda: OpenAICompletionsEngine("http://127.0.0.1:1/v1", "m", connect_timeout_s=NAN),
        lambda: OpenAICompletionsEngine("http://127.0.0.1:1/v1", "m", max_wait_s=INF),
        lambda: EnginePolicy(
            BlockingEngine(threading.Event()), es.store_of([]), render_observation=es.render, timeout_s=NAN
        ),
        lambda: LLMJudgeConfig(base_url="http://127.0.0.1:1/v1", model="m", timeout_s=INF),
        lambda: LLMJudgeConfig(base_url="http://127.0.0.1:1/v1", model="m", backoff_max_s=INF),
    ],
    ids=[
        "lam-inf",
        "std_eps-inf",
        "negative_lam-inf",
        "continuation_timeout-inf",
        "judge_timeout-inf",
        "engine-backoff-nan",
        "engine-timeout-nan",
        "engine-connect-nan",
        "engine-max_wait-inf",
        "engine-policy-timeout-nan",
        "judge-timeout-inf",
        "judge-backoff_max-inf",
    ],
)
def test_non_finite_numbers_in_a_config_are_refused(build: Any) -> None:
    with pytest.raises(ValidationError, match="finite number"):
        build()


# --- 4. NaN in an observation ---------------------------------------------------------------------------


class NaNRoom(KeyRoom):
    """KeyRoom whose observations hold a NaN reading (a sensor with no value), as a tuple and an array."""

    def reset(self, spec: Mapping[str, Any]) -> Step:
        step = super().reset(spec)
        return Step(observation=reading(step.observation), info=step.info)

    def step(self, action: str) -> Step:
        step = super().step(action)
        return Step(observation=reading(step.observation), done=step.done, success=step.success, info=step.info)


def reading(text: str) -> tuple[Any, ...]:
    """A fresh NaN each time (``nan is nan`` would let identity stand in for equality)."""
    return (text, float("nan"), np.array([1.0, float("nan")]))


def test_a_nan_in_an_observation_replays() -> None:
    assert observations_equal(NAN, NAN) and observations_equal({"x": [NAN]}, {"x": (NAN,)})
    assert not observations_equal(NAN, 1.0) and not observations_equal([NAN], [NAN, NAN])
    seen = [reading(f"turn {t}") for t in range(4)]
    batch = [make_trajectory("g0", "g", True, WINNER, seen)] + [  # type: ignore[arg-type]
        make_trajectory(f"g{i}", "g", False, ["wait"] * 4, seen)  # type: ignore[arg-type]
        for i in (1, 2, 3)
    ]
    for env in (ReplayEnv(NaNRoom), SnapshotEnv(NaNRoom)):
        result = compute_bonus(batch, judge=FixedJudge(1, 1), env=env, policy=Wait(), config=ProverConfig(k=2))
        g = result.report.groups[0]
        assert (g.status, g.verification and g.verification.delta) == ("accepted", 1.0), g.reason
        assert result.turn_bonus["g0"].tolist() == [0.0, 1.0, 0.0, 0.0]


# --- 5. the LLM judge's timeout_s bounds the whole answer ----------------------------------------------


def test_the_judge_timeout_bounds_a_request_whose_answer_trickles() -> None:
    trickle = answer(1, 1)
    trickle.trickle_s = 0.05  # ~300 bytes: ~15 s in all, never 1 s without a byte
    with ChatServer([trickle]) as server:
        judge = LLMJudge.from_url(server.url, "m", timeout_s=1.0, max_attempts=1, connect_timeout_s=1.0)
        group = make_group()
        started = time.monotonic()
        with pytest.raises(JudgeError, match=r"timed out \(AnswerTimeout: the whole answer took longer than timeout_s"):
            asyncio.run(judge.propose(group[0], group[1:], SegmentRules(max_turns=2)))
        assert time.monotonic() - started < 3.0
        started = time.monotonic()
        with pytest.raises(JudgeError, match=r"timed out \(AnswerTimeout: the whole answer took longer than timeout_s"):
            judge.propose_sync(group[0], group[1:], SegmentRules(max_turns=2))
        assert time.monotonic() - started < 3.0


# --- 6. a BaseException that is not an Exception, on a worker thread --------------------------------------


class Halt(BaseException):
    """User code's own BaseException (like KeyboardInterrupt or SystemExit, not an Exception)."""


@pytest.mark.parametrize("raised", [Halt, KeyboardInterrupt, SystemExit])
def test_a_base_exception_on_a_worker_thread_is_an_error_not_a_timeout(raised: type[BaseException]) -> None:
    class Raising(KeyRoom):
        def step(self, action: str) -> Step:
            if self.t >= 2:
                raise raised("stop here")
            return super().step(action)

    config = ProverConfig(k=2, continuation_timeout_s=BLOCK_S)
    batch = key_group(WINNER)

    def hook(trajectory: Trajectory, turn: int, seed: int) -> bool:
        raise raised("stop here")

    for kwargs in (dict(env=ReplayEnv(Raising), policy=Wait()), dict(continue_from=hook)):
        started = time.monotonic()
        result = run_guarded(lambda kw=kwargs: compute_bonus(batch, judge=FixedJudge(0, 0), config=config, **kw))
        assert time.monotonic() - started < BLOCK_S / 3
        g = result.report.groups[0]
        assert g.status == "skipped" and raised.__name__ in g.reason and no_bonus(result)
        assert set(failures(result)) == {"error"}


# --- 7. the LLM judge parses turn numbers strictly --------------------------------------------------------


def test_false_as_a_turn_number_is_rejected_not_read_as_turn_zero() -> None:
    text = '{"failure_mode": "none", "start_turn": false, "end_turn": false, "rationale": ""}'
    assert "start_turn" in str(parse_answer(text)) and "valid integer" in str(parse_answer(text))
    assert isinstance(parse_answer('{"failure_mode": "x", "start_turn": "1", "end_turn": 1}'), str)
    falsy = answer(None, None)
    falsy.body["choices"][0]["message"]["content"] = text
    with ChatServer([falsy, answer(None, None)]) as server:
        judge = LLMJudge.from_url(server.url, "m", backoff_initial_s=0.0, backoff_jitter_s=0.0)
        group = make_group()
        result = asyncio.run(judge.propose(group[0], group[1:], SegmentRules(max_turns=2)))
    assert isinstance(result, Decline) and len(server.requests) == 2  # repaired, then a real decline


# --- 8. smaller: reseed, restore, engine ids --------------------------------------------------------------


def test_a_failing_reseed_is_a_restore_failure() -> None:
    class BadSeed(KeyRoom):
        def __init__(self) -> None:
            super().__init__()
            self.reseed = self._reseed

        def _reseed(self, seed: int) -> None:
            raise ValueError("bad seed")

    for env in (ReplayEnv(BadSeed), SnapshotEnv(BadSeed)):
        result = compute_bonus(
            key_group(WINNER), judge=FixedJudge(1, 1), env=env, policy=Wait(), config=ProverConfig(curtail=False, k=2)
        )
        assert failures(result) == {"restore": 4.0} and "reseed" in result.report.groups[0].reason


def test_a_restore_that_returns_garbage_is_a_protocol_error() -> None:
    class Garbage:
        def restore(self, trajectory: Trajectory, turn: int, seed: int) -> object:
            return {"last": None}

    with pytest.raises(ProtocolError, match=r"Garbage.restore must return an episode.*dict"):
        compute_bonus(key_group(WINNER), judge=FixedJudge(1, 1), env=Garbage(), policy=Wait(), config=ProverConfig(k=2))


def test_an_engine_answer_longer_than_max_tokens_is_an_engine_error() -> None:
    trajectory, prompt, completion = es.record("a", "g", WINNER)

    class Chatty:
        def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
            return Generation((51,) * (params.max_tokens + 1))

    policy = engine_policy(
        Chatty(), es.store_of([(trajectory, prompt, completion)]), sampling=SamplingParams(max_tokens=2)
    )
    context = PolicyContext(trajectory, trajectory.turns[:1], (1, False), {}, 0, np.random.default_rng(0), 1)
    with pytest.raises(EngineError, match="3 token ids for max_tokens=2"):
        asyncio.run(policy.act(context))


# --- a user's first mistakes --------------------------------------------------------------------------------


def inclusive(trajectory: Trajectory) -> Trajectory:
    """``trajectory`` with each token span written with an inclusive end, ``(start, end - 1)``."""
    turns = [t.model_copy(update={"token_span": (t.token_span[0], t.token_span[1] - 1)}) for t in trajectory.turns]
    return trajectory.model_copy(update={"turns": tuple(turns)})


def warnings_of(caplog: pytest.LogCaptureFixture, kind: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and f"batch_warnings/{kind}" in r.getMessage()
    ]


def test_inclusive_token_span_ends_are_warned_about_once_per_batch(caplog: pytest.LogCaptureFixture) -> None:
    rows = es.key_group("g", successes=2) + es.key_group("h", successes=0)
    right = [t for t, _, _ in rows]
    config = ProverConfig(k=2)
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        clean = compute_bonus(
            right, judge=es.FixedJudge(1, 1), continue_from=lambda t, turn, s: turn >= 2, config=config
        )
    assert not warnings_of(caplog, "token_spans") and clean.report.batch_warnings == []
    assert clean.report.metrics()["prover/batch_warnings/token_spans"] == 0.0

    caplog.clear()
    wrong = [inclusive(t) for t in right]  # one-token actions: every span is now empty
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(
            wrong, judge=es.FixedJudge(1, 1), continue_from=lambda t, turn, s: turn >= 2, config=config
        )
    (message,) = warnings_of(caplog, "token_spans")
    assert "64 turns" in message and "32 turns with a nonzero advantage" in message  # group g's 8 runs x 4 turns
    assert "half-open" in message and "(start, last + 1)" in message
    assert result.report.metrics()["prover/batch_warnings/token_spans"] == 64.0

    # multi-token actions around empty observations: the spans leave gaps that nothing fills
    turns = [Turn(observation="", action=f"a{i}", token_span=(3 * i, 3 * i + 2)) for i in range(3)]
    gappy = [Trajectory(id=f"t{i}", group_id="g", turns=turns, success=i == 0) for i in range(4)]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(gappy, judge=es.FixedJudge(0, 0), continue_from=lambda t, turn, s: True, config=config)
    (message,) = warnings_of(caplog, "token_spans")
    assert "8 gaps" in message and result.report.batch_warnings[0].count == 8


def test_groups_of_one_and_one_group_for_the_whole_batch_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    tasks = [make_trajectory(f"t{i}", f"task{i // 4}", i % 4 == 0, WINNER) for i in range(12)]
    tasks = [t.model_copy(update={"reset": {"task": int(t.group_id[4:])}}) for t in tasks]
    hook = lambda t, turn, s: turn >= 2  # noqa: E731
    config = ProverConfig(k=2)
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        fine = compute_bonus(tasks, judge=FixedJudge(1, 1), continue_from=hook, config=config)
    assert fine.report.batch_warnings == [] and not warnings_of(caplog, "groups_of_one")

    ones = [t.model_copy(update={"group_id": t.id}) for t in tasks]
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(ones, judge=FixedJudge(1, 1), continue_from=hook, config=config)
    (message,) = warnings_of(caplog, "groups_of_one")
    assert "12 of 12 groups hold a single trajectory" in message and "group_id=trajectory.id" in message
    assert result.report.metrics()["prover/batch_warnings/groups_of_one"] == 12.0

    whole = [t.model_copy(update={"group_id": "batch"}) for t in tasks]
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(whole, judge=FixedJudge(1, 1), continue_from=hook, config=config)
    (message,) = warnings_of(caplog, "one_group")
    assert "whole batch of 12 trajectories is one group" in message and "3 different tasks" in message
    assert result.report.metrics()["prover/batch_warnings/one_group"] == 12.0

    # one task, a per-episode environment seed in each reset spec: one group is right, nothing to warn about
    seeded = [t.model_copy(update={"group_id": "g", "reset": {"task": 0, "seed": i}}) for i, t in enumerate(tasks[:4])]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(seeded, judge=FixedJudge(1, 1), continue_from=hook, config=config)
    assert result.report.batch_warnings == [] and not warnings_of(caplog, "one_group")

    # the member's index (prover_trl.member_reset's "member") varies per run of one task too
    members = [t.model_copy(update={"reset": {"prompt": "p", "member": i}}) for i, t in enumerate(seeded)]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(members, judge=FixedJudge(1, 1), continue_from=hook, config=config)
    assert result.report.batch_warnings == [] and not warnings_of(caplog, "one_group")

    # a key of the user's own that varies per run: warned about, with the fix; named in episode_keys: quiet
    own = [t.model_copy(update={"reset": {"prompt": "p", "attempt": i}}) for i, t in enumerate(seeded)]
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        compute_bonus(own, judge=FixedJudge(1, 1), continue_from=hook, config=config)
    (message,) = warnings_of(caplog, "one_group")
    assert "ProverConfig(episode_keys=('seed', 'member', ...))" in message
    caplog.clear()
    named = config.model_copy(update={"episode_keys": ("seed", "member", "attempt")})
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(own, judge=FixedJudge(1, 1), continue_from=hook, config=named)
    assert result.report.batch_warnings == [] and not warnings_of(caplog, "one_group")


def test_every_continuation_failing_is_warned_about_with_the_first_error(caplog: pytest.LogCaptureFixture) -> None:
    """A policy that cannot act (here a hook that raises) fails every continuation; one group is declined, so not
    every eligible group is skipped, and still the step's log names the error."""

    class DeclineSecond:
        def propose(self, success, failures, rules):  # type: ignore[no-untyped-def]
            if success.group_id == "task1":
                return Decline(reason="no evidence")
            return Proposal(segment=Segment(trajectory_id=success.id, start=1, end=1))

    def broken(trajectory, turn, seed):  # type: ignore[no-untyped-def]
        raise ValueError("cannot parse action 'xyz'")

    batch = [make_trajectory(f"t{i}", f"task{i // 4}", i % 4 == 0, WINNER) for i in range(8)]
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = compute_bonus(batch, judge=DeclineSecond(), continue_from=broken, config=ProverConfig(k=2))
    assert result.report.summary()["declined"] == 1 and result.report.summary()["skipped"] == 1
    (line,) = [r.getMessage() for r in caplog.records if "every continuation of this call failed" in r.getMessage()]
    assert "cannot parse action 'xyz'" in line and "group 'task0'" in line


def test_a_config_reused_every_step_draws_new_continuation_seeds_for_new_episodes() -> None:
    """Step 2 reuses step 1's ids (a trainer numbering rows) and the one ProverConfig: new episodes, new seeds;
    the same batch again: the same seeds (reproducible)."""
    config = ProverConfig(k=4)

    def seeds_of(batch: list[Trajectory]) -> set[int]:
        seen: set[int] = set()

        def hook(t: Trajectory, turn: int, seed: int) -> bool:
            seen.add(seed)
            return turn >= 2

        compute_bonus(batch, judge=FixedJudge(1, 1), continue_from=hook, config=config)
        return seen

    step1 = key_group(WINNER)
    step2 = [t.model_copy(update={"reset": {"seed": 1}}) for t in key_group(["wait", "take", "take", "wait"])]
    first = seeds_of(step1)
    assert len(first) == 4 and seeds_of(step1) == first
    assert seeds_of(step2).isdisjoint(first)
