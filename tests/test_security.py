"""docs/security.md's promises, one test each, against loopback servers on 127.0.0.1 (issue 46).

Secrets stay secret: a key read with its trailing newline is stripped, a key with a control character refused by
the variable's name, every form of a secret (raw, ``repr``- or JSON-escaped, percent- or form-encoded, a header
value, a proxy's credentials as sent) scrubbed before an excerpt is cut, URLs with credentials refused. The forms
looked for are written out here, never derived from the redactor (tests/test_redaction.py tests it alone). The
network is what the user named: proxy variables are ignored, a bearer key over plain http to a remote host is warned
about. Hostile answers stay harmless: a byte cap, a linear fence scan, deep JSON and lone surrogates inside the typed
errors, tool calls per reply capped, server values range-checked. No finished work is lost to a diagnostic.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import logging
import os
import pickle
import re
import stat
import threading
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prover_core import compute_bonus
from prover_core.connections import MAX_ANSWER_BYTES, RetryPolicy
from prover_core.errors import AnswerTooLargeError, CredentialError, EngineError, JudgeAnswerTooLargeError, JudgeError
from prover_core.judges.llm import LLMJudge
from prover_core.judges.llm.answer import fenced_blocks, parse_answer
from prover_engine import Generation, LlamaServerEngine, OpenAICompletionsEngine, SamplingParams, SGLangEngine
from prover_engine.errors import EngineAnswerTooLargeError, EngineHTTPError, EngineResponseError
from prover_engine.parity import ParityMonitor
from tests.chat_server import ChatServer, Reply, answer, completion
from tests.completions_server import CompletionsServer
from tests.llama_server import LlamaServer
from tests.loopback import LoopbackServer, Request
from tests.sglang_server import SGLangServer
from tests.test_llm_judge import RULES, make_group

SECRET = 'sk-te\\st"KEY/+=0123456789abcdef'
"""A key whose raw, repr-escaped, JSON-escaped and percent-encoded forms all differ."""
SECRET_FORMS = (
    r'sk-te\st"KEY/+=0123456789abcdef',  # raw
    r'sk-te\\st"KEY/+=0123456789abcdef',  # repr: the backslash doubled
    r"sk-te\\st\"KEY/+=0123456789abcdef",  # JSON: the backslash and the double quote escaped
    "sk-te%5Cst%22KEY%2F%2B%3D0123456789abcdef",  # quote(safe=""), and quote_plus (no space to make "+")
    "sk-te%5Cst%22KEY/%2B%3D0123456789abcdef",  # quote: "/" kept
    r"sk-te\st",  # the first 8 characters: a prefix kept across a cut
)
"""Every form of :data:`SECRET` a message must not hold, written out (never derived from the redactor)."""
HEADER = "team SECRET/value+42"
HEADER_FORMS = (
    "team SECRET/value+42",  # raw, repr and JSON alike
    "team%20SECRET%2Fvalue%2B42",
    "team%20SECRET/value%2B42",
    "team+SECRET%2Fvalue%2B42",  # quote_plus: a form field
    "team SEC",
)
VARIABLE = "PROVER_TEST_SECURITY_KEY"


def judge_for(url: str, **kw: Any) -> LLMJudge:
    settings: dict[str, Any] = dict(
        backoff_initial_s=0.0, backoff_jitter_s=0.0, max_attempts=2, timeout_s=5.0, connect_timeout_s=2.0
    )
    settings.update(kw)
    return LLMJudge.from_url(url, "test-model", **settings)


def engine_for(url: str, **kw: Any) -> OpenAICompletionsEngine:
    settings: dict[str, Any] = dict(backoff_s=0.0, timeout_s=5.0, max_attempts=2)
    settings.update(kw)
    return OpenAICompletionsEngine(url, "test-model", **settings)


def propose(judge: LLMJudge) -> Any:
    group = make_group()
    return asyncio.run(judge.propose(group[0], group[1:], RULES))


def generate(engine: OpenAICompletionsEngine, **params: Any) -> Generation:
    return asyncio.run(engine.generate([5, 9, 12], SamplingParams(**params)))


def leaks(texts: list[str], needles: tuple[str, ...] = SECRET_FORMS) -> list[str]:
    """The texts holding any of ``needles`` (a secret's forms written out, and its first 8 characters)."""
    return [t for t in texts if any(n in t for n in needles)]


# -- secrets -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("tail", ["\n", "\r\n", " ", "\t\n"])
def test_a_key_read_with_a_trailing_newline_is_stripped_sent_and_never_shown(
    tail: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(VARIABLE, SECRET + tail)
    caplog.set_level(logging.DEBUG)

    def refuse(body: dict[str, Any], index: int) -> Reply:
        return Reply(status=401, body=f"bad key {SECRET!r} {json.dumps(SECRET)}")

    with ChatServer(refuse) as server:
        judge = judge_for(server.url, api_key_env=VARIABLE)
        with pytest.raises(JudgeError) as error:
            propose(judge)
        result = compute_bonus(make_group(), judge=judge, continue_from=lambda t, turn, seed: True)
    assert server.headers[0]["Authorization"] == f"Bearer {SECRET}"  # stripped, sent, answered (401)
    assert "401" in str(error.value) and "bad key" in str(error.value)
    shown = [str(error.value), repr(error.value), caplog.text, result.report.model_dump_json(), repr(judge)]
    assert leaks(shown) == []
    with CompletionsServer() as completions:
        engine = engine_for(completions.url, api_key_env=VARIABLE)
        assert generate(engine, max_tokens=2).token_ids == (13, 14)
    assert completions.headers[0]["Authorization"] == f"Bearer {SECRET}"


@pytest.mark.parametrize("value", ["sk-abc\ndef", "sk-abc\x7fdef", "sk-abc\x1bdef", "sk-abcdéf"])
def test_a_key_with_a_character_no_header_can_carry_is_refused_by_the_variables_name(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VARIABLE, value)
    for build in (
        lambda: judge_for("http://127.0.0.1:9/v1", api_key_env=VARIABLE),
        lambda: engine_for("http://127.0.0.1:9/v1", api_key_env=VARIABLE),
    ):
        with pytest.raises(CredentialError, match=VARIABLE) as error:
            build()
        assert "sk-abc" not in str(error.value) and "def" not in str(error.value)


def test_every_form_of_a_secret_is_redacted_before_the_excerpt_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, SECRET)
    header = HEADER
    echoes = [
        "x" * 195 + SECRET,  # across the 200-character cut
        "x" * 190 + repr(SECRET),
        json.dumps({"error": "x" * 185 + SECRET}),
        "x" * 180 + "key=" + quote(SECRET, safe=""),
        "x" * 150 + "url=/v1?key=" + quote(SECRET),
        "x" * 150 + "form: key=" + quote_plus(SECRET) + "&team=" + quote_plus(header),
        f"bad header {header}, {quote(header)}",
    ]
    for echo in echoes:
        reply = Reply(status=400, body=echo, content_type="text/plain")
        with ChatServer([reply]) as server:
            judge = judge_for(server.url, api_key_env=VARIABLE, extra_headers={"X-Team": header})
            with pytest.raises(JudgeError) as judged:
                propose(judge)
        with CompletionsServer(faults=[reply]) as completions:
            engine = engine_for(completions.url, api_key_env=VARIABLE, headers={"X-Team": header})
            with pytest.raises(EngineHTTPError) as generated:
                generate(engine)
        shown = [str(judged.value), str(generated.value)]
        assert leaks(shown) == [] and leaks(shown, HEADER_FORMS) == [], echo
        assert "***" in shown[0] and "***" in shown[1]


def test_a_short_header_value_is_not_a_secret_that_masks_every_digit() -> None:
    with ChatServer([Reply(status=401, body="no")]) as server:
        judge = judge_for(server.url, extra_headers={"X-Debug": "1", "X-Team": "team-SECRET-9"})
        with pytest.raises(JudgeError, match="answered 401: no"):
            propose(judge)
    assert judge._client.redact("1 team-SECRET-9") == "1 ***"


def test_credentials_in_a_url_are_refused_without_showing_them() -> None:
    url = "http://alice:pw-SECRET-77@127.0.0.1:9/v1"
    for build in (
        lambda: judge_for(url),
        lambda: engine_for(url),
        lambda: LlamaServerEngine("http://alice:pw-SECRET-77@127.0.0.1:9"),
    ):
        with pytest.raises(CredentialError, match=r"http://\*\*\*@127\.0\.0\.1:9") as error:
            build()
        assert "pw-SECRET" not in str(error.value) and "alice" not in str(error.value)


def test_header_values_and_the_proxy_are_kept_out_of_reprs() -> None:
    judge = judge_for("http://127.0.0.1:9/v1", extra_headers={"api-key": "hdr-SECRET-1"}, proxy="http://u:p@x:1")
    assert "hdr-SECRET-1" not in repr(judge.config) and "u:p@" not in repr(judge.config)
    assert judge.config.extra_headers == {"api-key": "hdr-SECRET-1"}  # still readable


def test_the_engines_catch_all_error_branch_redacts(monkeypatch: pytest.MonkeyPatch) -> None:
    # a header value httpx refuses to send (illegal character): the error names it, redacted, and is not retried
    with CompletionsServer() as server:
        engine = engine_for(server.url, headers={"X-Key": "hdr-SECRET-2\n"})
        with pytest.raises(EngineError) as error:
            generate(engine)
    assert server.requests == [] and "hdr-SECRET-2" not in str(error.value) and engine.stats.retries == 0
    with ChatServer([answer(1, 2)]) as chat:
        judge = judge_for(chat.url, extra_headers={"X-Key": "hdr-SECRET-2\n"}, max_attempts=3)
        with pytest.raises(JudgeError) as judged:
            propose(judge)
    assert chat.requests == [] and "hdr-SECRET-2" not in str(judged.value)
    assert judge.stats()["retries"] == 0 and judge.stats()["failed_requests"] == 1  # a local error: not transient


# -- the network -------------------------------------------------------------------------------------


class RecordingProxy(LoopbackServer):
    """A forward proxy that records what it is sent and answers a canned chat completion."""

    def __init__(self) -> None:
        self.seen: list[Request] = []
        super().__init__()

    def serve(self, request: Request) -> Reply:
        self.seen.append(request)
        return answer(0, 0, failure_mode="from the proxy")


PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def test_proxy_variables_are_ignored_and_a_proxy_passed_explicitly_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, SECRET)
    with RecordingProxy() as proxy, ChatServer([answer(1, 2)]) as server, CompletionsServer() as completions:
        for name in PROXY_VARIABLES:
            monkeypatch.setenv(name, proxy.root)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        proposal = propose(judge_for(server.url, api_key_env=VARIABLE))
        generate(engine_for(completions.url, api_key_env=VARIABLE))
        assert proxy.seen == [] and len(server.requests) == 1 and len(completions.requests) == 1
        assert proposal.segment.start == 1  # type: ignore[union-attr]
        explicit = propose(judge_for(server.url, proxy=proxy.root))
    assert len(proxy.seen) == 1 and proxy.seen[0].target == f"{server.url}/chat/completions"
    assert "from the proxy" in explicit.rationale  # type: ignore[union-attr]


