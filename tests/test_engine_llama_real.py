"""LlamaServerEngine against a real llama.cpp ``llama-server`` on 127.0.0.1 (not part of the default run).

``scripts/test-real-model`` starts the server (``scripts/build-llama-server``'s binary and SmolLM2-135M
GGUF), sets ``PROVER_LLAMA_URL`` and runs these tests. Without it they skip; ``PROVER_REQUIRE_LLM=1``
turns the skip into a failure. What the double in tests/llama_server.py leaves out is checked here on
the real server: that it takes every field the engine sends, its seeds, its end-of-generation tokens,
its post-sampling probabilities and its prompt cache under slot affinity.
"""

from __future__ import annotations

import asyncio
import math
import os
from typing import Any

import httpx
import pytest

from prover_engine import Generation, LlamaServerEngine, SamplingParams
from tests.conftest import skip

pytestmark = pytest.mark.real_llm

URL = os.environ.get("PROVER_LLAMA_URL", "")
if not URL:
    if os.environ.get("PROVER_REQUIRE_LLM") == "1":
        raise RuntimeError("PROVER_REQUIRE_LLM=1 but PROVER_LLAMA_URL is not set (run scripts/test-real-model)")
    skip("no llama-server: PROVER_LLAMA_URL is not set (scripts/test-real-model)", allow_module_level=True)

CHAT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nName one colour.<|im_end|>\n<|im_start|>assistant\n"
)


def tokenize(text: str) -> list[int]:
    return [int(t) for t in httpx.post(f"{URL}/tokenize", json={"content": text}, timeout=30).json()["tokens"]]


def end_of_turn() -> int:
    (token,) = tokenize("<|im_end|>")
    return token


def engine(**kw: Any) -> LlamaServerEngine:
    return LlamaServerEngine(URL, timeout_s=120.0, **kw)


def generate(e: LlamaServerEngine, ids: list[int], params: SamplingParams) -> Generation:
    return asyncio.run(e.generate(ids, params))


def test_the_server_takes_every_field_sent_and_keeps_none_of_its_defaults() -> None:
    body = engine(logprobs=True).payload(tokenize(CHAT), SamplingParams(max_tokens=4, seed=1))
    answer = httpx.post(f"{URL}/completion", json=body, timeout=120).json()
    settings = answer["generation_settings"]
    assert (settings["top_k"], settings["top_p"], settings["min_p"], settings["temperature"]) == (0, 1.0, 0.0, 1.0)
    assert settings["samplers"] == ["penalties", "temperature", "top_k", "top_p", "min_p"]
    assert settings["post_sampling_probs"] is True and settings["n_probs"] == 1
    assert answer["tokens"] == [p["id"] for p in answer["completion_probabilities"]]


def test_same_seed_same_tokens_also_under_concurrency() -> None:
    e = engine(slots=8)
    ids = tokenize(CHAT)

    async def main() -> list[Generation]:
        seeds = [7, 7, 8, 7, 9, 7]
        return list(await asyncio.gather(*(e.generate(ids, SamplingParams(max_tokens=8, seed=s)) for s in seeds)))

    gens = asyncio.run(main())
    sevens = {gens[i].token_ids for i in (0, 1, 3, 5)}
    assert len(sevens) == 1 and len(next(iter(sevens))) >= 1


def test_post_sampling_logprobs_are_of_the_truncated_distribution() -> None:
    e = engine(logprobs=True)
    ids = tokenize(CHAT)
    greedy = generate(e, ids, SamplingParams(max_tokens=4, top_k=1, seed=3))
    assert greedy.logprobs == (0.0,) * len(greedy.token_ids)  # one candidate left: probability 1
    full = generate(e, ids, SamplingParams(max_tokens=4, seed=3))
    assert full.logprobs is not None and all(-30 < x <= 0 and math.isfinite(x) for x in full.logprobs)
    # with top_k=5 the probability reported is the drawn token's under the top 5 renormalised, p_t / S, S the sum of
    # the five largest probabilities of the full distribution (asked of the server with top_k=0 and n_probs=5; the
    # first position's distribution depends on the prompt alone). Every seed's draw is checked: none is skipped.
    body = {**e.payload(ids, SamplingParams(max_tokens=1, seed=3)), "n_probs": 5}
    answer = httpx.post(f"{URL}/completion", json=body, timeout=120).json()
    top = {int(p["id"]): float(p["prob"]) for p in answer["completion_probabilities"][0]["top_probs"]}
    total = sum(top.values())
    assert len(top) == 5 and 0 < total < 1
    for seed in range(3, 11):
        drawn = generate(e, ids, SamplingParams(max_tokens=1, top_k=5, seed=seed))
        assert drawn.logprobs is not None and drawn.token_ids[0] in top, (seed, drawn.token_ids, sorted(top))
        assert drawn.logprobs[0] == pytest.approx(math.log(top[drawn.token_ids[0]] / total), abs=1e-4)
        assert drawn.logprobs[0] > math.log(top[drawn.token_ids[0]])  # more probable than in the full distribution


def test_the_end_of_turn_token_is_returned_only_when_generation_stopped_on_it() -> None:
    e = engine()
    eot = end_of_turn()
    gens = [generate(e, tokenize(CHAT), SamplingParams(max_tokens=24, seed=s)) for s in range(6)]
    for g in gens:
        if g.finish_reason == "stop":
            assert g.token_ids[-1] == eot and eot not in g.token_ids[:-1]
        else:
            assert g.finish_reason == "length" and len(g.token_ids) == 24 and eot not in g.token_ids
    assert any(g.finish_reason == "stop" for g in gens)


def test_stop_ids_cut_the_generation_and_a_shared_prefix_is_served_from_the_slot_cache() -> None:
    e = engine(slots=8)
    ids = tokenize(CHAT)
    full = generate(e, ids, SamplingParams(max_tokens=6, seed=5))
    cut = generate(e, ids, SamplingParams(max_tokens=6, seed=5, stop_token_ids=(full.token_ids[1],)))
    assert cut.token_ids == full.token_ids[: full.token_ids.index(full.token_ids[1]) + 1]
    before = e.stats.prompt_tokens_evaluated
    generate(e, [*ids, *full.token_ids], SamplingParams(max_tokens=2, seed=6))
    assert e.stats.prompt_tokens_evaluated - before <= len(full.token_ids) + 1  # only the new suffix
