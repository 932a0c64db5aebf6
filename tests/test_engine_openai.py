"""OpenAICompletionsEngine against a real vLLM-shaped completions server on 127.0.0.1 (faults included)."""

from __future__ import annotations

import asyncio
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prover_core.errors import ContinuationTimeoutError, EngineError, ProverError
from prover_engine import Generation, OpenAICompletionsEngine, SamplingParams
from prover_engine.errors import EngineHTTPError, EngineResponseError, EngineTimeoutError
from tests.chat_server import Reply
from tests.completions_server import CompletionsServer, completion_body


def make_engine(server: CompletionsServer, **kw: Any) -> OpenAICompletionsEngine:
    settings: dict[str, Any] = dict(backoff_s=0.0, timeout_s=5.0, max_attempts=3)
    settings.update(kw)
    return OpenAICompletionsEngine(server.url, "test-model", **settings)


def generate(engine: OpenAICompletionsEngine, ids: Any = (5, 9, 12), **params: Any) -> Generation:
    result = asyncio.run(engine.generate(ids, SamplingParams(**params)))
    assert not engine._pools.open, "the connection pool must close when its last user leaves"
    return result


def choice_reply(**choice: Any) -> Reply:
    body = completion_body([13, 14], {"model": "m", "prompt": [1], "return_token_ids": True})
    body["choices"][0].update(choice)
    return Reply(body=body)


# -- the request and the ids read back --------------------------------------------------------------


def test_request_carries_token_ids_and_sampling_and_the_ids_come_back_exactly() -> None:
    with CompletionsServer() as server:
        g = generate(
            make_engine(server),
            [5, 9, 12],
            max_tokens=8,
            temperature=0.7,
            top_p=0.9,
            seed=1234,
            top_k=5,
            min_p=0.05,
            stop_token_ids=(99,),
            extra={"ignore_eos": False},
        )
    assert g == Generation((13, 14), text="<13><14>", logprobs=None, finish_reason="length")
    (body,) = server.requests
    assert body == {
        "model": "test-model",
        "prompt": [5, 9, 12],
        "max_tokens": 8,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 5,
        "min_p": 0.05,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "n": 1,
        "stream": False,
        "return_token_ids": True,
        "seed": 1234,
        "stop_token_ids": [99],
        "ignore_eos": False,
    }


@pytest.mark.parametrize("field", ["top_k", "min_p", "repetition_penalty", "temperature", "seed"])
def test_extra_may_not_override_a_sampling_field(field: str) -> None:
    """Every field of the distribution is the engine's own: a clash is refused before anything is sent."""
    engine = OpenAICompletionsEngine("http://127.0.0.1:9/v1", "m")
    with pytest.raises(ValueError, match=field):
        engine.payload([1], SamplingParams(extra={field: 1}))


@pytest.mark.parametrize(
    "bad",
    [
        {"top_k": -1},
        {"min_p": 1.5},
        {"repetition_penalty": 0.0},
        {"temperature": float("nan")},
        {"top_p": float("inf")},
        {"presence_penalty": float("nan")},
    ],
)
def test_sampling_params_refuse_values_no_engine_means(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**bad)


def test_a_stop_token_ends_the_generation_and_numpy_ids_are_sent_as_ints() -> None:
    with CompletionsServer() as server:
        g = generate(make_engine(server), np.array([5, 9, 12], dtype=np.int64), stop_token_ids=(13,))
    assert (g.token_ids, g.finish_reason) == ((13,), "stop")
    assert server.requests[0]["prompt"] == [5, 9, 12] and "seed" not in server.requests[0]


def test_logprobs_give_the_ids_as_token_id_strings_when_the_server_has_no_token_ids() -> None:
    """vLLM < 0.10.2 ignores return_token_ids; logprobs + return_tokens_as_token_ids still give exact ids."""
    with CompletionsServer(token_ids=False) as server:
        g = generate(make_engine(server, logprobs=True), [7])
    assert (g.token_ids, g.logprobs) == ((8, 9), (-0.25, -0.5))
    body = server.requests[0]
    assert (body["logprobs"], body["return_tokens_as_token_ids"], body["return_token_ids"]) == (0, True, True)