class RefusingProxy(LoopbackServer):
    """A forward proxy that refuses every request (407), echoing the credentials it was sent, as sent and decoded."""

    def __init__(self) -> None:
        self.seen: list[Request] = []
        super().__init__()

    def serve(self, request: Request) -> Reply:
        self.seen.append(request)
        sent = {k.lower(): v for k, v in request.headers.items()}.get("proxy-authorization", "")
        decoded = base64.b64decode(sent.removeprefix("Basic ")).decode()
        return Reply(status=407, body=f"denied {sent} ({decoded})", content_type="text/plain")


PROXY_BASIC = "YWxpY2U6cHctU2VjcmV0Lzc3"
"""base64 of ``alice:pw-Secret/77``, written out: what a proxy URL ``http://alice:pw-Secret%2F77@...`` sends."""


def test_a_proxys_credentials_echoed_by_the_proxy_stay_out_of_the_error() -> None:
    assert base64.b64encode(b"alice:pw-Secret/77").decode() == PROXY_BASIC
    with RefusingProxy() as proxy:
        url = f"http://alice:pw-Secret%2F77@127.0.0.1:{proxy.port}"
        with pytest.raises(JudgeError) as judged:
            propose(judge_for("http://127.0.0.1:9/v1", proxy=url))
        with pytest.raises(EngineHTTPError) as generated:
            generate(engine_for("http://127.0.0.1:9/v1", proxy=url))
    sent = [{k.lower(): v for k, v in r.headers.items()}["proxy-authorization"] for r in proxy.seen]
    assert sent == [f"Basic {PROXY_BASIC}"] * 2  # what travels, and what the proxy echoed
    for shown in (str(judged.value), str(generated.value)):
        assert "407" in shown and "denied Basic *** (***)" in shown, shown
        assert not any(form in shown for form in (PROXY_BASIC, "pw-Secret", "pw-Secret%2F77", "alice:pw")), shown


