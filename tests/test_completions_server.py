"""The vLLM-shaped loopback double behaves as vLLM 0.29 in what the engine relies on (tests/completions_server.py).

Each test pins one behaviour that a kinder double hid: EOS stopping, the max_model_len 400, sampling defaults
from the model's generation_config for fields a request leaves out, and queueing while asleep.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest

from prover_core.protocols import PolicyContext, policy_rng
from prover_engine import EnginePolicy, OpenAICompletionsEngine, SamplingParams
from prover_engine.errors import EngineHTTPError, EngineTimeoutError
from tests.completions_server import CompletionsServer
from tests.engine_support import parse, record, render, store_of

EOS = 2


def post(server: CompletionsServer, **body: Any) -> httpx.Response:
    return httpx.post(server.url + "/completions", json={"model": "m", "prompt": [5], **body}, timeout=5.0)


def test_eos_ends_the_output_and_is_kept_in_token_ids_not_in_text() -> None:
    with CompletionsServer(lambda p, b: [40, EOS, 41], eos_token_id=EOS) as server:
        (choice,) = post(server, max_tokens=8, return_token_ids=True).json()["choices"]
        assert (choice["token_ids"], choice["text"], choice["finish_reason"], choice["stop_reason"]) == (
            [40, EOS],
            "<40>",
            "stop",
            None,
        )
        (choice,) = post(server, max_tokens=8, return_token_ids=True, ignore_eos=True).json()["choices"]
        assert (choice["token_ids"], choice["finish_reason"]) == ([40, EOS, 41], "length")
        (choice,) = post(server, max_tokens=8, return_token_ids=True, stop_token_ids=[40]).json()["choices"]
        assert (choice["token_ids"], choice["text"], choice["stop_reason"]) == ([40], "", 40)


def test_at_the_token_limit_no_end_token_is_returned() -> None:
    """The root of defect (a): the end-of-turn id comes back only when the model stopped on it."""
    with CompletionsServer(lambda p, b: [40, 41, EOS], eos_token_id=EOS) as server:
        (choice,) = post(server, max_tokens=2, return_token_ids=True).json()["choices"]
        assert (choice["token_ids"], choice["finish_reason"]) == ([40, 41], "length")
        (choice,) = post(server, return_token_ids=True).json()["choices"]  # vLLM's default max_tokens: 16
        assert choice["token_ids"] == [40, 41, EOS]


def test_prompt_plus_max_tokens_past_max_model_len_is_vllms_400() -> None:
    with CompletionsServer(max_model_len=8) as server:
        refused = post(server, prompt=[1] * 7, max_tokens=2)
        assert post(server, prompt=[1] * 6, max_tokens=2).status_code == 200
        (choice,) = post(server, prompt=[1] * 7, max_tokens=None, return_token_ids=True).json()["choices"]
    assert refused.status_code == 400
    assert refused.json() == {
        "error": {
            "message": "This model's maximum context length is 8 tokens. However, you requested 2 output tokens "
            "and your prompt contains 7 input tokens, for a total of 9 tokens. Please reduce the length of the "
            "input prompt or the number of requested output tokens.",
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400,
        }
    }
    assert choice["token_ids"] == [2]  # max_tokens null: the room left, 1


GENERATION_CONFIG = {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "repetition_penalty": 1.05}
PRE_FIX_PAYLOAD = {"max_tokens": 4, "temperature": 1.0, "top_p": 1.0, "n": 1, "return_token_ids": True}
"""What OpenAICompletionsEngine sent before issue 19 item 4 (temperature and top_p only)."""


def test_unsent_sampling_fields_come_from_the_models_generation_config() -> None:
    """Item 4 of issue 19: the old request samples with top_k 20 and repetition_penalty 1.05, not the
    rollout's distribution; the engine's request now leaves nothing to the server."""
    with CompletionsServer(generation_config=GENERATION_CONFIG) as server:
        post(server, **PRE_FIX_PAYLOAD)
        engine = OpenAICompletionsEngine(server.url, "m", max_attempts=1)
        params = SamplingParams(max_tokens=4)
        asyncio.run(engine.generate([5], params))
    old, new = server.sampled
    assert {k: old[k] for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")} == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 20,
        "min_p": 0.0,
        "repetition_penalty": 1.05,
    }
    assert {k: new[k] for k in params.distribution()} == params.distribution()
    with pytest.raises(ValueError, match="max_tokens"):
        CompletionsServer(generation_config={"max_tokens": 3})


def test_a_sleeping_server_queues_requests_until_it_wakes() -> None:
    """vLLM 0.29's sleep pauses the scheduler: requests wait (a real run would hang to its time limit)."""
    with CompletionsServer() as server:
        engine = OpenAICompletionsEngine(server.url, "m", max_attempts=1, timeout_s=10.0)
        assert httpx.post(server.url.removesuffix("/v1") + "/sleep?level=1").status_code == 200
        assert httpx.get(server.url.removesuffix("/v1") + "/is_sleeping").json() == {"is_sleeping": True}
        result: list[Any] = []
        worker = threading.Thread(target=lambda: result.append(asyncio.run(engine.generate([5], SamplingParams()))))
        worker.start()
        deadline = time.monotonic() + 5.0
        while server.waiting == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.waiting == 1 and result == [] and server.sampled == []
        httpx.post(server.url.removesuffix("/v1") + "/wake_up")
        worker.join(timeout=5.0)
        assert [g.token_ids for g in result] == [(6, 7)] and server.waiting == 0


def test_a_continuation_against_a_sleeping_engine_runs_into_its_time_limit() -> None:
    trajectory, prompt, completion = record("a", "g", ["wait", "take", "wait", "wait"])
    with CompletionsServer() as server:
        server.sleep()
        engine = OpenAICompletionsEngine(server.url, "m", max_attempts=1)
        policy = EnginePolicy(
            engine, store_of([(trajectory, prompt, completion)]), render_observation=render, parse_action=parse,
            timeout_s=0.3,
        )  # fmt: skip
        context = PolicyContext(trajectory, trajectory.turns[:1], (1, False), {}, 7, policy_rng(7), 1)
        with pytest.raises(EngineTimeoutError, match=r"within 0\.3 s"):
            asyncio.run(policy.act(context))
        assert len(server.requests) == 1 and server.sampled == []


def test_a_bad_request_is_not_retried() -> None:
    with CompletionsServer(max_model_len=4) as server:
        engine = OpenAICompletionsEngine(server.url, "m", max_attempts=3, backoff_s=0.0)
        with pytest.raises(EngineHTTPError) as info:
            asyncio.run(engine.generate([1, 2, 3], SamplingParams(max_tokens=2)))
    assert info.value.status == 400 and len(server.requests) == 1
