"""The LLM judge without a server: prompt rendering and truncation, answer parsing and validation, tools."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from prover_core import Decline, Proposal, SegmentRules, Trajectory, Turn
from prover_core.connections import parse_retry_after
from prover_core.errors import _ToolError as ToolError
from prover_core.judges.llm.answer import JudgeAnswer, check_answer, parse_answer
from prover_core.judges.llm.cache import ResponseCache, request_key
from prover_core.judges.llm.config import LLMJudgeConfig
from prover_core.judges.llm.prompt import (
    as_text,
    clip,
    default_action_error,
    middle_out,
    render_preview,
    render_trajectory,
    system_prompt,
    user_prompt,
)
from prover_core.judges.llm.tools import Toolbox

RULES = SegmentRules(max_turns=2)


def cfg(**kw: object) -> LLMJudgeConfig:
    return LLMJudgeConfig.model_validate({"base_url": "http://127.0.0.1:1/v1", "model": "m", **kw})


def traj(
    tid: str, success: bool, actions: list[str], observations: list[str] | None = None, **infos: dict
) -> Trajectory:
    obs = observations or [f"room {t}" for t in range(len(actions))]
    turns = [
        Turn(observation=o, action=a, info=infos.get(f"t{t}", {}))
        for t, (o, a) in enumerate(zip(obs, actions, strict=False))
    ]
    return Trajectory(id=tid, group_id="g", turns=turns, success=success)


# -- rendering ------------------------------------------------------------------------------------


def test_clip_keeps_head_and_tail_and_counts_the_cut() -> None:
    assert clip("abcdef", 6) == "abcdef"
    assert clip("abcdefghij", 4) == "ab[... 6 chars cut ...]ij"
    assert clip("abcdefghij", 5) == "abc[... 5 chars cut ...]ij"
    assert clip("abcdefghij", 1) == "a[... 9 chars cut ...]"


def test_as_text_strings_json_and_repr() -> None:
    assert as_text("go north") == "go north"
    assert as_text({"b": 1, "a": [1, 2]}) == '{"a": [1, 2], "b": 1}'
    assert as_text({1, 2}).startswith("{1, 2}") or as_text({1, 2}).startswith("{2, 1}")


def test_middle_out_order_is_farthest_from_both_ends_first() -> None:
    assert middle_out(10) == [4, 5, 3, 6, 2, 7, 1, 8, 0, 9]
    assert middle_out(5) == [2, 1, 3, 0, 4]
    assert middle_out(1) == [0]


def test_action_validity_convention() -> None:
    assert default_action_error(Turn(observation="o", action="a")) is None
    assert default_action_error(Turn(observation="o", action="a", info={"valid": True})) is None
    assert default_action_error(Turn(observation="o", action="a", info={"valid": False})) == "the action was invalid"
    assert default_action_error(Turn(observation="o", action="a", info={"error": "no such verb"})) == "no such verb"
    assert default_action_error(Turn(observation="o", action="a", info={"error": 3})) == "the action produced an error"
    assert default_action_error(Turn(observation="o", action="a", info={"error": ""})) is None


def test_full_trajectory_shows_every_turn_and_marks_invalid_actions() -> None:
    s = traj("s", True, ["north", "xyzzy", "open door", "win"], t1={"error": "unknown verb"})
    text = render_trajectory(s, cfg(), default_action_error)
    for t in range(4):
        assert f"--- turn {t} ---\nobservation: room {t}\naction: " in text
    assert "!! INVALID ACTION (must not be selected): unknown verb" in text
    assert "omitted" not in text


def _long_run(n: int, obs_len: int) -> Trajectory:
    return traj("s", True, [f"act{t}" for t in range(n)], [f"{t}" * obs_len for t in range(n)])


def test_truncation_elides_observations_middle_out_then_whole_turns() -> None:
    run = _long_run(6, 100)  # six blocks; each "--- turn t ---\nobservation: <100>\naction: actt" = 148 chars
    full = render_trajectory(run, cfg(max_trajectory_chars=10_000), default_action_error)
    block = len(full.split("\n--- turn 1")[0])
    assert block == 15 + 13 + 100 + 1 + 12 == 141  # header, "observation: ", obs, newline, "action: act0"
    short = len("--- turn 0 ---\nobservation: [observation omitted]\naction: act0")
    # Budget for 4 full blocks + 2 short ones: the middle-out order elides turns 2 and 3 first.
    budget = 4 * block + 2 * short
    text = render_trajectory(run, cfg(max_trajectory_chars=budget), default_action_error)
    assert text.count("[observation omitted]") == 2
    assert "--- turn 2 ---\nobservation: [observation omitted]" in text
    assert "--- turn 3 ---\nobservation: [observation omitted]" in text
    assert "0" * 100 in text and "5" * 100 in text and "1" * 100 in text and "4" * 100 in text
    # One char less: turn 1 loses its observation as well (next in middle-out order).
    text = render_trajectory(run, cfg(max_trajectory_chars=budget - 1), default_action_error)
    assert text.count("[observation omitted]") == 3 and "1" * 100 not in text and "4" * 100 in text
    # A budget for two short blocks only: all observations go, then turns 2,3,1,4 are dropped.
    text = render_trajectory(run, cfg(max_trajectory_chars=2 * short), default_action_error)
    assert text.splitlines()[3] == "[turns 1..4 omitted]"
    assert "--- turn 0 ---" in text and "--- turn 5 ---" in text and "act5" in text


def test_preview_keeps_head_and_tail_turns_with_their_numbers() -> None:
    f = traj("f1", False, [f"a{t}" for t in range(8)], ["x" * 500] * 8)
    text = render_preview(
        f, cfg(preview_head_turns=2, preview_tail_turns=3, preview_field_chars=20), default_action_error
    )
    assert text.startswith("### failed run 'f1' (8 turns, failed)")
    assert [line for line in text.splitlines() if line.startswith("--- turn")] == [
        "--- turn 0 ---",
        "--- turn 1 ---",
        "--- turn 5 ---",
        "--- turn 6 ---",
        "--- turn 7 ---",
    ]
    assert "[turns 2..4 omitted]" in text and "[... 480 chars cut ...]" in text


def test_prompts_state_the_rules() -> None:
    s = traj("s", True, ["a", "b", "c", "d", "e"], t2={"valid": False})
    fails = [traj(f"f{i}", False, ["a", "x"]) for i in range(3)]
    system = system_prompt(s, RULES, cfg())
    assert "at most 2 turns" in system and "end_turn must be at most 3" in system and "INVALID" in system
    assert "search_trajectory" not in system
    assert "search_trajectory" in system_prompt(s, RULES, cfg(mode="agentic"))
    user = user_prompt(s, fails, RULES, cfg(max_failures_shown=2), default_action_error)
    assert "## Successful run 's' (5 turns, succeeded)" in user and "## Failed runs (3)" in user
    assert "failed run 'f0'" in user and "failed run 'f1'" in user and "failed run 'f2'" not in user
    assert "(1 more failed runs not shown)" in user
    assert "within 0..3" in user and "not including the invalid turns [2]" in user


def test_prompts_with_swapped_roles_examine_the_failed_run() -> None:
    # compute_bonus's negative credit calls propose(failed_run, successful_runs, rules)
    failed = traj("f", False, ["a", "x", "y"])
    wins = [traj("w0", True, ["a", "b", "c", "d"])]
    system = system_prompt(failed, RULES, cfg(mode="agentic"))
    assert "one failed run of a task and several successful runs" in system
    assert "segment of consecutive turns [start_turn, end_turn] of the FAILED run" in system
    assert "mistake of the failed run that the successful runs avoided" in system
    assert "finds turns of the other runs, the successful ones first" in system
    assert "If no segment of the failed run fits" in system
    user = user_prompt(failed, wins, RULES, cfg(), default_action_error)
    assert user.startswith("## Failed run 'f' (3 turns, failed)")
    assert "## Successful runs (1)" in user and "### successful run 'w0' (4 turns, succeeded)" in user
    assert "within 0..1 of the failed run" in user


# -- answers --------------------------------------------------------------------------------------


def test_parse_answer_accepts_plain_fenced_and_embedded_json() -> None:
    want = JudgeAnswer(failure_mode="m", start_turn=1, end_turn=2, rationale="r")
    plain = '{"failure_mode": "m", "start_turn": 1, "end_turn": 2, "rationale": "r"}'
    assert parse_answer(plain) == want
    assert parse_answer(f"```json\n{plain}\n```") == want
    assert parse_answer(f"Sure! Here it is: {plain} Hope this helps.") == want


@pytest.mark.parametrize(
    ("content", "truncated", "expect"),
    [
        (None, False, "empty"),
        ("The agent should open the door at turn 2.", False, "not valid JSON"),
        ('{"failure_mode": "m", "start_turn": 1, "end_tu', True, "cut off by the token limit"),
        ("[1, 2]", False, "must be a JSON object"),
        ('{"failure_mode": "m", "start_turn": "two", "end_turn": 2}', False, "start_turn"),
        ('{"start_turn": 1, "end_turn": 2}', False, "failure_mode"),
    ],
)
def test_parse_answer_explains_what_is_wrong(content: str | None, truncated: bool, expect: str) -> None:
    result = parse_answer(content, truncated)
    assert isinstance(result, str) and expect in result


def _check(start: int | None, end: int | None, allow_decline: bool = True) -> Proposal | Decline | str:
    s = traj("s", True, ["a", "b", "c", "d", "e"], t2={"error": "boom"})
    answer = JudgeAnswer(failure_mode="fm", start_turn=start, end_turn=end, rationale="r")
    return check_answer(answer, s, RULES, default_action_error, allow_decline)


def test_check_answer_bounds_terminal_length_and_validity() -> None:
    ok = _check(0, 1)
    assert isinstance(ok, Proposal) and (ok.segment.start, ok.segment.end) == (0, 1) and ok.rationale == "fm | r"
    assert _check(3, 3) == Proposal(segment=ok.segment.model_copy(update={"start": 3, "end": 3}), rationale="fm | r")
    assert "out of range" in str(_check(3, 7))
    assert "terminal turn 4" in str(_check(4, 4))
    assert "at most 2 are allowed" in str(_check(0, 2))
    assert "turn 2 holds an invalid or error-producing action (boom)" in str(_check(2, 3))
    assert "before start_turn" in str(_check(3, 1))
    assert "non-negative" in str(_check(-1, 1))
    assert "both" in str(_check(1, None))
    declined = _check(None, None)
    assert isinstance(declined, Decline) and "fm" in declined.reason
    assert "not allowed" in str(_check(None, None, allow_decline=False))


# -- tools ----------------------------------------------------------------------------------------


def _toolbox() -> Toolbox:
    s = traj("s", True, ["take key", "open door", "win"], ["hall", "door locked", "vault"])
    f1 = traj("f1", False, ["go west", "open door", "kick door"], ["hall", "door locked", "door locked"])
    f2 = traj("f2", False, ["wait", "wait"], ["hall", "hall"], t1={"valid": False})
    return Toolbox(s, [f1, f2], cfg(max_search_results=3, max_segment_read=2), default_action_error)


def test_search_ranks_by_shared_words_then_run_then_turn() -> None:
    box = _toolbox()
    # "door locked": f1 t1 (door, locked) = 2, f1 t2 = 2, f1 t0 = 0; f2 none
    out = box.run("search_trajectory", '{"query": "Door LOCKED", "k": 5}').splitlines()
    assert [line.split(" (")[0] for line in out] == ["run 'f1' turn 1", "run 'f1' turn 2"]
    assert "(score 2, failed)" in out[0]
    # "hall door": five turns score 1; ties go by run then turn, and k is capped at max_search_results=3
    out = box.run("search_trajectory", '{"query": "hall door", "k": 10}').splitlines()
    assert [line.split(" (")[0] for line in out] == ["run 'f1' turn 0", "run 'f1' turn 1", "run 'f1' turn 2"]
    assert box.run("search_trajectory", '{"query": "nothing here", "k": 2}') == "no matching turns in the other runs"
    assert box.run("search_trajectory", '{"query": "hall", "k": 0}').startswith("error: k must be at least 1")
    assert box.run("search_trajectory", '{"query": "hall", "k": "3"}').startswith("error: k must be an integer")


def test_get_segment_reads_any_run_within_bounds() -> None:
    box = _toolbox()
    out = box.run("get_segment", '{"trajectory_id": "f2", "start_turn": 0, "end_turn": 1}')
    assert (
        out.splitlines()[0] == "run 'f2' (failed), turns 0..1:" and "!! INVALID ACTION: the action was invalid" in out
    )
    out = box.run("get_segment", '{"trajectory_id": "s", "start_turn": 0, "end_turn": 2}')
    assert "turns 0..1:" in out and "--- turn 2 ---" not in out  # capped at max_segment_read=2
    assert "out of range" in box.run("get_segment", '{"trajectory_id": "s", "start_turn": 1, "end_turn": 9}')


def test_the_tools_reach_the_other_successes_too_and_name_each_runs_outcome() -> None:
    s = traj("s", True, ["take key", "open door", "win"], ["hall", "door locked", "vault"])
    f1 = traj("f1", False, ["go west", "open door"], ["hall", "door locked"])
    s2 = traj("s2", True, ["take key", "open door"], ["hall", "key glints"])
    box = Toolbox(s, [f1], cfg(max_search_results=5), default_action_error, alike=[s2])
    out = box.run("search_trajectory", '{"query": "key", "k": 5}').splitlines()
    # f1 has no "key"; s2 turn 0 (action) and turn 1 (observation) do: the compared runs come first, then alike
    assert [line.split(": observation")[0] for line in out] == [
        "run 's2' turn 0 (score 1, succeeded)",
        "run 's2' turn 1 (score 1, succeeded)",
    ]
    out = box.run("search_trajectory", '{"query": "open door", "k": 5}').splitlines()
    # f1 turn 1 and s2 turn 1 both score 2: the tie goes to the compared run
    assert out[0].startswith("run 'f1' turn 1 (score 2, failed)")
    assert out[1].startswith("run 's2' turn 1 (score 2, succeeded)")
    assert box.run("get_segment", '{"trajectory_id": "s2", "start_turn": 0, "end_turn": 0}').startswith(
        "run 's2' (succeeded), turns 0..0:"
    )
    assert "unknown trajectory_id 'zz'" in box.run(
        "get_segment", '{"trajectory_id": "zz", "start_turn": 0, "end_turn": 0}'
    )
    with pytest.raises(ToolError, match="unknown tool 'delete_run'"):
        box.run("delete_run", "{}")
    with pytest.raises(ToolError, match="not valid JSON"):
        box.run("get_segment", '{"trajectory_id": ')


# -- config, retry-after, cache -------------------------------------------------------------------


def test_config_validation_and_api_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError):
        cfg(base_url="127.0.0.1:8000")
    with pytest.raises(ValidationError):
        cfg(api_key="sk-inline")  # the key is never a field
    assert cfg(base_url="http://h:1/v1/").endpoint == "http://h:1/v1/chat/completions"
    assert cfg().api_key() is None
    monkeypatch.delenv("JUDGE_KEY_X", raising=False)
    with pytest.raises(ValueError, match="'JUDGE_KEY_X'"):
        cfg(api_key_env="JUDGE_KEY_X").api_key()
    monkeypatch.setenv("JUDGE_KEY_X", "sk-123")
    key = cfg(api_key_env="JUDGE_KEY_X").api_key()
    assert isinstance(key, SecretStr) and key.get_secret_value() == "sk-123" and "sk-123" not in repr(key)


def test_parse_retry_after_seconds_and_http_date() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after("3", now) == 3.0
    assert parse_retry_after("0.25", now) == 0.25
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:07 GMT", now) == 7.0
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now) == 0.0
    assert parse_retry_after("-4", now) == 0.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None


def test_cache_roundtrip_and_key(tmp_path: object) -> None:
    from pathlib import Path

    cache = ResponseCache(Path(str(tmp_path)), 1 << 20)
    k1 = request_key({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert k1 == request_key({"messages": [{"content": "x", "role": "user"}], "model": "m"})
    assert k1 != request_key({"model": "m", "messages": [{"role": "user", "content": "y"}]})
    assert cache.get(k1) is None
    cache.put(k1, {"choices": []})
    assert cache.get(k1) == {"choices": []}
    (Path(str(tmp_path)) / k1[:2] / f"{k1}.json").write_text("{not json")
    assert cache.get(k1) is None


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 400), min_size=1, max_size=30),
    budget=st.integers(100, 6000),
)
def test_truncation_partitions_the_turns_in_order(lengths: list[int], budget: int) -> None:
    """Every turn appears exactly once, in order: shown with its number, or inside one omitted range."""
    run = traj("s", True, [f"a{t}" for t in range(len(lengths))], ["o" * n for n in lengths])
    text = render_trajectory(run, cfg(max_trajectory_chars=budget, max_field_chars=300), default_action_error)
    seen: list[int] = []
    for line in text.splitlines():
        if m := re.fullmatch(r"--- turn (\d+) ---", line):
            seen.append(int(m.group(1)))
        elif m := re.fullmatch(r"\[turns (\d+)\.\.(\d+) omitted\]", line):
            seen.extend(range(int(m.group(1)), int(m.group(2)) + 1))
        elif m := re.fullmatch(r"\[turn (\d+) omitted\]", line):
            seen.append(int(m.group(1)))
    assert seen == list(range(len(lengths)))
    shown = [b for b in re.split(r"\n(?=--- turn )|\n(?=\[turns? )", text) if b.startswith("--- turn")]
    assert sum(len(b) for b in shown) <= budget  # the turn blocks kept fit the budget
    full = render_trajectory(run, cfg(max_trajectory_chars=10**6, max_field_chars=300), default_action_error)
    if len(full) - (len(lengths) - 1) <= budget:  # fits without truncation (newlines between blocks not counted)
        assert text == full


def test_response_model_accepts_dict_tool_arguments_and_rejects_empty_choices() -> None:
    from prover_core.judges.llm.client import ChatResponse

    body = {"choices": [{"message": {"tool_calls": [{"function": {"name": "get_segment", "arguments": {"a": 1}}}]}}]}
    parsed = ChatResponse.model_validate(body)
    assert parsed.choices[0].message.tool_calls is not None
    assert parsed.choices[0].message.tool_calls[0].function.arguments == '{"a": 1}'
    with pytest.raises(ValidationError):
        ChatResponse.model_validate({"choices": []})
