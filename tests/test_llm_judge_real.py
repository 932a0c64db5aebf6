"""The LLM judge against a real llama.cpp ``llama-server`` on 127.0.0.1 (not part of the default run).

``scripts/test-llm-judge`` builds nothing: it starts ``llama-server`` (from ``scripts/build-llama-server``'s
cache) with a real GGUF model on loopback, sets ``PROVER_LLM_URL`` and runs these tests. Without
``PROVER_LLM_URL`` they skip; ``PROVER_REQUIRE_LLM=1`` turns the skip into a failure. Whatever a small
model answers, the judge must end in a valid proposal, a decline, or a typed :class:`JudgeError`, and
count the server's token usage.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import pytest

from prover_core import Decline, JudgeError, Proposal, SegmentRules, Trajectory, Turn, compute_bonus
from prover_core.judges.llm import LLMJudge
from tests.conftest import skip

pytestmark = pytest.mark.real_llm

URL = os.environ.get("PROVER_LLM_URL", "")
MODEL = os.environ.get("PROVER_LLM_MODEL", "smollm2")
if not URL:
    if os.environ.get("PROVER_REQUIRE_LLM") == "1":
        raise RuntimeError("PROVER_REQUIRE_LLM=1 but PROVER_LLM_URL is not set (run scripts/test-llm-judge)")
    skip("no real LLM server: PROVER_LLM_URL is not set (scripts/test-llm-judge)", allow_module_level=True)

RULES = SegmentRules(max_turns=2)


def group(gid: str = "g") -> list[Trajectory]:
    """A success that takes the key at turn 1, and three failures that walk past it."""
    s_obs = ["You are in a hall.", "A brass key lies here.", "You carry the key. A door.", "The door opens."]
    s_act = ["go north", "take key", "open door", "enter vault"]
    success = Trajectory(
        id=f"{gid}-s",
        group_id=gid,
        success=True,
        turns=[Turn(observation=o, action=a) for o, a in zip(s_obs, s_act, strict=True)],
    )
    f_turns = [
        ("You are in a hall.", "go north"),
        ("A brass key lies here.", "go east"),
        ("A locked door.", "open door"),
    ]
    failures = [
        Trajectory(
            id=f"{gid}-f{i}", group_id=gid, success=False, turns=[Turn(observation=o, action=a) for o, a in f_turns]
        )
        for i in range(3)
    ]
    return [success, *failures]


def judge(**settings: Any) -> LLMJudge:
    base: dict[str, Any] = {"max_tokens": 256, "timeout_s": 300.0, "max_attempts": 2, "max_repairs": 2}
    return LLMJudge.from_url(URL, MODEL, **{**base, **settings})


def ask(j: LLMJudge) -> Proposal | Decline | JudgeError:
    g = group()
    try:
        return asyncio.run(j.propose(g[0], g[1:], RULES))
    except JudgeError as exc:
        return exc


def check_answer(answer: Proposal | Decline | JudgeError, success: Trajectory) -> None:
    if isinstance(answer, Proposal):
        assert RULES.violation(answer.segment, success) is None
    elif isinstance(answer, Decline):
        assert answer.reason
    else:
        assert str(answer)


def test_the_server_is_llama_cpp_on_loopback() -> None:
    assert URL.startswith("http://127.0.0.1:")
    health = httpx.get(URL.removesuffix("/v1") + "/health", timeout=10)
    assert health.status_code == 200


@pytest.mark.parametrize("response_format", ["json_schema", "json_object", "none"])
def test_structured_mode_ends_in_a_valid_answer_and_counts_usage(response_format: str) -> None:
    with judge(response_format=response_format) as j:
        answer = ask(j)
        check_answer(answer, group()[0])
        stats = j.stats()
    assert stats["calls"] >= 1 and stats["failed_requests"] == 0
    assert stats["prompt_tokens"] > 100 and stats["completion_tokens"] > 0 and stats["usage_missing"] == 0
    assert stats["proposals"] + stats["declines"] + stats["errors"] == 1
    assert stats["repairs"] <= 2


def test_agentic_mode_ends_in_a_valid_answer_and_counts_usage() -> None:
    with judge(mode="agentic", max_tool_rounds=2) as j:
        answer = ask(j)
        check_answer(answer, group()[0])
        stats = j.stats()
    assert stats["calls"] >= 1 and stats["prompt_tokens"] > 100 and stats["usage_missing"] == 0
    assert stats["tool_rounds"] <= 2
    assert stats["proposals"] + stats["declines"] + stats["errors"] == 1


def test_compute_bonus_records_every_group_with_the_real_judge() -> None:
    """Eight groups judged concurrently (the server runs 8 slots): each ends accepted, rejected,
    declined or skipped with a reason; the report carries the judge's counters."""
    batch = [t for i in range(8) for t in group(f"g{i}")]
    with judge(max_concurrency=8) as j:
        result = compute_bonus(batch, judge=j, continue_from=lambda t, turn, seed: turn >= 2)
    groups = result.report.groups
    assert len(groups) == 8 and all(g.reason for g in groups)
    assert {g.status for g in groups} <= {"accepted", "rejected", "declined", "skipped"}
    metrics = result.report.metrics()
    assert metrics["prover/judge/calls"] >= 8 and metrics["prover/judge/prompt_tokens"] > 800
