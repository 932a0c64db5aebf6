"""The LLM judge's ``span`` answer form (every answer the schema allows is admissible) and evidence summary."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover_core import Decline, Proposal, SegmentRules, Trajectory, Turn
from prover_core.judges.choice import ChoiceJudge
from prover_core.judges.llm import LLMJudge
from prover_core.judges.llm.answer import check_answer, parse_answer
from prover_core.judges.llm.config import LLMJudgeConfig
from prover_core.judges.llm.prompt import default_action_error, evidence_summary, system_prompt, user_prompt
from prover_core.judges.llm.span import span_end, span_schema, span_to_segment_text
from prover_core.propose import takes_others
from tests.chat_server import ChatServer, completion


def span(start: int | None, turns: int | None) -> str:
    return json.dumps({"failure_mode": "f", "start_turn": start, "turns": turns, "rationale": "r"})


def run_of(n: int, invalid: set[int]) -> Trajectory:
    turns = [Turn(observation=f"o{t}", action=f"a{t}", info={"valid": False} if t in invalid else {}) for t in range(n)]
    return Trajectory(id="s", group_id="g", turns=turns, success=True)


def answer_for(content: str, run: Trajectory, rules: SegmentRules) -> Proposal | Decline | str:
    parsed = parse_answer(span_to_segment_text(content, run, rules, default_action_error))
    assert not isinstance(parsed, str), parsed
    return check_answer(parsed, run, rules, default_action_error, allow_decline=True)


def test_span_end_by_hand() -> None:
    # 6 turns, nonterminal end (last end 4), turn 3 invalid, at most 3 turns:
    # from 0: ends 0, 1, 2 (turn 3 blocks); from 2 with 3 turns: 2 only; from 4: 4 only
    run, rules = run_of(6, {3}), SegmentRules(max_turns=3)
    assert [span_end(0, n, run, rules, default_action_error) for n in (1, 2, 3)] == [0, 1, 2]
    assert span_end(2, 3, run, rules, default_action_error) == 2
    assert span_end(4, 2, run, rules, default_action_error) == 4
    assert span_end(3, 1, run, rules, default_action_error) is None
    schema = span_schema(run, rules, default_action_error, allow_decline=True)
    assert schema["properties"]["start_turn"]["enum"] == [0, 1, 2, 4, None]
    assert schema["properties"]["turns"]["enum"] == [1, 2, 3, None]


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 30), st.sets(st.integers(0, 29)), st.integers(1, 5), st.booleans())
def test_every_answer_the_schema_allows_is_admissible(
    n: int, invalid: set[int], max_turns: int, end_rule: bool
) -> None:
    run, rules = run_of(n, {t for t in invalid if t < n}), SegmentRules(max_turns=max_turns, nonterminal_end=end_rule)
    schema = span_schema(run, rules, default_action_error, allow_decline=True)
    for start in schema["properties"]["start_turn"]["enum"]:
        for turns in schema["properties"]["turns"]["enum"]:
            result = answer_for(span(start, turns), run, rules)
            if start is None:  # a null start declines, whatever the length
                assert isinstance(result, Decline)
            else:  # a null length is one turn
                assert isinstance(result, Proposal), result
                assert rules.violation(result.segment, run) is None
                assert result.segment.start == start and result.segment.num_turns <= (turns or 1)


def test_other_texts_pass_unchanged() -> None:
    run, rules = run_of(4, set()), SegmentRules()
    for text in (None, "prose", '{"start_turn": 1, "end_turn": 1}', "[1, 2]"):
        assert span_to_segment_text(text, run, rules, default_action_error) == text


def test_the_judge_sends_the_span_schema_and_maps_the_answer() -> None:
    group = [run_of(6, {3}), *[run_of(3, set()).model_copy(update={"id": f"f{i}", "success": False}) for i in range(2)]]
    rules = SegmentRules(max_turns=3)
    with ChatServer([completion(span(0, 3))]) as server:
        judge = LLMJudge.from_url(server.url, "m", answer_form="span", evidence_summary=True, max_attempts=1)
        p = asyncio.run(judge.propose(group[0], group[1:], rules))
        body = server.requests[0]
    assert isinstance(p, Proposal) and (p.segment.start, p.segment.end) == (0, 2)  # turn 3 is invalid
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["turns"]["enum"] == [1, 2, 3, None] and "end_turn" not in schema["properties"]
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert '"turns": <int from 1 to 3' in system and '"turns": null' in system
    assert "## Evidence" in user and "turns from 1 to 3" in user


def small_group() -> tuple[Trajectory, list[Trajectory], Trajectory]:
    """A 4-turn success at o0..o3; two failures that stood at o0 (chose a0, as it did) and o1 (chose b, it a1);
    another success that chose z at o0 and a1 at o1."""
    success = run_of(4, set())
    failures = [
        Trajectory(
            id=f"f{i}",
            group_id="g",
            success=False,
            turns=[Turn(observation="o0", action="a0"), Turn(observation="o1", action="b")],
        )
        for i in range(2)
    ]
    other = Trajectory(
        id="x",
        group_id="g",
        success=True,
        turns=[Turn(observation="o0", action="z"), Turn(observation="o1", action="a1")],
    )
    return success, failures, other


def test_evidence_summary_by_hand() -> None:
    # failures stood at o0 (all 2 chose a0) and o1 (none chose a1): turn 1 first (p = 1/3), then turn 0 (p = 1)
    success, failures, _ = small_group()
    text = evidence_summary(success, failures, SegmentRules())
    assert text.splitlines()[1:] == [
        "- turn 1 (a1): 2 failed run(s) were in the same situation, 0 of them did the same",
        "- turn 0 (a0): 2 failed run(s) were in the same situation, 2 of them did the same",
    ]
    assert "no comparison" in evidence_summary(success, [], SegmentRules())
    config = LLMJudgeConfig(base_url="http://127.0.0.1:1/v1", model="m")
    assert "## Evidence" not in user_prompt(success, failures, SegmentRules(), config, default_action_error)
    assert '"end_turn": <int>' in system_prompt(success, SegmentRules(), config)


def test_evidence_summary_with_other_successes_by_hand() -> None:
    # failures as above; another success chose z at o0 (turn 0 contradicted) and a1 at o1: at turn 1, 4 runs stood,
    # 2 succeeded, 2 chose a1 (both successes): p = C(2,2) C(2,0) / C(4,2) = 1/6, as ChoiceJudge weighs it
    success, failures, other = small_group()
    text = evidence_summary(success, failures, SegmentRules(), alike=[other])
    assert text.splitlines()[1:] == [
        "- turn 1 (a1): 2 failed run(s) were in the same situation, 0 of them did the same; "
        "1 of 1 other successful run(s) there did too",
        "- not decisive: turn(s) 0, where another successful run in the same situation did otherwise",
    ]
    (e,) = [e for e in ChoiceJudge().evidence(success, failures, 1, [other]) if e.turn == 1]
    assert e.p == pytest.approx(1 / 6)
    # roles swapped (negative credit): the examined run failed, the runs it is compared with succeeded
    flip = [t.model_copy(update={"success": not t.success}) for t in (success, *failures, other)]
    assert evidence_summary(flip[0], flip[1:3], SegmentRules(), "successful", alike=flip[3:]).splitlines()[1:] == [
        "- turn 1 (a1): 2 successful run(s) were in the same situation, 0 of them did the same; "
        "1 of 1 other failed run(s) there did too",
        "- not decisive: turn(s) 0, where another failed run in the same situation did otherwise",
    ]
    # a failure only at o0, where the other success chose otherwise: no comparison line, the note only
    at_o0 = Trajectory(id="f", group_id="g", success=False, turns=[Turn(observation="o0", action="a0")])
    assert evidence_summary(success, [at_o0], SegmentRules(), alike=[other]).splitlines()[1:] == [
        "- not decisive: turn(s) 0, where another successful run in the same situation did otherwise"
    ]


def test_the_llm_judge_takes_the_other_successes() -> None:
    success, failures, other = small_group()
    with ChatServer([completion(span(1, 1)), completion(span(1, 1))]) as server:
        judge = LLMJudge.from_url(server.url, "m", answer_form="span", evidence_summary=True, max_attempts=1)
        assert takes_others(judge)  # so compute_bonus hands it the group's other successes
        p = asyncio.run(judge.propose(success, failures, SegmentRules(), others=[other]))
        q = judge.propose_sync(success, failures, SegmentRules(), others=[other])
        users = [body["messages"][1]["content"] for body in server.requests]
    assert isinstance(p, Proposal) and isinstance(q, Proposal) and p.segment == q.segment
    for user in users:
        assert "1 of 1 other successful run(s) there did too" in user and "not decisive: turn(s) 0" in user


def test_the_cli_options_need_a_judge_url(capsys) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from prover_core.cli import main

    for flags in (["--judge-answer-form", "span"], ["--judge-evidence"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["bench", "judges", "--quick", *flags])
        assert exit_info.value.code == 2 and f"{flags[0]} need(s) --judge-url" in capsys.readouterr().err