def test_a_bearer_key_over_plain_http_to_a_remote_host_is_warned_about_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(VARIABLE, SECRET)
    caplog.set_level(logging.WARNING, logger="prover_core.connections")
    for _ in range(3):  # built, never called: no connection is made
        engine_for("http://gpu-one.invalid:8000/v1", api_key_env=VARIABLE)
        judge_for("http://gpu-one.invalid:8000/v1", api_key_env=VARIABLE)
    quiet = ["https://gpu-two.invalid/v1", "http://127.0.0.1:9/v1", "http://localhost:9/v1", "http://[::1]:9/v1"]
    for url in quiet:
        engine_for(url, api_key_env=VARIABLE)
    engine_for("http://gpu-three.invalid:8000/v1")  # no key: nothing to warn about
    warned = [r.getMessage() for r in caplog.records if "clear text" in r.getMessage()]
    assert len(warned) == 1 and "gpu-one.invalid" in warned[0] and SECRET not in caplog.text


# -- hostile answers ---------------------------------------------------------------------------------


def bomb(size: int) -> Reply:
    """A gzip body that inflates to ``size`` bytes (a few KB on the wire)."""
    return Reply(body=gzip.compress(b" " * size), headers={"Content-Encoding": "gzip"})


@pytest.mark.parametrize("reply", [Reply(body="[" + "1," * 300_000 + "1]"), bomb(4_000_000)])
def test_an_answer_past_max_answer_bytes_is_refused_unread_and_not_retried(reply: Reply) -> None:
    with ChatServer([reply]) as server:
        judge = judge_for(server.url, max_answer_bytes=100_000, max_attempts=3)
        with pytest.raises(JudgeAnswerTooLargeError, match="larger than 100000 bytes"):
            propose(judge)
    assert len(server.requests) == 1 and judge.stats()["failed_requests"] == 1 and judge.stats()["errors"] == 1
    with CompletionsServer(faults=[reply]) as completions:
        engine = engine_for(completions.url, max_answer_bytes=100_000, max_attempts=3)
        with pytest.raises(EngineAnswerTooLargeError) as error:
            generate(engine)
    assert len(completions.requests) == 1 and isinstance(error.value, (AnswerTooLargeError, EngineResponseError))
    assert LLMJudge.from_url("http://127.0.0.1:9/v1", "m").config.max_answer_bytes == MAX_ANSWER_BYTES


def test_a_completion_of_millions_of_ids_for_a_few_tokens_is_refused_by_its_size() -> None:
    huge = {"choices": [{"text": "", "token_ids": list(range(1_000_000)), "finish_reason": "length"}]}
    refused = pytest.raises(EngineAnswerTooLargeError, match="larger than 84992 bytes")
    with CompletionsServer(faults=[Reply(body=huge)]) as server, refused:  # 6.9 MB, under the default 32 MiB
        generate(engine_for(server.url), max_tokens=16)  # 65536 + 1024 * (3 prompt tokens + 16) = 84992
    engine = engine_for("http://127.0.0.1:9/v1", max_answer_bytes=100_000)
    assert engine.answer_cap(3, 16) == 84_992 and engine.answer_cap(3, 1000) == 100_000


