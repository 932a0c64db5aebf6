"""SGLangEngine against a loopback server answering in SGLang 0.5.12's schema (tests/sglang_server.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from prover_core import ProverConfig
from prover_core.errors import EngineError
from prover_core.verify import continuation_seeds
from prover_engine import EnginePolicy, Generation, OpenAICompletionsEngine, SamplingParams, SGLangEngine
from prover_engine.errors import EngineHTTPError, EngineResponseError
from prover_engine.policy import action_seed
from tests.chat_server import Reply
from tests.engine_support import key_group, parse, render, store_of, verify_key_group
from tests.sglang_server import SGLangServer


def engine_of(server: SGLangServer, **kw: Any) -> SGLangEngine:
    return SGLangEngine(server.root, backoff_s=0.0, timeout_s=5.0, max_attempts=2, **kw)


def generate(engine: Any, ids: Any = (5, 9, 12), **params: Any) -> Generation:
    return asyncio.run(engine.generate(ids, SamplingParams(**params)))


def test_the_native_endpoint_gets_token_ids_and_the_complete_distribution_and_answers_ids() -> None:
    with SGLangServer() as server:
        g = generate(
            engine_of(server),
            [5, 9, 12],
            max_tokens=8,
            temperature=0.7,
            top_p=0.9,
            top_k=5,
            min_p=0.05,
            repetition_penalty=1.1,
            seed=1234,
            stop_token_ids=(99,),
            extra={"ignore_eos": False},
        )
    assert g == Generation((13, 14), text="<13><14>", logprobs=None, finish_reason="length")
    (body,) = server.requests
    assert body == {
        "input_ids": [5, 9, 12],
        "sampling_params": {
            "max_new_tokens": 8,
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 5,
            "min_p": 0.05,
            "repetition_penalty": 1.1,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "n": 1,
            "sampling_seed": 1234,
            "stop_token_ids": [99],
            "ignore_eos": False,
        },
        "stream": False,
        "return_logprob": False,
        "logprob_start_len": -1,
    }


def test_top_k_off_is_sglangs_minus_one_which_the_server_accepts_and_zero_it_refuses() -> None:
    with SGLangServer() as server:
        assert generate(engine_of(server), top_k=0).token_ids == (13, 14)
        assert server.sampled[0]["top_k"] == -1
        refused = httpx.post(server.root + "/generate", json={"input_ids": [1], "sampling_params": {"top_k": 0}})
    assert refused.status_code == 400
    assert refused.json() == {"error": {"message": "top_k must be -1 (disable) or at least 1, got 0."}}


def test_output_ids_run_through_the_stop_token_and_logprob_ids_must_match() -> None:
    eos = 2
    with SGLangServer(lambda ids, p: [40, eos, 41], eos_token_id=eos) as server:
        g = generate(engine_of(server, logprobs=True), max_tokens=8)
    assert (g.token_ids, g.text, g.finish_reason, g.logprobs) == ((40, eos), "<40>", "stop", (-0.25, -0.5))
    assert server.requests[0]["return_logprob"] is True
    bad = Reply(body={"text": "", "output_ids": [1, 2], "meta_info": {"output_token_logprobs": [[-0.1, 1, None]]}})
    with SGLangServer(faults=[bad]) as server, pytest.raises(EngineResponseError, match="disagree"):
        generate(engine_of(server))


def test_an_aborted_request_and_a_non_generate_answer_are_errors() -> None:
    aborted = {"finish_reason": {"type": "abort", "message": "x"}}
    abort = Reply(body={"text": "", "output_ids": [], "meta_info": aborted})
    with SGLangServer(faults=[abort]) as server, pytest.raises(EngineError, match="SGLang aborted the request: x"):
        generate(engine_of(server))
    choices = Reply(body={"choices": []})
    with SGLangServer(faults=[choices]) as server, pytest.raises(EngineResponseError, match="not a /generate answer"):
        generate(engine_of(server))


def test_a_context_past_the_context_length_is_sglangs_400_unless_clamped() -> None:
    with SGLangServer(context_len=5) as server:
        engine = engine_of(server)
        with pytest.raises(EngineHTTPError, match="exceeds the model's maximum context length of 5") as info:
            generate(engine, [1, 2, 3, 4], max_tokens=2)
        assert info.value.status == 400 and len(server.requests) == 1
        assert generate(engine, [1, 2, 3, 4], max_tokens=1).token_ids == (5,)


def test_openai_completions_engine_cannot_read_sglang_0_5_12_and_names_the_fix() -> None:
    """Item 2 of issue 19, before the fix: SGLang's /v1/completions answers no ids (text logprob tokens), and
    refuses vLLM's spelling of "no top-k" (0) with a 400."""
    with SGLangServer() as server:
        engine = OpenAICompletionsEngine(server.url, "m", backoff_s=0.0, max_attempts=1)
        with pytest.raises(EngineHTTPError, match="top_k must be -1"):
            generate(engine, top_k=0)
        for logprobs in (False, True):
            engine.logprobs = logprobs
            with pytest.raises(EngineResponseError, match=r"comes from SGLang.*use prover_engine\.SGLangEngine"):
                generate(engine, top_k=5)
    assert all("return_token_ids" in body for body in server.requests)


def test_the_root_not_v1_is_the_base_url() -> None:
    with pytest.raises(ValueError, match="server root"):
        SGLangEngine("http://127.0.0.1:30000/v1")
    assert repr(SGLangEngine("http://h:30000/")) == "SGLangEngine('http://h:30000/generate', max_concurrency=256)"
    with pytest.raises(ValueError, match="sampling_seed"):
        SGLangEngine("http://h:1").payload([1], SamplingParams(extra={"sampling_seed": 1}))


def seed_model(ids: list[int], params: dict[str, Any]) -> list[int]:
    """``take`` (51) iff the seed SGLang sampled with is odd; without one (no deterministic inference) ``wait``."""
    seed = params["sampling_seed"]
    return [50 + (seed % 2 if seed is not None else 0)]


@pytest.mark.parametrize("deterministic", [True, False])
def test_compute_bonus_over_sglang_credits_the_exact_delta_only_with_deterministic_inference(
    deterministic: bool,
) -> None:
    """Pre continuations from turn 1 succeed iff their first action is ``take``: iff ``action_seed`` is odd,
    when SGLang honours seeds (``--enable-deterministic-inference``); without it the seed never reaches the
    sampler (here: always ``wait``), so the pairing through seeds is gone."""
    config = ProverConfig(k=8, seed=3)
    rows = key_group("g", successes=2)
    pre_seeds, _ = continuation_seeds(config.stages.verify, rows[0][0])  # g-0, the representative success
    takes = sum(action_seed(s, 0) % 2 for s in pre_seeds) if deterministic else 0
    with SGLangServer(seed_model, deterministic=deterministic) as server:
        policy = EnginePolicy(
            engine_of(server), store_of(rows), render_observation=render, parse_action=parse,
            sampling=SamplingParams(max_tokens=1),
        )  # fmt: skip
        result = verify_key_group(rows, policy, config)
    (group,) = result.report.groups
    v = group.verification
    assert v is not None and (v.pre_successes, v.pre_count, v.post_successes, v.post_count) == (takes, 8, 8, 8)
    assert len(server.requests) == 8 * 3 + 8 * 2 and policy.stats.failures == 0
    first = {b["sampling_params"]["sampling_seed"] for b in server.requests if len(b["input_ids"]) == 6}
    assert first == {action_seed(s, 0) for s in pre_seeds}