def test_token_ids_and_logprob_tokens_must_agree() -> None:
    fault = choice_reply(logprobs={"tokens": ["token_id:13", "token_id:99"]})
    with CompletionsServer(faults=[fault]) as server, pytest.raises(EngineResponseError, match="disagree"):
        generate(make_engine(server))


@pytest.mark.parametrize(
    "reply",
    [
        choice_reply(token_ids=None),  # an engine that does not return ids
        choice_reply(token_ids=None, logprobs={"tokens": ["<13>", "<14>"]}),  # text tokens (SGLang's logprobs)
    ],
    ids=["no-ids", "text-logprob-tokens"],
)
def test_a_completion_without_token_ids_is_refused_with_the_fix(reply: Reply) -> None:
    with CompletionsServer(faults=[reply]) as server, pytest.raises(EngineResponseError, match="return_token_ids"):
        generate(make_engine(server))
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body='{"choices": [{"token_ids": [1, 2]'),
        Reply(body="<html>Bad gateway</html>", content_type="text/html"),
        Reply(body={"object": "error", "message": "oops"}),
        Reply(body={"choices": []}),
        choice_reply(token_ids=[1.5]),
        choice_reply(token_ids=["7"]),
        choice_reply(token_ids=[-1]),
        choice_reply(token_ids=[True]),
    ],
    ids=["truncated-json", "html", "error-object", "no-choices", "float-id", "string-id", "negative-id", "bool-id"],
)
def test_malformed_answers_raise_a_response_error_without_retrying(reply: Reply) -> None:
    with CompletionsServer(faults=[reply]) as server:
        engine = make_engine(server)
        with pytest.raises(EngineResponseError, match="not a completion"):
            generate(engine)
    assert len(server.requests) == 1 and engine.stats.failures == 1


def test_an_empty_generation_is_returned_as_it_is_for_the_policy_to_judge() -> None:
    with CompletionsServer(faults=[choice_reply(token_ids=[], text="")]) as server:
        assert generate(make_engine(server)).token_ids == ()


# -- retries ---------------------------------------------------------------------------------------


def test_429_waits_the_servers_retry_after_then_succeeds() -> None:
    with CompletionsServer(faults=[Reply(status=429, headers={"Retry-After": "0.3"})]) as server:
        engine = make_engine(server)
        started = time.perf_counter()
        g = generate(engine)
        elapsed = time.perf_counter() - started
    assert g.token_ids == (13, 14) and len(server.requests) == 2
    assert elapsed >= 0.3 and (engine.stats.retries, engine.stats.retry_wait_s) == (1, 0.3)


def test_retry_after_is_capped() -> None:
    with CompletionsServer(faults=[Reply(status=429, headers={"Retry-After": "120"})]) as server:
        engine = make_engine(server, max_wait_s=0.2)
        assert generate(engine).token_ids == (13, 14)
    assert engine.stats.retry_wait_s == 0.2


@pytest.mark.parametrize("status", [502, 503, 504])
def test_gateway_and_overload_statuses_are_retried(status: int) -> None:
    with CompletionsServer(faults=[Reply(status=status, body="busy")]) as server:
        engine = make_engine(server)
        assert generate(engine).token_ids == (13, 14)
    assert len(server.requests) == 2 and engine.stats.retries == 1


def test_an_exhausted_retryable_status_raises_an_http_error_with_the_status() -> None:
    with CompletionsServer(faults=lambda body, i: Reply(status=503, body="overloaded")) as server:
        engine = make_engine(server, max_attempts=3)
        with pytest.raises(EngineHTTPError, match=r"after 3 attempt\(s\).*503") as info:
            generate(engine)
    assert info.value.status == 503 and len(server.requests) == 3
    assert (engine.stats.requests, engine.stats.retries, engine.stats.failures) == (3, 2, 1)


@pytest.mark.parametrize("status", [400, 401, 404, 422, 500])
def test_other_error_statuses_are_not_retried(status: int) -> None:
    fault = Reply(status=status, body={"error": "no"})
    with CompletionsServer(faults=[fault]) as server, pytest.raises(EngineHTTPError, match=f"answered {status}") as e:
        generate(make_engine(server))
    assert e.value.status == status and len(server.requests) == 1