class CountingText(str):
    """A string that counts the scans made on it (``find`` and ``startswith``)."""

    scans = 0

    def find(self, *args: Any) -> int:  # type: ignore[override]
        CountingText.scans += 1
        return super().find(*args)

    def startswith(self, *args: Any) -> bool:  # type: ignore[override]
        CountingText.scans += 1
        return super().startswith(*args)


@pytest.mark.parametrize("spaces", [10_000, 40_000])
def test_an_unclosed_fence_costs_one_scan_whatever_follows_it(spaces: int) -> None:
    # each str scan is linear (C), so a constant number of them is linear in the text: here 3 for n and 4n
    CountingText.scans = 0
    assert fenced_blocks(CountingText("```" + " " * spaces)) == []
    assert CountingText.scans == 3
    reason = parse_answer("```json" + " " * spaces)
    assert isinstance(reason, str) and "not valid JSON" in reason


@given(st.text(alphabet="`jso n\n{}x", max_size=40))
def test_the_fence_scan_finds_what_the_quadratic_pattern_found(text: str) -> None:
    assert fenced_blocks(text) == [m.strip() for m in re.findall(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)]


DEEP = "[" * 200_000 + "]" * 200_000


def test_deep_json_in_a_body_an_answer_or_tool_arguments_is_a_judge_error_counted() -> None:
    with ChatServer([Reply(body=DEEP)]) as server:
        judge = judge_for(server.url)
        with pytest.raises(JudgeError, match="nested too deeply"):
            propose(judge)
    assert judge.stats()["errors"] == 1 and judge.stats()["failed_requests"] == 1
    assert "too deeply" in str(parse_answer(DEEP))
    with ChatServer([completion(DEEP), answer(1, 2)]) as server:
        judge = judge_for(server.url)
        assert propose(judge).segment.start == 1  # repaired
    assert "too deeply" in server.requests[1]["messages"][-1]["content"] and judge.stats()["repairs"] == 1
    with ChatServer([completion(None, tool_calls=[("search_trajectory", DEEP)]), answer(1, 2)]) as server:
        judge = judge_for(server.url, mode="agentic")
        assert propose(judge).segment.start == 1
    assert any("too deeply" in m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool")


def test_a_lone_surrogate_is_a_judge_error_counted() -> None:
    body = '{"choices": [{"message": {"role": "assistant", "content": "turn \\ud800"}}]}'
    with ChatServer([Reply(body=body)]) as server:
        judge = judge_for(server.url)
        with pytest.raises(JudgeError, match="lone surrogate"):
            propose(judge)
    assert judge.stats()["errors"] == 1 and len(server.requests) == 1


def test_tool_calls_per_reply_are_capped_and_clipped() -> None:
    calls = [("search_trajectory", {"query": f"key {i}", "k": 1}) for i in range(3000)]
    long_args = json.dumps({"query": "q" * 50_000})
    with ChatServer(
        [
            completion(None, tool_calls=calls),
            completion(None, tool_calls=[("search_trajectory", long_args)]),
            answer(1, 2),
        ]
    ) as server:
        judge = judge_for(server.url, mode="agentic", max_tool_calls_per_reply=4, max_tool_rounds=3)
        assert propose(judge).segment.start == 1
    second, third = server.requests[1]["messages"], server.requests[2]["messages"]
    assert [len(m.get("tool_calls", [])) for m in second if m["role"] == "assistant"] == [4]
    assert sum(m["role"] == "tool" for m in second) == 4
    assert "3000 tool calls in one reply; at most 4 are run" in second[-1]["content"]
    assert len(json.dumps(third)) - len(json.dumps(second[:2])) < 16_000 + 4_000
    assert judge.stats()["tool_calls"] == 5


@pytest.mark.parametrize("value", ["NaN", "Infinity", "0.5"])
def test_a_logprob_that_is_nan_or_above_zero_is_refused(value: str) -> None:
    def nan(body: dict[str, Any], index: int) -> Reply:
        text = (
            '{"choices": [{"text": "", "token_ids": [13], "finish_reason": "length", '
            f'"logprobs": {{"tokens": ["token_id:13"], "token_logprobs": [{value}]}}}}]}}'
        )
        return Reply(body=text)

    with CompletionsServer(faults=nan) as server, pytest.raises(EngineResponseError, match="logprob"):
        generate(engine_for(server.url, logprobs=True), max_tokens=1)


def test_a_llama_probability_outside_zero_to_one_is_refused() -> None:
    bad = {"tokens": [7], "content": "x", "completion_probabilities": [{"id": 7, "prob": 1.5}]}
    with LlamaServer(faults=[Reply(body=bad)]) as server:
        engine = LlamaServerEngine(server.root, logprobs=True, backoff_s=0.0)
        with pytest.raises(EngineResponseError, match="prob"):
            generate(engine, max_tokens=1)


def test_negative_usage_is_ignored_not_credited_to_the_budget() -> None:
    with ChatServer([answer(1, 2, usage=(-1_000_000, -5))]) as server:
        judge = judge_for(server.url, max_tokens_per_step=10)
        assert propose(judge).segment.start == 1
    stats = judge.stats()
    assert stats["prompt_tokens"] == 0 and stats["completion_tokens"] == 0 and stats["usage_missing"] == 1


# -- no lost work ------------------------------------------------------------------------------------


def test_a_non_finite_logprob_gap_is_counted_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    monitor = ParityMonitor(lambda context, tokens: [-1.0] * len(tokens), every=1)
    monitor.offer([1], Generation((2, 3), logprobs=(float("-inf"), -1.5)))
    monitor.offer([4], Generation((5,), logprobs=(float("-inf"),)))
    stats = asyncio.run(monitor.evaluate())
    assert stats.nonfinite == 2 and stats.tokens == 1 and stats.actions == 1 and stats.signed_sum == -0.5
    assert monitor.metrics()["engine_logprob_gap_nonfinite"] == 2.0
    assert sum("not finite" in r.getMessage() for r in caplog.records) == 1


def test_a_failed_cache_write_keeps_the_paid_answer(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "cache"
    blocked.mkdir(mode=0o700)
    for shard in range(256):  # a file where each entry's directory should be (the tests run as root: no chmod)
        (blocked / f"{shard:02x}").write_text("not a directory")
    with ChatServer([answer(1, 2)]) as server:
        judge = judge_for(server.url, cache_dir=blocked)
        assert propose(judge).segment.start == 1
        assert propose(judge).segment.start == 1
    assert judge.stats()["cache_write_errors"] == 2 and judge.stats()["errors"] == 0
    assert sum("could not be written to the cache" in r.getMessage() for r in caplog.records) == 1


# -- the shared retry policy -------------------------------------------------------------------------


def test_one_retry_policy_with_each_clients_parameters() -> None:
    engine = engine_for("http://127.0.0.1:9/v1", backoff_s=0.5, max_wait_s=3.0, max_attempts=5)
    judge = judge_for(
        "http://127.0.0.1:9/v1", backoff_initial_s=1.0, backoff_max_s=30.0, backoff_jitter_s=1.0, max_retry_after_s=60.0
    )
    e = engine.retry
    j = judge._client.retry
    assert isinstance(e, RetryPolicy) and isinstance(j, RetryPolicy)
    assert (e.max_attempts, e.statuses, e.server_errors, e.retry_timeouts) == (5, {429, 502, 503, 504}, False, False)
    assert (j.statuses, j.server_errors, j.retry_timeouts) == ({408, 409, 429}, True, True)
    assert [e.retries_status(s) for s in (429, 500, 503, 400)] == [True, False, True, False]
    assert [j.retries_status(s) for s in (408, 500, 599, 400)] == [True, True, True, False]
    no_jitter = RetryPolicy(**{**vars(e), "jitter_s": 0.0})
    assert [no_jitter.wait(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]  # 0.5 * 2**(n-1), capped at 3
    assert no_jitter.wait(1, retry_after=100.0) == 3.0
    no_jitter = RetryPolicy(**{**vars(j), "jitter_s": 0.0})
    assert [no_jitter.wait(n) for n in (1, 2, 5, 6, 9)] == [1.0, 2.0, 16.0, 30.0, 30.0]
    assert no_jitter.wait(1, retry_after=100.0) == 60.0
    jittered = [j.wait(1) for _ in range(200)]  # 1 + uniform(0, 1)
    assert all(1.0 <= w <= 2.0 for w in jittered) and max(jittered) - min(jittered) > 0.5


@pytest.mark.parametrize(
    "entry",
    ['{"choices": [{"message": {"content": "\\ud800"}}]}', DEEP, '{"choices": []}', "not json"],
)
def test_a_cache_entry_that_fails_the_answers_checks_is_a_miss(entry: str, tmp_path: Path) -> None:
    with ChatServer([answer(1, 2)]) as server:
        judge = judge_for(server.url, cache_dir=tmp_path)
        assert propose(judge).segment.start == 1
        (written,) = tmp_path.glob("*/*.json")
        written.write_text(entry)
        assert propose(judge).segment.start == 1
    assert len(server.requests) == 2 and judge.stats()["cache_hits"] == 0


def test_every_promise_on_the_security_page_names_a_test_that_exists() -> None:
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "security.md").read_text()
    cited = re.findall(r"`(?:(tests/(?:\w+/)*\w+\.py)::)?(test_\w+)`", page)
    assert len(cited) >= 20
    for path, name in cited:
        source = (root / (path or "tests/test_security.py")).read_text()
        assert f"def {name}(" in source, (path, name)
    rows = [
        line for line in page.splitlines() if line.startswith("| ") and "---" not in line and "| test |" not in line
    ]
    promises = [row for row in rows if row.count("|") == 3]  # the promise tables: | promise | test |
    assert promises and all(re.search(r"`(tests/(\w+/)*\w+\.py::)?test_\w+`", row) for row in promises)


@pytest.mark.parametrize(
    "passed",
    ["sk-proj-Abc123def456GHI789jkl", "sk_live_0123456789abcdef", "  sk-with-spaces  ", "ghp_AbCdEf0123456789"],
)
def test_a_key_passed_where_its_variables_name_belongs_is_never_shown(passed: str) -> None:
    """``api_key_env="sk-..."``: the key itself, not the name of the variable holding it. The unset-variable errors
    (judge config, judge, engine) must not contain it (the forms checked here are written out literally, not derived
    from the redactor)."""
    from prover_core.judges.llm import LLMJudgeConfig

    config = LLMJudgeConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=passed)
    with pytest.raises(ValueError) as judged:
        config.api_key()
    with pytest.raises(ValueError) as built:
        LLMJudge(config)
    with pytest.raises(ValueError) as engined:
        OpenAICompletionsEngine("http://127.0.0.1:9/v1", "m", api_key_env=passed)
    shown = [str(judged.value), str(built.value), str(engined.value)]
    core = passed.strip()
    for text in shown:
        assert core not in text and core[:12] not in text and core[-8:] not in text, text
    assert "never the key" in str(judged.value) and f"{len(passed)} characters" in str(judged.value)


def test_a_conventional_variable_name_is_still_named_in_the_error() -> None:
    from prover_core.judges.llm import LLMJudgeConfig

    config = LLMJudgeConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="PROVER_NO_SUCH_KEY_123")
    with pytest.raises(ValueError, match="'PROVER_NO_SUCH_KEY_123'"):
        config.api_key()


