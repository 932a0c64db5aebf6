"""The LLM judge against a real, scripted chat-completions server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prover_core import Decline, JudgeError, JudgeRefusedError, Proposal, SegmentRules, Trajectory, Turn, compute_bonus
from prover_core.judges.llm import LLMJudge
from tests.chat_server import ChatServer, Reply, answer, completion

RULES = SegmentRules(max_turns=2)


def make_group(gid: str = "g", n_fail: int = 3) -> list[Trajectory]:
    """One success of 5 turns (turn 3 holds an error-producing action) and ``n_fail`` failures."""
    s_obs = ["hall", "key room", "hall", "door", "vault"]
    s_act = ["west", "take key", "east", "kick door", "open door"]
    turns = [
        Turn(observation=o, action=a, info={"error": "you hurt your foot"} if t == 3 else {})
        for t, (o, a) in enumerate(zip(s_obs, s_act, strict=False))
    ]
    success = Trajectory(id=f"{gid}-s", group_id=gid, turns=turns, success=True)
    failures = [
        Trajectory(
            id=f"{gid}-f{i}",
            group_id=gid,
            success=False,
            turns=[
                Turn(observation=o, action=a) for o, a in [("hall", "east"), ("door", "open door"), ("door", "wait")]
            ],
        )
        for i in range(n_fail)
    ]
    return [success, *failures]


def judge_for(server: ChatServer, **kw: Any) -> LLMJudge:
    settings: dict[str, Any] = dict(
        backoff_initial_s=0.0, backoff_jitter_s=0.0, max_attempts=3, timeout_s=5.0, connect_timeout_s=2.0
    )
    settings.update(kw)
    return LLMJudge.from_url(server.url, "test-model", **settings)


def run(judge: LLMJudge, group: list[Trajectory] | None = None) -> Proposal | Decline:
    group = group or make_group()
    return asyncio.run(judge.propose(group[0], group[1:], RULES))


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


# -- the structured protocol ----------------------------------------------------------------------


def test_structured_answer_becomes_a_proposal_and_usage_is_counted() -> None:
    with ChatServer([answer(1, 2, usage=(321, 45))]) as server:
        judge = judge_for(server)
        p = run(judge)
    assert isinstance(p, Proposal) and (p.segment.trajectory_id, p.segment.start, p.segment.end) == ("g-s", 1, 2)
    assert p.rationale == "the failed runs never open the door | because"
    body = server.requests[0]
    assert body["model"] == "test-model" and body["temperature"] == 0.0 and body["max_tokens"] == 1024
    assert body["response_format"]["type"] == "json_schema" and "tools" not in body
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert "at most 2 turns" in system and "end_turn must be at most 3" in system
    assert "take key" in user and "failed run 'g-f0'" in user and "invalid turns [3]" in user
    stats = judge.stats()
    assert (stats["calls"], stats["prompt_tokens"], stats["completion_tokens"], stats["proposals"]) == (1, 321, 45, 1)
    assert stats["retries"] == 0 and stats["repairs"] == 0 and stats["latency_s"] > 0


def test_sync_propose_answers() -> None:
    group = make_group()
    with ChatServer([answer(0, 0)]) as server, judge_for(server) as judge:
        p = judge.propose_sync(group[0], group[1:], RULES)
    assert isinstance(p, Proposal) and p.segment.start == 0 and len(server.requests) == 1


def test_decline_passes_through() -> None:
    with ChatServer([answer(None, None, failure_mode="all runs are identical")]) as server:
        d = run(judge_for(server))
    assert isinstance(d, Decline) and "all runs are identical" in d.reason


def test_invalid_answers_are_repaired_with_the_reason() -> None:
    script = [answer(3, 9), answer(4, 4), answer(2, 3), answer(1, 2)]
    with ChatServer(script) as server:
        judge = judge_for(server)
        p = run(judge)
    assert isinstance(p, Proposal) and (p.segment.start, p.segment.end) == (1, 2)
    assert len(server.requests) == 4 and judge.stats()["repairs"] == 3
    feedback = [user_messages(body)[-1] for body in server.requests[1:]]
    assert "out of range: turns are 0..4" in feedback[0]
    assert "ends on the terminal turn 4" in feedback[1]
    assert "turn 3 holds an invalid or error-producing action (you hurt your foot)" in feedback[2]
    # the conversation keeps the model's earlier answers
    assert [m["role"] for m in server.requests[3]["messages"]] == ["system", "user"] + ["assistant", "user"] * 3


def test_prose_after_all_repairs_is_a_judge_error_and_a_recorded_skip() -> None:
    prose = completion("I think the agent did well when it took the key.")
    with ChatServer([prose]) as server:
        judge = judge_for(server, max_repairs=3)
        with pytest.raises(JudgeError, match="no valid judge answer after 3 repair"):
            run(judge)
        assert len(server.requests) == 4 and judge.stats()["errors"] == 1
        assert "not valid JSON" in user_messages(server.requests[1])[-1]
        # through compute_bonus: the group is skipped with the reason and keeps plain GRPO credit
        group = make_group()
        result = compute_bonus(group, judge=judge, continue_from=lambda t, turn, seed: turn >= 2)
    (record,) = result.report.groups
    assert record.status == "skipped" and record.stage == "propose" and "no valid judge answer" in record.reason
    assert np.all(result.turn_bonus["g-s"] == 0) and result.advantages["g-s"] == pytest.approx(0.75)
    assert result.report.judge_stats["errors"] == 1  # compute_bonus starts a new step: stats count this call only


def test_truncated_json_answer_is_repaired_with_a_hint() -> None:
    cut = completion('{"failure_mode": "the door", "start_turn": 1, "end_tu', finish_reason="length")
    with ChatServer([cut, answer(1, 1)]) as server:
        p = run(judge_for(server))
    assert isinstance(p, Proposal) and "cut off by the token limit" in user_messages(server.requests[1])[-1]


# -- transport faults -----------------------------------------------------------------------------


def test_html_with_status_200_is_an_error_without_retry() -> None:
    html = Reply(body="<html><body>Bad gateway config</body></html>", content_type="text/html")
    with ChatServer([html]) as server:
        judge = judge_for(server)
        with pytest.raises(JudgeError, match=r"not JSON \(text/html\).*Bad gateway"):
            run(judge)
    assert len(server.requests) == 1 and judge.stats()["failed_requests"] == 1


def test_json_that_is_not_a_chat_completion_is_an_error() -> None:
    with (
        ChatServer([Reply(body={"error": {"message": "model overloaded"}})]) as server,
        pytest.raises(JudgeError, match=r"not a chat completion.*model overloaded"),
    ):
        run(judge_for(server))


def test_5xx_and_html_502_are_retried_then_succeed() -> None:
    script = [
        Reply(status=503, body={"error": "busy"}),
        Reply(status=502, body="<html>502</html>", content_type="text/html"),
    ]
    with ChatServer([*script, answer(1, 1)]) as server:
        judge = judge_for(server, max_attempts=3)
        p = run(judge)
    assert isinstance(p, Proposal) and len(server.requests) == 3
    s = judge.stats()
    assert (s["calls"], s["retries"], s["failed_requests"]) == (3, 2, 2)


def test_5xx_until_attempts_run_out_is_a_judge_error() -> None:
    with (
        ChatServer([Reply(status=500, body={"error": "boom"})]) as server,
        pytest.raises(JudgeError, match=r"failed after 3 attempt.*status 500"),
    ):
        run(judge_for(server, max_attempts=3))
    assert len(server.requests) == 3


def test_429_honours_retry_after() -> None:
    limited = Reply(status=429, body={"error": "slow down"}, headers={"Retry-After": "0.2"})
    with ChatServer([limited, answer(1, 1)]) as server:
        judge = judge_for(server, backoff_initial_s=5.0)  # Retry-After wins over the (long) backoff
        p = run(judge)
    assert isinstance(p, Proposal) and judge.stats()["retry_wait_s"] == pytest.approx(0.2)


def test_retry_after_is_capped() -> None:
    limited = Reply(status=429, body={"error": "slow down"}, headers={"Retry-After": "3600"})
    with ChatServer([limited, answer(1, 1)]) as server:
        judge = judge_for(server, max_retry_after_s=0.05)
        run(judge)
    assert judge.stats()["retry_wait_s"] == pytest.approx(0.05)


@pytest.mark.parametrize(("status", "attempts"), [(400, 1), (401, 1), (404, 1), (422, 1), (408, 2), (409, 2)])
def test_4xx_is_not_retried_except_408_and_409(status: int, attempts: int) -> None:
    with (
        ChatServer([Reply(status=status, body={"error": "nope"})]) as server,
        pytest.raises(JudgeError, match=str(status)),
    ):
        run(judge_for(server, max_attempts=2))
    assert len(server.requests) == attempts


def test_backoff_grows_exponentially_with_jitter_bounds() -> None:
    with ChatServer([Reply(status=503, body={})] * 3 + [answer(1, 1)]) as server:
        judge = judge_for(server, max_attempts=4, backoff_initial_s=0.01, backoff_jitter_s=0.0, backoff_max_s=0.015)
        run(judge)
    assert judge.stats()["retry_wait_s"] == pytest.approx(0.01 + 0.015 + 0.015)  # 0.01, min(0.02, .015), min(.04, .015)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_server_down_is_a_connection_error_after_retries() -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    judge = LLMJudge.from_url(url, "m", max_attempts=2, backoff_initial_s=0.0, backoff_jitter_s=0.0)
    with pytest.raises(JudgeError, match=r"failed after 2 attempt.*connection error"):
        run(judge)
    s = judge.stats()
    assert (s["calls"], s["failed_requests"], s["retries"], s["errors"]) == (2, 2, 1, 1)


def test_slow_server_times_out() -> None:
    with ChatServer([answer(1, 1, delay_s=0.5)]) as server, pytest.raises(JudgeError, match=r"timed out.*Timeout"):
        run(judge_for(server, timeout_s=0.05, max_attempts=2))
    assert len(server.requests) == 2


def dripping(reply: Reply, every_s: float) -> Reply:
    """``reply`` sent a byte every ``every_s`` seconds: no single read waits longer than that."""
    reply.trickle_s = every_s
    return reply


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "sync"])
def test_a_dripping_answer_is_cut_off_at_timeout_s(blocking: bool) -> None:
    timeout_s = 1.0  # a byte every 0.5 s (~300 bytes: ~150 s in all); connect_timeout_s=10 once let it run 11 s
    with ChatServer([dripping(answer(1, 1), 0.5)]) as server:
        judge = judge_for(server, timeout_s=timeout_s, connect_timeout_s=10.0, max_attempts=2)
        group = make_group()
        started = time.monotonic()
        with pytest.raises(JudgeError, match=r"failed after 2 attempt.*timed out \(AnswerTimeout"):
            if blocking:
                judge.propose_sync(group[0], group[1:], RULES)
            else:
                run(judge, group)
        elapsed = time.monotonic() - started
    assert elapsed < 2 * (3 * timeout_s) + 0.5, f"two attempts took {elapsed:.1f}s against timeout_s={timeout_s}"
    s = judge.stats()
    assert (s["calls"], s["retries"], s["failed_requests"], s["errors"], s["latency_s"]) == (2, 1, 2, 1, 0)


def test_a_dripping_answer_skips_its_group_and_a_fast_answer_still_counts() -> None:
    groups = [*make_group("drip"), *make_group("fast")]

    def script(body: dict[str, Any], index: int) -> Reply:
        drips = "'drip-s'" in body["messages"][1]["content"]
        return dripping(answer(1, 1), 0.5) if drips else answer(1, 1)

    with ChatServer(script) as server:
        judge = judge_for(server, timeout_s=1.0, connect_timeout_s=10.0, max_attempts=1)
        started = time.monotonic()
        result = compute_bonus(groups, judge=judge, continue_from=lambda t, turn, seed: turn >= 2)
        elapsed = time.monotonic() - started
    by_group = {g.group_id: g for g in result.report.groups}
    assert elapsed < 3 * 1.0 + 0.5, f"compute_bonus took {elapsed:.1f}s against timeout_s=1"
    assert by_group["drip"].status == "skipped" and by_group["drip"].stage == "propose"
    assert "timed out (AnswerTimeout: the whole answer took longer than timeout_s" in (by_group["drip"].reason or "")
    assert by_group["fast"].status == "accepted"
    stats = result.report.judge_stats
    assert (stats["calls"], stats["failed_requests"], stats["proposals"], stats["errors"]) == (2, 1, 1, 1)


def test_truncated_http_body_and_dropped_connection_are_retried() -> None:
    script = [Reply(body={"choices": [{"message": {"content": "x" * 200}}]}, truncate=True), Reply(drop=True)]
    with ChatServer([*script, answer(1, 1)]) as server:
        judge = judge_for(server, max_attempts=3)
        p = run(judge)
    assert isinstance(p, Proposal) and judge.stats()["failed_requests"] == 2


def test_circuit_opens_after_repeated_failed_requests_and_new_step_closes_it() -> None:
    with ChatServer([Reply(status=503, body={})]) as server:
        judge = judge_for(server, max_attempts=2, circuit_failures=3)
        for _ in range(2):
            with pytest.raises(JudgeError, match=r"failed after 2 attempt.*status 503"):
                run(judge)  # 2 failed attempts: one failed request
        with pytest.raises(JudgeError, match=r"failed after 2 attempt.*circuit open"):
            run(judge)  # the third failed request opens the circuit
        with pytest.raises(JudgeRefusedError, match="circuit open"):
            run(judge)  # refused without a request
        assert len(server.requests) == 6 and judge.stats()["circuit_open"] == 1
        assert judge.stats()["calls"] == 6 and judge.stats()["retries"] == 3
        judge.new_step()
        assert judge.stats()["calls"] == 0 and judge.total_stats()["calls"] == 6
        with pytest.raises(JudgeError, match="status 503"):
            run(judge)
        assert len(server.requests) == 8


def test_budget_caps_per_step() -> None:
    script = [answer(4, 4, usage=(600, 100)), answer(1, 1, usage=(600, 100))]
    with ChatServer(script) as server:
        judge = judge_for(server, max_calls_per_step=1)
        with pytest.raises(JudgeRefusedError, match="budget exhausted: 1 calls per step"):
            run(judge)  # the repair would need a second call
        assert len(server.requests) == 1
        judge.new_step()
        assert isinstance(run(judge), Proposal)  # a new step, a new budget
    with ChatServer(script) as server:
        tokens = judge_for(server, max_tokens_per_step=1000)
        assert isinstance(run(tokens), Proposal)  # 700 tokens before the repair (< 1000), 1400 after
        assert tokens.stats()["calls"] == 2
        with pytest.raises(JudgeRefusedError, match="budget exhausted: 1400 of 1000 tokens"):
            run(tokens)
        assert len(server.requests) == 2


# -- the agentic protocol -------------------------------------------------------------------------


def test_agentic_tool_calls_then_answer() -> None:
    script = [
        completion(tool_calls=[("search_trajectory", {"query": "open door", "k": 2})]),
        completion(
            tool_calls=[
                ("get_segment", {"trajectory_id": "g-s", "start_turn": 1, "end_turn": 2}),
                ("get_segment", {"trajectory_id": "g-f0", "start_turn": 5, "end_turn": 6}),
            ]
        ),
        answer(1, 1),
    ]
    with ChatServer(script) as server:
        judge = judge_for(server, mode="agentic", max_tool_rounds=3)
        p = run(judge)
    assert isinstance(p, Proposal) and (p.segment.start, p.segment.end) == (1, 1)
    first, second, third = server.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["search_trajectory", "get_segment"]
    assert "response_format" not in first
    tool_msgs = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool_msgs[0]["tool_call_id"] == "call_0"
    # "open door": g-f0 turn 1 has "door" and "open" (score 2), listed first; k=2 gives g-f1 turn 1 next
    assert tool_msgs[0]["content"].splitlines()[0].startswith("run 'g-f0' turn 1 (score 2, failed)")
    assert tool_msgs[0]["content"].splitlines()[1].startswith("run 'g-f1' turn 1 (score 2, failed)")
    tool_msgs = [m for m in third["messages"] if m["role"] == "tool"]
    assert "turns 1..2:" in tool_msgs[1]["content"] and "take key" in tool_msgs[1]["content"]
    assert tool_msgs[2]["content"].startswith("error: turns 5..6 are out of range")
    s = judge.stats()
    assert (s["tool_rounds"], s["tool_calls"], s["repairs"], s["calls"]) == (2, 3, 0, 3)


def test_unknown_tool_is_told_and_costs_a_repair() -> None:
    script = [completion(tool_calls=[("rm_rf", {})]), answer(1, 1)]
    with ChatServer(script) as server:
        judge = judge_for(server, mode="agentic")
        assert isinstance(run(judge), Proposal)
    tool_msg = next(m for m in server.requests[1]["messages"] if m["role"] == "tool")
    assert tool_msg["content"].startswith("error: unknown tool 'rm_rf'")
    assert judge.stats()["repairs"] == 1
    with (
        ChatServer([completion(tool_calls=[("rm_rf", {})])]) as server,
        pytest.raises(JudgeError, match="unknown tool 'rm_rf'"),
    ):
        run(judge_for(server, mode="agentic", max_repairs=0))


def test_tool_rounds_are_bounded() -> None:
    search = completion(tool_calls=[("search_trajectory", {"query": "door", "k": 1})])
    with ChatServer([search]) as server:
        judge = judge_for(server, mode="agentic", max_tool_rounds=2, max_repairs=1)
        with pytest.raises(JudgeError, match="after the tool rounds were used up"):
            run(judge)
    # 2 tool rounds, then tools withdrawn: 2 more tool calls are violations (1 repair, then the error)
    assert len(server.requests) == 4
    assert "tools" in server.requests[1] and "tools" not in server.requests[2]
    assert server.requests[2]["response_format"]["type"] == "json_schema"
    assert user_messages(server.requests[2])[-1].startswith("The tool rounds are used up")


# -- secrets, cache, accounting, concurrency ------------------------------------------------------

SECRET = "sk-test-SECRET-0123456789"


def test_api_key_is_sent_but_never_shown(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("PROVER_TEST_JUDGE_KEY", SECRET)

    def echo(body: dict[str, Any], index: int) -> Reply:
        return Reply(status=401 if index == 0 else 503, body={"error": f"bad key {SECRET}"})

    caplog.set_level(logging.DEBUG)
    with ChatServer(echo) as server:
        judge = judge_for(server, api_key_env="PROVER_TEST_JUDGE_KEY", max_attempts=2)
        with pytest.raises(JudgeError) as first:
            run(judge)
        with pytest.raises(JudgeError) as second:
            run(judge)
        result = compute_bonus(make_group(), judge=judge, continue_from=lambda t, turn, seed: True)
    assert server.headers[0]["Authorization"] == f"Bearer {SECRET}"
    shown = [
        str(first.value),
        repr(first.value),
        str(second.value),
        repr(judge),
        repr(judge.config),
        judge.config.model_dump_json(),
        str(judge.__dict__),
        caplog.text,
        result.report.model_dump_json(),
    ]
    assert "401" in shown[0] and "bad key ***" in shown[0] and "bad key ***" in shown[2]
    assert "retry" in caplog.text
    for text in shown:
        assert SECRET not in text


def test_cache_makes_a_rerun_free(tmp_path: Path) -> None:
    script = [answer(0, 2), answer(1, 2)]  # a repair, then the answer
    with ChatServer(script) as server:
        first = judge_for(server, cache_dir=tmp_path)
        p1 = run(first)
        assert len(server.requests) == 2 and first.stats()["cache_hits"] == 0
        again = judge_for(server, cache_dir=tmp_path)
        p2 = run(again)
        assert len(server.requests) == 2 and p1 == p2
        s = again.stats()
        assert (s["calls"], s["cache_hits"], s["repairs"], s["prompt_tokens"]) == (0, 2, 1, 0)
        # a different group is a different prompt: a miss
        run(again, make_group("other"))
        assert len(server.requests) == 3


def test_stats_reach_the_compute_bonus_report() -> None:
    groups = make_group("a") + make_group("b")
    with ChatServer([answer(1, 1, usage=(10, 5))]) as server:
        judge = judge_for(server)
        result = compute_bonus(groups, judge=judge, continue_from=lambda t, turn, seed: turn >= 2)
    metrics = result.report.metrics()
    assert metrics["prover/judge/calls"] == 2 and metrics["prover/judge/prompt_tokens"] == 20
    assert metrics["prover/groups_accepted"] == 2
    assert result.turn_bonus["a-s"].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]


def test_sixteen_groups_are_judged_concurrently() -> None:
    latency = 0.2
    groups = [t for i in range(16) for t in make_group(f"g{i:02d}", n_fail=3)]
    in_flight = [0, 0]  # now, peak
    lock = threading.Lock()

    def slow(body: dict[str, Any], index: int) -> Reply:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
        time.sleep(latency)
        with lock:
            in_flight[0] -= 1
        return answer(1, 1)

    with ChatServer(slow) as server:
        judge = judge_for(server, max_concurrency=16)
        started = time.perf_counter()
        result = compute_bonus(groups, judge=judge, continue_from=lambda t, turn, seed: turn >= 2)
        wall = time.perf_counter() - started
    assert len(server.requests) == 16 and result.report.count("accepted") == 16
    assert in_flight[1] >= 8
    assert wall < 0.5 * 16 * latency, f"16 judge requests took {wall:.2f}s; serial would be {16 * latency:.1f}s"


def test_requests_are_valid_json_bodies() -> None:
    with ChatServer([answer(1, 1)]) as server:
        run(judge_for(server, extra_body={"chat_template_kwargs": {"enable_thinking": False}}))
    body = server.requests[0]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    json.dumps(body)


def test_swapped_roles_examine_the_failed_run() -> None:
    group = make_group()
    failed, wins = group[1], [group[0]]
    with ChatServer([answer(0, 1)]) as server:
        judge = judge_for(server)
        p = asyncio.run(judge.propose(failed, wins, RULES))
    assert isinstance(p, Proposal) and p.segment.trajectory_id == "g-f0" and (p.segment.start, p.segment.end) == (0, 1)
    user = server.requests[0]["messages"][1]["content"]
    assert user.startswith("## Failed run 'g-f0' (3 turns, failed)") and "### successful run 'g-s'" in user


def test_async_connections_are_released_when_idle_and_loops_do_not_share_them() -> None:
    with ChatServer([answer(1, 1)]) as server:
        judge = judge_for(server)
        run(judge)
        assert not judge._client._pools.open  # closed after the last concurrent propose of the loop

        async def two() -> list[Proposal | Decline]:
            group = make_group()
            return list(await asyncio.gather(*(judge.propose(group[0], group[1:], RULES) for _ in range(2))))

        # two event loops in two threads at once (e.g. compute_bonus called from inside a running loop)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda _: asyncio.run(two()), range(2)))
        assert all(isinstance(p, Proposal) for r in results for p in r) and not judge._client._pools.open
    assert len(server.requests) == 5


def test_no_admissible_segment_declines_without_a_call() -> None:
    one_turn = Trajectory(id="s", group_id="g", success=True, turns=[Turn(observation="o", action="win")])
    bad = Trajectory(
        id="b",
        group_id="g",
        success=True,
        turns=[Turn(observation="o", action="x", info={"valid": False}), Turn(observation="o", action="win")],
    )
    with ChatServer([answer(0, 0)]) as server:
        judge = judge_for(server)
        for run_ in (one_turn, bad):
            d = asyncio.run(judge.propose(run_, make_group()[1:], RULES))
            assert isinstance(d, Decline) and "no admissible segment" in d.reason
            assert isinstance(judge.propose_sync(run_, make_group()[1:], RULES), Decline)
    assert server.requests == [] and judge.stats()["declines"] == 4


def test_llm_judge_on_the_demo_environment_end_to_end() -> None:
    """The vault demo's batch, judged by the LLM judge (scripted server) and verified by real continuations."""
    from prover_core import SnapshotEnv
    from prover_core.demo import MDPEnv
    from prover_core.demo.run import rollout_batch
    from prover_core.demo.vault import VaultMDP, vault_policy

    mdp = VaultMDP()
    batch = rollout_batch(mdp, groups=6, group_size=8, seed=0)

    def first_admissible(body: dict[str, Any], index: int) -> Reply:
        text = body["messages"][1]["content"]
        last = int(text.split("within 0..")[1].split(" ")[0])
        return answer(max(0, last - 1), last, usage=(50, 10))  # a 2-turn segment ending as late as allowed

    with ChatServer(first_admissible) as server:
        judge = judge_for(server, mode="agentic")
        result = compute_bonus(
            batch, judge=judge, env=SnapshotEnv(lambda: MDPEnv(mdp)), policy=vault_policy(), config=None
        )
    report = result.report
    proposed = [g for g in report.groups if g.proposal is not None]
    assert len(server.requests) == len(proposed) == report.judge_stats["proposals"] > 0
    for g in proposed:
        assert g.proposal is not None and g.proposal.segment.num_turns <= 2
        assert g.status in ("accepted", "rejected")
    assert report.metrics()["prover/judge/prompt_tokens"] == 50 * len(proposed)
