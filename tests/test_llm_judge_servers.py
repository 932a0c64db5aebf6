"""The LLM judge under what real servers do (llama.cpp, vLLM, hosted APIs), against a scripted server on 127.0.0.1.

Each test here failed before the fix it names (restart vs. circuit breaker, turn bounds in the schema,
repairs at temperature 0, agentic constrained decoding and history, unsupported parameters, request
fields and accounting).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import ValidationError

from prover_core import JudgeError, Proposal, Trajectory, Turn, compute_bonus
from prover_core.errors import JudgeUnsupportedError
from prover_core.judges.llm.config import RESERVED_BODY_KEYS, LLMJudgeConfig
from tests.chat_server import ChatServer, Reply, answer, completion
from tests.test_llm_judge import RULES, judge_for, make_group, run, user_messages

# In make_group's success (5 turns, turn 3 invalid) with RULES (at most 2 turns, nonterminal end) the
# admissible segments are 0..0, 0..1, 1..1, 1..2, 2..2: turn 3 is invalid and turn 4 is terminal.
ADMISSIBLE = "0..0, 0..1, 1..1, 1..2, 2..2"


def accept_from_turn_2(trajectory: Trajectory, turn: int, seed: int) -> bool:
    return turn >= 2


# -- circuit breaker ----------------------------------------------------------------------------


def test_a_two_second_server_restart_under_sixteen_concurrent_groups_is_ridden_out() -> None:
    groups = [t for i in range(16) for t in make_group(f"g{i:02d}")]
    with ChatServer([answer(1, 1)]) as server:
        judge = judge_for(
            server, max_concurrency=16, max_attempts=4, backoff_initial_s=0.5, backoff_jitter_s=0.5, circuit_failures=8
        )
        back = server.outage(2.0)  # connection refused for 2 s, then the same port answers again
        result = compute_bonus(groups, judge=judge, continue_from=accept_from_turn_2)
        back.join()
    stats = result.report.judge_stats
    assert stats["failed_requests"] >= 16  # every group's first attempt hit the outage
    assert stats["circuit_open"] == 0 and stats["proposals"] >= 12  # most groups: retries reached the server
    assert result.report.count("accepted") == stats["proposals"] == len(server.requests)
    assert stats["retries"] == stats["calls"] - 16  # every counted retry was sent


def test_a_server_that_stays_down_opens_the_circuit_once_requests_used_their_retries() -> None:
    with ChatServer([answer(1, 1)]) as server:
        judge = judge_for(server, max_attempts=2, circuit_failures=2)
        server.stop()
        group = make_group()
        for _ in range(2):
            with pytest.raises(JudgeError, match="connection error"):
                judge.propose_sync(group[0], group[1:], RULES)
        with pytest.raises(JudgeError, match="circuit open"):
            judge.propose_sync(group[0], group[1:], RULES)
    s = judge.stats()
    assert (s["calls"], s["retries"], s["failed_requests"], s["circuit_open"]) == (4, 2, 4, 1)


def test_a_retry_that_is_never_sent_is_not_counted() -> None:
    with ChatServer([Reply(status=503, body={})]) as server:
        judge = judge_for(server, max_attempts=3, max_calls_per_step=1)
        with pytest.raises(JudgeError, match="budget exhausted: 1 calls per step"):
            run(judge)  # the first attempt fails; its retry is refused by the budget
    s = judge.stats()
    assert len(server.requests) == 1 and (s["calls"], s["retries"], s["failed_requests"]) == (1, 0, 1)


# -- turn bounds in the schema, repairs that do not repeat ----------------------------------------


def test_the_schema_enumerates_the_admissible_turns() -> None:
    with ChatServer([answer(1, 2)]) as server:
        run(judge_for(server))
        run(judge_for(server, allow_decline=False))
    with_decline, without = (body["response_format"]["json_schema"]["schema"] for body in server.requests)
    assert with_decline["properties"]["start_turn"] == {"type": ["integer", "null"], "enum": [0, 1, 2, None]}
    assert with_decline["properties"]["end_turn"] == {"type": ["integer", "null"], "enum": [0, 1, 2, None]}
    assert without["properties"]["end_turn"] == {"type": "integer", "enum": [0, 1, 2]}
    assert with_decline["required"] == ["failure_mode", "start_turn", "end_turn", "rationale"]


def test_a_repair_names_the_admissible_segments_and_samples_anew() -> None:
    def greedy(body: dict[str, Any], index: int) -> Reply:
        # a temperature-0 model repeats its inadmissible answer (2..3 holds the invalid turn 3)
        return answer(2, 3) if body["temperature"] == 0.0 else answer(1, 2)

    with ChatServer(greedy) as server:
        judge = judge_for(server)
        p = run(judge)
    assert isinstance(p, Proposal) and (p.segment.start, p.segment.end) == (1, 2)
    first, repair = server.requests
    assert "seed" not in first and (repair["temperature"], repair["seed"]) == (0.7, 1)
    assert f"The admissible segments (start_turn..end_turn) are: {ADMISSIBLE}." in user_messages(repair)[-1]


def test_a_repeated_answer_is_called_out() -> None:
    with ChatServer([answer(2, 3), answer(2, 3), answer(1, 1)]) as server:
        judge = judge_for(server, temperature=0.2, repair_temperature=0.0, seed=40)
        assert isinstance(run(judge), Proposal)
    notes = [user_messages(body)[-1] for body in server.requests[1:]]
    assert "before; choose another" not in notes[0]
    assert "you gave start_turn=2, end_turn=3 before; choose another" in notes[1]
    assert [(b["temperature"], b["seed"]) for b in server.requests] == [(0.2, 40), (0.2, 41), (0.2, 42)]


# -- agentic mode: constrained decoding and a bounded history --------------------------------------


def test_agentic_repair_of_an_answer_is_constrained_by_the_schema() -> None:
    with ChatServer([completion("I would say turns 2 to 3."), answer(1, 2)]) as server:
        judge = judge_for(server, mode="agentic", max_tool_rounds=3)
        assert isinstance(run(judge), Proposal)
    first, repair = server.requests
    assert "tools" in first and "response_format" not in first
    assert "tools" not in repair and repair["response_format"]["type"] == "json_schema"


def test_agentic_response_format_with_tools_when_the_server_allows_it() -> None:
    with ChatServer([answer(1, 2)]) as server:
        run(judge_for(server, mode="agentic", response_format_with_tools=True))
    body = server.requests[0]
    assert "tools" in body and body["response_format"]["json_schema"]["schema"]["properties"]["start_turn"]["enum"]


def long_group() -> list[Trajectory]:
    """make_group with 900-character observations, so tool results are large."""
    group = make_group()
    return [
        t.model_copy(
            update={"turns": [u.model_copy(update={"observation": f"{u.observation} " * 150}) for u in t.turns]}
        )
        for t in group
    ]


def test_agentic_history_stays_under_max_history_chars() -> None:
    rounds, repairs, budget = 6, 6, 4000
    read = completion(tool_calls=[("get_segment", {"trajectory_id": "g-s", "start_turn": 0, "end_turn": 4})])
    prose = completion("Let me think about this at length. " * 100)  # 3500 chars, rejected 6 times
    with ChatServer([read] * rounds + [prose] * repairs + [answer(1, 2)]) as server:
        judge = judge_for(server, mode="agentic", max_tool_rounds=rounds, max_repairs=repairs, max_history_chars=budget)
        p = asyncio.run(judge.propose(long_group()[0], long_group()[1:], RULES))
    assert isinstance(p, Proposal) and len(server.requests) == 1 + rounds + repairs
    history = [len(json.dumps(body["messages"][2:], ensure_ascii=False)) for body in server.requests]
    assert max(history) <= budget + 2 * len(server.requests[-1]["messages"])  # + the list's ", " separators
    for body in server.requests:  # every tool call sent keeps its answer (the protocol needs the pairs)
        calls = [c["id"] for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])]
        assert calls == [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
    stubbed = [m["content"] for body in server.requests for m in body["messages"] if m["role"] == "tool"]
    assert any(t.startswith("[older tool result omitted to bound the context") for t in stubbed)
    last = server.requests[-1]["messages"]
    *older, latest = [m["content"] for m in last if m["role"] == "tool"]
    assert len(older) < rounds - 1 and all(t.startswith("[older tool result omitted") for t in older)
    assert latest.startswith("run 'g-s' (succeeded), turns 0..4:") and "chars cut" in latest
    rejected = [m for m in last if m["role"] == "assistant" and "tool_calls" not in m]
    assert len(rejected) == 1 and len(rejected[0]["content"]) < 1600  # older repairs dropped, the answer clipped
    assert "Answer now" in json.dumps(last) and user_messages(server.requests[-1])[-1].startswith("Your answer")


# -- unsupported parameters are not retried --------------------------------------------------------

LLAMA_NO_JINJA = {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}
VLLM_NO_TOOLS = {"message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'}
OPENAI_MAX_TOKENS = {
    "error": {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
        "type": "invalid_request_error",
    }
}


@pytest.mark.parametrize(
    ("status", "body", "hint"),
    [
        (500, LLAMA_NO_JINJA, "start llama-server with --jinja"),
        (400, VLLM_NO_TOOLS, "enable tool calling on the server"),
        (400, OPENAI_MAX_TOKENS, "max_tokens_field='max_completion_tokens'"),
        (501, "Not Implemented", "remove the unsupported parameter"),
    ],
    ids=["llama.cpp-no-jinja", "vllm-no-tool-parser", "openai-max_tokens", "501"],
)
def test_an_unsupported_parameter_error_is_typed_and_not_retried(status: int, body: Any, hint: str) -> None:
    with ChatServer([Reply(status=status, body=body)]) as server:
        judge = judge_for(server, mode="agentic", max_attempts=4)
        with pytest.raises(JudgeUnsupportedError, match=f"refused the request as unsupported.*{status}") as caught:
            run(judge)
        assert hint in str(caught.value) and len(server.requests) == 1
        result = compute_bonus(make_group(), judge=judge, continue_from=accept_from_turn_2)
    (record,) = result.report.groups
    assert record.status == "skipped" and hint in record.reason and len(server.requests) == 2


LLAMA_CONTEXT = {  # llama-server 11434's answer to a 1486-token prompt with 1024 tokens a slot (seen for real)
    "error": {
        "code": 400,
        "message": "request (1486 tokens) exceeds the available context size (1024 tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 1486,
        "n_ctx": 1024,
    }
}
# vLLM's OpenAI server, its older length-check text (newer versions say "... your prompt contains at least N
# input tokens"); both hold "maximum context length", which is what the client matches
VLLM_CONTEXT = {
    "object": "error",
    "message": "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens "
    "(1844 in the messages, 256 in the completion). Please reduce the length of the messages or completion.",
    "type": "BadRequestError",
    "code": 400,
}


@pytest.mark.parametrize("body", [LLAMA_CONTEXT, VLLM_CONTEXT], ids=["llama.cpp", "vllm"])
def test_a_prompt_longer_than_the_context_is_one_typed_error_that_says_what_to_change(body: Any) -> None:
    with ChatServer([Reply(status=400, body=body), Reply(status=400, body=body)]) as server:
        judge = judge_for(server, max_attempts=4)
        with pytest.raises(JudgeError, match="answered 400") as caught:
            run(judge)
        assert "does not fit the model's context" in str(caught.value) and "max_trajectory_chars" in str(caught.value)
        assert len(server.requests) == 1  # not retried: it would fail again
        result = compute_bonus(make_group(), judge=judge, continue_from=accept_from_turn_2)
    (record,) = result.report.groups
    assert record.status == "skipped" and "does not fit the model's context" in record.reason


def test_other_client_errors_carry_no_context_hint() -> None:
    with (
        ChatServer([Reply(status=400, body={"error": {"message": "bad request"}})]) as server,
        pytest.raises(JudgeError, match="answered 400") as caught,
    ):
        run(judge_for(server, max_attempts=1))
    assert "context" not in str(caught.value)


def test_a_transient_500_is_still_retried() -> None:
    with ChatServer([Reply(status=500, body={"error": "CUDA out of memory"}), answer(1, 1)]) as server:
        assert isinstance(run(judge_for(server)), Proposal) and len(server.requests) == 2


# -- request fields and accounting -----------------------------------------------------------------


def test_max_tokens_can_be_sent_as_max_completion_tokens() -> None:
    with ChatServer([answer(1, 1)]) as server:
        run(judge_for(server, max_tokens=77, max_tokens_field="max_completion_tokens"))
    body = server.requests[0]
    assert body["max_completion_tokens"] == 77 and "max_tokens" not in body


@pytest.mark.parametrize("key", sorted(RESERVED_BODY_KEYS))
def test_extra_body_may_not_override_what_the_judge_sets(key: str) -> None:
    with pytest.raises(ValidationError, match=rf"extra_body may not set \['{key}'\]"):
        LLMJudgeConfig(base_url="http://127.0.0.1:1/v1", model="m", extra_body={key: 1, "top_k": 20})
    LLMJudgeConfig(base_url="http://127.0.0.1:1/v1", model="m", extra_body={"top_k": 20})  # others pass through


def test_cached_prompt_tokens_are_counted_apart_and_not_charged_to_the_budget() -> None:
    script = [answer(4, 4, usage=(1000, 50), cached_tokens=900), answer(1, 1, usage=(1000, 50), cached_tokens=950)]
    with ChatServer(script) as server:
        judge = judge_for(server, max_tokens_per_step=300)
        assert isinstance(run(judge), Proposal)  # 100 + 50 = 150 < 300 after the first answer: the repair is sent
        s = judge.stats()
        assert (s["prompt_tokens"], s["cached_prompt_tokens"], s["completion_tokens"]) == (150, 1850, 100)
        result = compute_bonus(make_group(), judge=judge, continue_from=accept_from_turn_2)
    assert result.report.metrics()["prover/judge/cached_prompt_tokens"] == 950  # the script's last reply repeats
    assert len(server.requests) == 3


def test_an_unreadable_usage_detail_is_no_cached_count() -> None:
    bad = completion(json.dumps({"failure_mode": "x", "start_turn": 1, "end_turn": 1, "rationale": "r"}))
    bad.body["usage"]["prompt_tokens_details"] = None
    with ChatServer([bad]) as server:
        judge = judge_for(server)
        run(judge)
    assert (judge.stats()["prompt_tokens"], judge.stats()["cached_prompt_tokens"]) == (100, 0)


def test_only_segments_free_of_invalid_actions_are_offered() -> None:
    # all turns but 1 invalid: the schema and the repair note offer only 1..1
    turns = [Turn(observation="o", action=f"a{t}", info={} if t == 1 else {"valid": False}) for t in range(4)]
    success = Trajectory(id="s", group_id="g", success=True, turns=turns)
    with ChatServer([answer(0, 1), answer(1, 1)]) as server:
        judge = judge_for(server)
        asyncio.run(judge.propose(success, make_group()[1:], RULES))
    assert server.requests[0]["response_format"]["json_schema"]["schema"]["properties"]["start_turn"]["enum"] == [
        1,
        None,
    ]
    assert "are: 1..1." in user_messages(server.requests[1])[-1]