# -- decompression: the answer cap counts decoded bytes as they are decoded ------------------------------------------


def _deflated(size: int, wbits: int) -> bytes:
    """``size`` zero bytes compressed with ``wbits`` (31: gzip, 15: zlib-wrapped deflate, -15: raw deflate), built
    a megabyte at a time so that the test itself never holds the inflated body."""
    packer, out, chunk = zlib.compressobj(9, zlib.DEFLATED, wbits), [], b"\0" * 2**20
    for _ in range(size // 2**20):
        out.append(packer.compress(chunk))
    return b"".join(out) + packer.flush()


def _peak_while(run: Any) -> int:
    """Peak bytes allocated by Python (tracemalloc) while ``run()`` runs."""
    import tracemalloc

    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        (lambda: gzip.compress(_deflated(200 * 2**20, 31)), "gzip, gzip"),  # stacked: refused before decoding
        (lambda: _deflated(200 * 2**20, 31), "gzip"),  # one layer inflating to 200 MiB: cut at the cap
        (lambda: _deflated(200 * 2**20, 15), "deflate"),
        (lambda: b"\x00" * 64, "br"),  # a coding the client does not decode itself
    ],
    ids=["gzip-gzip", "gzip-bomb", "deflate-bomb", "br"],
)
def test_a_compressed_answer_is_bounded_while_it_is_decoded(body: Any, encoding: str) -> None:
    """A body of a few hundred KB on the wire that inflates to 200 MiB (or more, stacked) against a cap of 1 MiB:
    the judge and the engine refuse it with their typed too-large errors, and the peak memory of the whole request
    stays within a few MiB (httpx's own decoding inflated a whole network chunk first: a stacked ``gzip, gzip`` of 269
    bytes reached about 142 MiB before the error). Stacked layers and codings other than gzip and deflate are
    refused before any decoding, their message naming the encoding."""
    reply = Reply(body=body(), headers={"Content-Encoding": encoding})
    cap = 2**20
    with ChatServer([reply]) as server:
        judge = judge_for(server.url, max_answer_bytes=cap, max_attempts=1)
        with pytest.raises(JudgeAnswerTooLargeError) as judged:
            propose(judge)
    with CompletionsServer(faults=[reply]) as completions:
        engine = engine_for(completions.url, max_answer_bytes=cap, max_attempts=1)
        with pytest.raises(EngineAnswerTooLargeError):
            generate(engine)
    if "," in encoding or encoding == "br":
        assert "Content-Encoding" in str(judged.value) and encoding in str(judged.value)
    else:
        assert "larger than 1048576 bytes" in str(judged.value)