@pytest.mark.parametrize("fault", [Reply(drop=True), Reply(truncate=True, body={"choices": [{"token_ids": [1]}]})])
def test_a_dropped_connection_is_retried(fault: Reply) -> None:
    with CompletionsServer(faults=[fault]) as server:
        assert generate(make_engine(server)).token_ids == (13, 14)
    assert len(server.requests) == 2


def test_an_unreachable_server_raises_an_engine_error_after_the_attempts() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = OpenAICompletionsEngine(f"http://127.0.0.1:{port}/v1", "m", backoff_s=0.0, max_attempts=2)
    with pytest.raises(EngineError, match=r"after 2 attempt\(s\): connection error") as info:
        asyncio.run(engine.generate([1], SamplingParams()))
    assert not isinstance(info.value, EngineHTTPError) and engine.stats.requests == 2


def test_a_slow_answer_times_out_and_is_not_retried() -> None:
    with CompletionsServer(faults=[Reply(delay_s=3.0)]) as server:
        engine = make_engine(server, timeout_s=0.2)
        started = time.perf_counter()
        with pytest.raises(EngineTimeoutError, match=r"within 0\.2 s") as info:
            generate(engine)
        assert time.perf_counter() - started < 2.5
    assert len(server.requests) == 1 and isinstance(info.value, ContinuationTimeoutError)


# -- concurrency -----------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [3, 9])
def test_at_most_max_concurrency_requests_are_in_flight(limit: int) -> None:
    async def many(engine: OpenAICompletionsEngine) -> list[Generation]:
        return await asyncio.gather(*(engine.generate([i + 1], SamplingParams()) for i in range(9)))

    with CompletionsServer(latency_s=0.5) as server:  # long enough for all requests to overlap on a busy machine
        engine = make_engine(server, max_concurrency=limit)
        results = asyncio.run(many(engine))
    assert [g.token_ids for g in results] == [(i + 2, i + 3) for i in range(9)]
    assert server.max_in_flight == limit


# -- the key and bad arguments ---------------------------------------------------------------------


def test_the_api_key_comes_from_the_environment_and_never_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-very-secret-123"
    monkeypatch.setenv("TEST_ENGINE_KEY", secret)
    echo = Reply(status=400, body=f"bad key {secret}")
    with CompletionsServer(faults=[None, echo]) as server:
        engine = make_engine(server, api_key_env="TEST_ENGINE_KEY")
        generate(engine)
        with pytest.raises(EngineHTTPError) as info:
            generate(engine)
    assert server.headers[0]["Authorization"] == f"Bearer {secret}"
    assert secret not in str(info.value) and "bad key ***" in str(info.value)
    assert secret not in repr(engine) and secret not in str(vars(engine))


def test_a_missing_key_variable_and_bad_settings_fail_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_ENGINE_KEY", raising=False)
    with pytest.raises(ValueError, match="NO_SUCH_ENGINE_KEY"):
        OpenAICompletionsEngine("http://127.0.0.1:1/v1", "m", api_key_env="NO_SUCH_ENGINE_KEY")
    with pytest.raises(ValueError, match="http"):
        OpenAICompletionsEngine("127.0.0.1:8000/v1", "m")
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAICompletionsEngine("http://127.0.0.1:1/v1", "m", max_concurrency=0)


def test_an_empty_prompt_or_an_extra_field_the_engine_owns_is_refused_before_sending() -> None:
    with CompletionsServer() as server:
        engine = make_engine(server)
        with pytest.raises(EngineError, match="empty prompt"):
            generate(engine, [])
        with pytest.raises(ValueError, match="prompt"):
            generate(engine, [1], extra={"prompt": [2]})
    assert server.requests == []


def test_engine_errors_are_prover_errors_and_keep_their_status_across_processes() -> None:
    error = pickle.loads(pickle.dumps(EngineHTTPError("answered 503", 503)))
    assert isinstance(error, EngineHTTPError) and error.status == 503 and str(error) == "answered 503"
    assert issubclass(EngineResponseError, EngineError) and issubclass(EngineError, ProverError)


def test_importing_the_library_does_not_import_the_http_client() -> None:
    code = "import sys, prover_core, prover_engine; assert 'httpx' not in sys.modules, 'httpx imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