@pytest.mark.parametrize("encoding", ["gzip, gzip", "gzip"])
def test_the_peak_memory_of_a_bomb_stays_near_the_cap(encoding: str) -> None:
    body = _deflated(200 * 2**20, 31)
    reply = Reply(body=gzip.compress(body) if "," in encoding else body, headers={"Content-Encoding": encoding})
    with ChatServer([reply]) as server:
        judge = judge_for(server.url, max_answer_bytes=2**20, max_attempts=1)

        def run() -> None:
            with pytest.raises(JudgeAnswerTooLargeError):
                propose(judge)

        peak = _peak_while(run)
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB for a 1 MiB cap"


@pytest.mark.parametrize("wbits", [31, 15, -15], ids=["gzip", "deflate", "raw-deflate"])
def test_a_compressed_answer_within_the_cap_is_decoded(wbits: int) -> None:
    """One layer of gzip or deflate (zlib-wrapped or raw, as servers send both) decodes to the same answer; two gzip
    members one after the other decode whole."""
    plain = json.dumps(answer(1, 2).body).encode()
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    body = packer.compress(plain) + packer.flush()
    encoding = "gzip" if wbits == 31 else "deflate"
    with ChatServer([Reply(body=body, headers={"Content-Encoding": encoding})]) as server:
        got = propose(judge_for(server.url))
    assert got.segment.start == 1 and got.segment.end == 2
    from prover_core.connections import Inflater

    half = len(plain) // 2
    members = gzip.compress(plain[:half]) + gzip.compress(plain[half:])
    inflater = Inflater("gzip", 10 * len(plain))
    assert b"".join(inflater.feed(members[i : i + 7]) for i in range(0, len(members), 7)) == plain


# -- secrets in logs the library does not write itself, and server text in reports ---------------------------------

ECHOED = "sk-live-0123456789ABCDEFechoed"
"""A key written out literally (not derived from the redactor): what a hostile server echoes back."""


def test_a_key_echoed_in_a_response_header_stays_out_of_httpcores_debug_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """At DEBUG, httpcore logs every response header verbatim; a server that echoes the bearer key in one would put
    it in the log. The clients' live secrets are scrubbed from the HTTP libraries' records (``SecretFilter``)."""
    monkeypatch.setenv(VARIABLE, ECHOED)
    caplog.set_level(logging.DEBUG)
    reply = answer(1, 2)
    echo = Reply(body=reply.body, headers={"X-Echo": f"Bearer {ECHOED}", "X-Key": ECHOED})
    with ChatServer([echo]) as server:
        judge = judge_for(server.url, api_key_env=VARIABLE)
        propose(judge)
    assert any(r.name.startswith("httpcore") for r in caplog.records)  # httpcore did log the exchange
    assert ECHOED not in caplog.text and ECHOED[:12] not in caplog.text
    assert "***" in caplog.text


class Verbose:
    """A judge whose decline reason or rationale is a server's text: an echoed key, then 4,000,000 characters."""

    def __init__(self, decline: bool) -> None:
        self.decline = decline

    def propose(self, success: Any, failures: Any, rules: Any) -> Any:
        from prover_core import Decline, Proposal, Segment

        text = f"the server said {ECHOED} " + "x" * 4_000_000
        if self.decline:
            return Decline(reason=text)
        return Proposal(segment=Segment(trajectory_id=success.id, start=1, end=1), rationale=text)


@pytest.mark.parametrize("decline", [True, False], ids=["reason", "rationale"])
def test_server_text_reaches_the_report_scrubbed_and_clipped(
    decline: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A judge's decline reason and a proposal's rationale reach ``GroupRecord.reason``, the proposal, the report's
    JSON and DEBUG lines with every live client's secret as ``***`` and at most ``REPORTED_CHARS`` characters."""
    from prover_core.redaction import REPORTED_CHARS

    monkeypatch.setenv(VARIABLE, ECHOED)
    caplog.set_level(logging.DEBUG, logger="prover_core")
    live = judge_for("http://127.0.0.1:9/v1", api_key_env=VARIABLE)  # a client holding the key, alive meanwhile
    result = compute_bonus(make_group(), judge=Verbose(decline), continue_from=lambda t, turn, seed: turn >= 2)
    (record,) = result.report.groups
    text = record.reason if decline else record.proposal.rationale  # type: ignore[union-attr]
    assert ECHOED not in text and "***" in text
    assert len(text) <= REPORTED_CHARS + 40 and text.endswith("… (4000020 characters)")  # counted once scrubbed
    dumped = result.report.model_dump_json()
    assert ECHOED not in dumped and len(dumped) < 50_000 and ECHOED not in caplog.text
    del live


# -- credentials in URLs spelled loosely, numbers past the parsers' limits, the cache, pickles ----------------------

LOOSE_URLS = (
    "HTTPS://alice:pw-SECRET-77@127.0.0.1:9/v1",
    "https:/alice:pw-SECRET-77@127.0.0.1:9/v1",
    "htps://alice:pw-SECRET-77@127.0.0.1:9/v1",
    "  http://alice:pw-SECRET-77@127.0.0.1:9/v1",
    "http://alice:pw-SECRET-77@127.0.0.1:9/v1",  # SGLang's engine refuses any /v1 URL: after the credentials
)


@pytest.mark.parametrize("url", LOOSE_URLS)
def test_credentials_in_a_url_spelled_loosely_are_refused_by_the_judge_and_the_engines(url: str) -> None:
    for build in (
        lambda: judge_for(url),
        lambda: engine_for(url),
        lambda: LlamaServerEngine(url),
        lambda: SGLangEngine(url),
        lambda: SGLangEngine(url.removesuffix("/v1")),
    ):
        with pytest.raises(CredentialError, match=r"\*\*\*@127\.0\.0\.1:9") as error:
            build()
        assert "pw-SECRET" not in str(error.value) and "alice" not in str(error.value)


LONG = "9" * 5000
"""An integer past Python's digit limit for ``int(str)`` (4,300 digits): ``json.loads`` raises a plain ValueError."""


def test_a_number_past_pythons_digit_limit_is_a_repair_turn_counted() -> None:
    too_long = f'{{"failure_mode": "x", "start_turn": {LONG}, "end_turn": 2, "rationale": "r"}}'
    assert "number too long" in str(parse_answer(too_long))
    with ChatServer([completion(too_long), answer(1, 2)]) as server:
        judge = judge_for(server.url)
        assert propose(judge).segment.start == 1  # repaired
    assert "number too long" in server.requests[1]["messages"][-1]["content"] and judge.stats()["repairs"] == 1
    span = f'{{"failure_mode": "x", "start_turn": 1, "turns": {LONG}, "rationale": "r"}}'
    with ChatServer([completion(span), answer(1, 2)]) as server:
        judge = judge_for(server.url, answer_form="span")
        assert propose(judge).segment.start == 1
    assert "number too long" in server.requests[1]["messages"][-1]["content"] and judge.stats()["repairs"] == 1
    arguments = f'{{"query": "door", "k": {LONG}}}'
    with ChatServer([completion(None, tool_calls=[("search_trajectory", arguments)]), answer(1, 2)]) as server:
        judge = judge_for(server.url, mode="agentic")
        assert propose(judge).segment.start == 1
    tool_texts = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert any("number too long" in text for text in tool_texts) and judge.stats()["errors"] == 0


@pytest.mark.parametrize(
    "ids",
    [
        '"token_ids": [' + "9" * 40 + "]",  # past 2**31
        '"token_ids": [2147483648]',
        '"token_ids": [' + LONG + "]",  # past the JSON reader's range
        '"logprobs": {"tokens": ["token_id:' + LONG + '"], "token_logprobs": [-0.5]}',  # past the digit limit
    ],
)
def test_a_token_id_past_int32_or_the_digit_limit_is_a_typed_engine_error(ids: str) -> None:
    def fault(body: dict[str, Any], index: int) -> Reply:
        return Reply(body='{"choices": [{"text": "", "finish_reason": "length", ' + ids + "}]}")

    with CompletionsServer(faults=fault) as server, pytest.raises(EngineResponseError):
        generate(engine_for(server.url, logprobs=True), max_tokens=1)


@pytest.mark.parametrize(
    "entry",
    [
        '[-0.5, Infinity, "a"]',
        '[-0.5, 1.5, "a"]',
        '[-0.5, 2147483648, "a"]',
        '[1e999, 13, "a"]',
        '[-0.5, true, "a"]',
        '["-0.5", 13, "a"]',
    ],
)
def test_an_sglang_logprob_entry_with_an_id_or_value_out_of_range_is_a_typed_error(entry: str) -> None:
    body = (
        '{"text": "x", "output_ids": [13], "meta_info": {"finish_reason": {"type": "length"}, '
        f'"output_token_logprobs": [{entry}]}}}}'
    )
    engine_error = pytest.raises(EngineResponseError, match="output_token_logprobs")
    with SGLangServer(faults=lambda request, index: Reply(body=body)) as server, engine_error:
        generate(SGLangEngine(server.root, logprobs=True, backoff_s=0.0), max_tokens=1)


def test_a_llama_byte_value_above_255_is_a_typed_error() -> None:
    bad = {"tokens": [7], "content": "x", "completion_probabilities": [{"id": 7, "prob": 0.5, "bytes": [300]}]}
    with LlamaServer(faults=[Reply(body=bad)]) as server:
        engine = LlamaServerEngine(server.root, logprobs=True, backoff_s=0.0)
        with pytest.raises(EngineResponseError, match="255"):
            generate(engine, max_tokens=1)


def test_the_judge_cache_reads_only_regular_files_within_the_cap_and_never_blocks(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    elsewhere = tmp_path / "elsewhere.json"
    with ChatServer([answer(1, 2)] * 5) as server:
        judge = judge_for(server.url, cache_dir=cache, max_answer_bytes=4096)
        assert propose(judge).segment.start == 1
        (entry,) = cache.glob("*/*.json")
        body = entry.read_text()
        assert propose(judge).segment.start == 1 and judge.stats()["cache_hits"] == 1  # a hit while it is sound
        entry.write_text(body + " " * 5000)  # a sound answer, too large: a miss
        assert propose(judge).segment.start == 1 and len(server.requests) == 2
        elsewhere.write_text(body)
        entry.unlink()
        entry.symlink_to(elsewhere)  # a link, even to a sound answer: a miss
        assert propose(judge).segment.start == 1 and len(server.requests) == 3
        entry.unlink()
        os.mkfifo(entry)  # reading a FIFO with no writer would block the event loop forever
        done = threading.Event()
        worker = threading.Thread(target=lambda: (propose(judge), done.set()), daemon=True)
        worker.start()
        worker.join(timeout=30)
        if not done.is_set():  # unblock the reader before failing, so the thread ends
            with open(os.open(entry, os.O_WRONLY | os.O_NONBLOCK), "w"):
                pass
        assert done.is_set() and len(server.requests) == 4
    assert judge.stats()["cache_hits"] == 1 and judge.stats()["errors"] == 0


def test_the_judge_cache_directory_is_private(tmp_path: Path) -> None:
    cache = tmp_path / "runs" / "cache"
    with ChatServer([answer(1, 2)]) as server:
        assert propose(judge_for(server.url, cache_dir=cache)).segment.start == 1
    (entry,) = cache.glob("*/*.json")
    modes = [stat.S_IMODE(p.stat().st_mode) for p in (cache, entry.parent, entry)]
    assert modes == [0o700, 0o700, 0o600]
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(cache)
    for where in (shared, link):
        with pytest.raises(ValueError, match="not a private directory"):
            propose(judge_for("http://127.0.0.1:9/v1", cache_dir=where))


def test_a_pickled_engine_holds_no_key_and_reads_it_again_where_it_is_unpickled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VARIABLE, SECRET)
    forms = (*SECRET_FORMS, base64.b64encode(SECRET.encode()).decode())
    with CompletionsServer() as completions, SGLangServer() as sglang, LlamaServer() as llama:
        engines = [
            (engine_for(completions.url, api_key_env=VARIABLE), completions),
            (SGLangEngine(sglang.root, api_key_env=VARIABLE, backoff_s=0.0), sglang),
            (LlamaServerEngine(llama.root, api_key_env=VARIABLE, slots=2, backoff_s=0.0), None),
        ]
        for engine, server in engines:
            generate(engine, max_tokens=2)  # an engine that has run: its pools and stats are in use
            pickled = pickle.dumps(engine)
            assert not leaks([pickled.decode("latin-1")], forms), type(engine).__name__
            copy = pickle.loads(pickled)
            assert len(generate(copy, max_tokens=2).token_ids) >= 1
            if server is not None:
                assert server.headers[-1]["Authorization"] == f"Bearer {SECRET}"  # read again, sent
        monkeypatch.delenv(VARIABLE)
        with pytest.raises(ValueError, match=VARIABLE):
            pickle.loads(pickle.dumps(engines[0][0]))
