"""LlamaServerEngine against a llama-server-shaped double (tests/llama_server.py: what it leaves out is there).

The double's model is exact (``tiny_logits``), so every logprob the engine reads is recomputed here
independently from the logits and the sampler chain worked out by hand.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from prover_core.errors import EngineError
from prover_engine import EnginePolicy, Generation, LlamaServerEngine, SamplingParams
from prover_engine.errors import EngineHTTPError, EngineResponseError
from prover_engine.llama import NEUTRAL, SAMPLER_CHAIN, LlamaCompletion, SlotRouter, slot_changed
from prover_engine.openai import OpenAICompletionsEngine
from tests.chat_server import Reply
from tests.llama_server import EOG, LlamaServer, tiny_logits, tiny_logprobs

PROMPT = [5, 9, 14, 3]


def engine_of(server: LlamaServer, **kw: Any) -> LlamaServerEngine:
    return LlamaServerEngine(server.url, backoff_s=0.0, timeout_s=5.0, max_attempts=3, **kw)


def run(engine: LlamaServerEngine, prompt: list[int], params: SamplingParams) -> Generation:
    return asyncio.run(engine.generate(prompt, params))


# -- the request -----------------------------------------------------------------------------------


def test_every_sampling_field_is_sent_and_the_chain_is_the_modelled_one() -> None:
    engine = LlamaServerEngine("http://127.0.0.1:1", logprobs=True, repeat_last_n=32)
    params = SamplingParams(
        max_tokens=7,
        temperature=0.7,
        top_p=0.9,
        top_k=0,
        min_p=0.02,
        repetition_penalty=1.1,
        presence_penalty=0.3,
        frequency_penalty=0.2,
        seed=11,
    )
    body = engine.payload([4, 5], params)
    assert body == {
        "prompt": [4, 5],
        "n_predict": 7,
        "temperature": 0.7,
        "top_k": 0,
        "top_p": 0.9,
        "min_p": 0.02,
        "repeat_penalty": 1.1,
        "presence_penalty": 0.3,
        "frequency_penalty": 0.2,
        "repeat_last_n": 32,
        "typical_p": 1.0,
        "dry_multiplier": 0.0,
        "xtc_probability": 0.0,
        "top_n_sigma": -1.0,
        "dynatemp_range": 0.0,
        "mirostat": 0,
        "min_keep": 0,
        "samplers": ["penalties", "temperature", "top_k", "top_p", "min_p"],
        "return_tokens": True,
        "cache_prompt": True,
        "stream": False,
        "seed": 11,
        "n_probs": 1,
        "post_sampling_probs": True,
    }
    assert tuple(body["samplers"]) == SAMPLER_CHAIN and set(NEUTRAL) <= set(body)


def test_extra_may_pin_a_slot_but_not_override_the_distribution() -> None:
    engine = LlamaServerEngine("http://127.0.0.1:1")
    assert engine.payload([1], SamplingParams(extra={"id_slot": 3}))["id_slot"] == 3
    with pytest.raises(ValueError, match=r"may not set \['top_k'\]"):
        engine.payload([1], SamplingParams(extra={"top_k": 40}))
    with pytest.raises(ValueError, match="repeat_last_n must be >= 0"):
        LlamaServerEngine("http://127.0.0.1:1", repeat_last_n=-1)


# -- answers read exactly --------------------------------------------------------------------------


def test_logprobs_are_those_of_the_plain_softmax_when_nothing_is_truncated() -> None:
    with LlamaServer() as server:
        gen = run(engine_of(server, logprobs=True), PROMPT, SamplingParams(max_tokens=6, seed=3))
    assert gen.logprobs is not None and len(gen.token_ids) == len(gen.logprobs) >= 1
    np.testing.assert_allclose(gen.logprobs, tiny_logprobs(PROMPT, gen.token_ids), rtol=0, atol=1e-9)
    assert server.answers[0]["tokens"] == list(gen.token_ids)


def test_logprobs_are_under_the_truncated_distribution_the_engine_drew_from() -> None:
    """top_k=3 at T=0.5: log p = z_y/T - logsumexp of the 3 largest z/T, not the full softmax."""
    params = SamplingParams(max_tokens=4, temperature=0.5, top_k=3, seed=8)
    with LlamaServer() as server:
        gen = run(engine_of(server, logprobs=True), PROMPT, params)
    assert gen.logprobs is not None
    context = list(PROMPT)
    for token, logprob in zip(gen.token_ids, gen.logprobs, strict=True):
        z = tiny_logits(context) / 0.5
        top = np.sort(z)[-3:]
        assert z[token] >= top[0]
        assert logprob == pytest.approx(z[token] - np.logaddexp.reduce(top), abs=1e-9)
        assert logprob > tiny_logprobs(context, [token], temperature=0.5)[0]
        context.append(token)


def test_same_seed_same_tokens_and_another_seed_other_tokens() -> None:
    with LlamaServer() as server:
        engine = engine_of(server)
        runs = [run(engine, PROMPT, SamplingParams(max_tokens=8, seed=s)).token_ids for s in (4, 4, 5)]
    assert runs[0] == runs[1] != runs[2]


def test_finish_reasons_and_the_end_of_generation_token_is_kept_only_when_it_stopped() -> None:
    with LlamaServer() as server:
        engine = engine_of(server)
        gens = [run(engine, PROMPT, SamplingParams(max_tokens=40, seed=s)) for s in range(40)]
    stopped = [g for g in gens if g.finish_reason == "stop"]
    limited = [g for g in gens if g.finish_reason == "length"]
    assert stopped and limited
    assert all(g.token_ids[-1] == EOG and EOG not in g.token_ids[:-1] for g in stopped)
    assert all(len(g.token_ids) == 40 and EOG not in g.token_ids for g in limited)


def test_other_stop_ids_cut_the_generation_after_the_first_one() -> None:
    with LlamaServer() as server:
        engine = engine_of(server, logprobs=True)
        full = run(engine, PROMPT, SamplingParams(max_tokens=12, seed=1))
        stop = full.token_ids[3]
        cut = run(engine, PROMPT, SamplingParams(max_tokens=12, seed=1, stop_token_ids=(stop,)))
    k = full.token_ids.index(stop) + 1
    assert cut.token_ids == full.token_ids[:k] and cut.finish_reason == "stop" and cut.text is None
    assert cut.logprobs == (full.logprobs or ())[:k]


def test_prompt_tokens_evaluated_and_cached_are_counted_from_the_timings() -> None:
    with LlamaServer(slots=1) as server:
        engine = engine_of(server)
        first = run(engine, PROMPT, SamplingParams(max_tokens=2, seed=1))
        run(engine, [*PROMPT, *first.token_ids, 7], SamplingParams(max_tokens=2, seed=2))
    n = len(PROMPT)
    assert engine.stats.prompt_tokens == n + n + 3
    assert engine.stats.prompt_tokens_evaluated == n + 1  # the second prompt extends the cached first + its output
    assert engine.stats.prompt_tokens_cached == n + 2
    assert engine.stats.generated_tokens == 4


# -- failures --------------------------------------------------------------------------------------


def test_loading_503_is_retried_and_a_bad_request_raises_with_its_status() -> None:
    loading = Reply(status=503, body={"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
    with LlamaServer(faults=[loading, loading]) as server:
        engine = engine_of(server)
        gen = run(engine, PROMPT, SamplingParams(max_tokens=2, seed=1))
        assert len(gen.token_ids) == 2 and engine.stats.retries == 2
        with pytest.raises(EngineHTTPError, match="Invalid token in prompt") as info:
            run(engine, [10_000], SamplingParams(max_tokens=2))
    assert info.value.status == 400


def test_an_answer_without_ids_or_with_mismatched_probabilities_is_refused() -> None:
    no_ids = Reply(body={"content": "hi", "tokens": [], "tokens_predicted": 2, "stop_type": "limit"})
    not_llama = Reply(body={"choices": [{"text": "hi"}]})
    mismatch = Reply(
        body={
            "tokens": [4, 5],
            "stop_type": "limit",
            "completion_probabilities": [{"id": 4, "prob": 0.5}, {"id": 6, "prob": 0.5}],
        }
    )
    with LlamaServer(faults=[no_ids, not_llama, mismatch]) as server:
        engine = engine_of(server, logprobs=True)
        with pytest.raises(EngineResponseError, match="returned no ids"):
            run(engine, PROMPT, SamplingParams(max_tokens=2))
        with pytest.raises(EngineResponseError, match="not a llama-server completion"):
            run(engine, PROMPT, SamplingParams(max_tokens=2))
        with pytest.raises(EngineResponseError, match="do not match the tokens"):
            run(engine, PROMPT, SamplingParams(max_tokens=2))
    with pytest.raises(EngineError, match="empty prompt"):
        run(engine, [], SamplingParams())


def test_a_token_left_out_of_the_probabilities_gives_no_logprobs_rather_than_an_error() -> None:
    """llama-server adds no probability entry for a token that ends inside a UTF-8 character (part of an
    emoji): ids [4, 6] of tokens [4, 5, 6] is that, and the generation comes back without logprobs."""
    split = Reply(
        body={
            "content": "ab",
            "tokens": [4, 5, 6],
            "stop_type": "limit",
            "completion_probabilities": [{"id": 4, "prob": 0.5}, {"id": 6, "prob": 0.25}],
        }
    )
    with LlamaServer(faults=[split]) as server:
        gen = run(engine_of(server, logprobs=True), PROMPT, SamplingParams(max_tokens=3))
    assert gen.token_ids == (4, 5, 6) and gen.logprobs is None and gen.text == "ab"


def test_an_answer_whose_slot_ended_holding_other_tokens_is_counted() -> None:
    """tokens_cached must be prompt + output - 1 (the last sampled token is never evaluated): 7 + 3 - 1 = 9."""

    def answer(cached: int) -> Reply:
        body = {"tokens": [4, 5, 6], "stop_type": "limit", "tokens_evaluated": 7, "tokens_predicted": 3}
        return Reply(body={**body, "tokens_cached": cached})

    with LlamaServer(faults=[answer(9), answer(182), answer(8)]) as server:
        engine = engine_of(server)
        for _ in range(3):
            run(engine, PROMPT, SamplingParams(max_tokens=3))
        assert engine.stats.slot_changed == 2
        run(engine, PROMPT, SamplingParams(max_tokens=3))  # the double's own answer: consistent
    assert engine.stats.slot_changed == 2
    assert slot_changed(LlamaCompletion(tokens=[], tokens_cached=5, tokens_evaluated=7, tokens_predicted=0)) is False


# -- slot affinity ---------------------------------------------------------------------------------


def test_router_keeps_prefixes_shared_beyond_the_common_one_on_one_slot_and_spreads_the_rest() -> None:
    router = SlotRouter(3)
    system = [1, 2, 3]
    a = router.acquire([*system, 10, 11])
    b = router.acquire([*system, 20, 21])  # shares only the system prompt, common to all: the idle slot
    assert (a, b) == (0, 1) and router.common == tuple(system)
    assert router.acquire([*system, 10, 11, 12]) == a  # a's context extended: a's slot, though busy
    assert router.acquire([*system, 20, 5]) == b  # shares one token beyond the system prompt with b
    assert router.acquire([*system, 30]) == 2  # nothing beyond the system prompt: the least busy slot
    router.release(b)
    router.release(b)
    assert router.acquire([9, 9]) == b  # the common prefix is now empty; b is the least busy
    assert router.busy == [2, 1, 1] and router.common == ()


def test_continuations_sharing_a_prefix_are_pinned_to_one_slot_and_evaluate_only_their_suffix() -> None:
    prefixes = [[7] * 30 + [1], [8] * 30 + [2]]
    with LlamaServer(slots=2) as server:
        engine = engine_of(server, slots=2)

        async def main() -> list[Generation]:
            calls = [engine.generate(p, SamplingParams(max_tokens=2, seed=s)) for s in range(4) for p in prefixes]
            return list(await asyncio.gather(*calls))

        asyncio.run(main())
    slots = {tuple(b["prompt"]): set() for b in server.requests}
    for body in server.requests:
        slots[tuple(body["prompt"])].add(body["id_slot"])
    assert [len(s) for s in slots.values()] == [1, 1] and slots[tuple(prefixes[0])] != slots[tuple(prefixes[1])]
    # each prefix is evaluated once in full; the three repeats re-evaluate only the last token
    assert engine.stats.prompt_tokens_evaluated == 2 * 31 + 6 * 1


class BusySlots(LlamaServer):
    """The double, counting requests that arrive naming a slot busy with another request (llama-server
    11434 then swaps a cached prompt into that slot's KV cache under the request in flight)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.pinned_busy = 0

    def answer(self, body: dict[str, Any]) -> Reply:
        slot = body.get("id_slot", -1)
        with self._cond:
            self.pinned_busy += isinstance(slot, int) and slot >= 0 and self.busy[slot % self.slots]
        return super().answer(body)


def test_no_request_is_sent_to_a_slot_while_one_of_the_engines_runs_there() -> None:
    """Eight routed requests over two slots and four the caller pins to slot 1 itself, all at once."""
    with BusySlots(slots=2) as server:
        engine = engine_of(server, slots=2)

        async def main() -> None:
            routed = [engine.generate([7] * 30 + [s % 2], SamplingParams(max_tokens=2, seed=s)) for s in range(8)]
            own = [
                engine.generate(PROMPT, SamplingParams(max_tokens=2, seed=s, extra={"id_slot": 1})) for s in range(4)
            ]
            await asyncio.gather(*routed, *own)

        asyncio.run(main())
    assert len(server.answers) == 12 and server.pinned_busy == 0
    assert sorted(b["id_slot"] for b in server.requests) == [0] * 4 + [1] * 8


def test_requests_pinned_to_one_slot_run_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the HTTP call replaced by one that yields to the event loop, the router puts two of the six
    requests on each slot and the most in flight on a slot at once is 1 (without the per-slot wait, 2:
    each call yields before any finishes)."""
    in_flight: dict[int, int] = {}
    most: dict[int, int] = {}

    async def call(self: Any, prompt_ids: Any, params: SamplingParams) -> Generation:
        slot = int(str(params.extra["id_slot"]))
        in_flight[slot] = in_flight.get(slot, 0) + 1
        most[slot] = max(most.get(slot, 0), in_flight[slot])
        for _ in range(3):
            await asyncio.sleep(0)
        in_flight[slot] -= 1
        return Generation((4,))

    monkeypatch.setattr(OpenAICompletionsEngine, "generate", call)
    engine = LlamaServerEngine("http://127.0.0.1:1", slots=3)

    async def main() -> None:
        prompts = [[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3], [9, 9], [8, 8]]
        await asyncio.gather(*(engine.generate(p, SamplingParams(max_tokens=1)) for p in prompts))

    asyncio.run(main())
    assert most == {0: 1, 1: 1, 2: 1} and engine.router is not None and engine.router.busy == [0, 0, 0]
    asyncio.run(main())  # a second event loop gets locks of its own
    assert most == {0: 1, 1: 1, 2: 1}


# -- through EnginePolicy --------------------------------------------------------------------------


def test_engine_policy_sends_each_continuation_its_exact_context() -> None:
    from prover_core import ProverConfig, ReplayEnv, Segment
    from prover_core.continuations import env_continuer
    from prover_core.verify import verify_segment
    from tests.engine_support import KeyEnv, key_group, parse, render, store_of

    rows = key_group("g", successes=1, size=2)
    store = store_of(rows)
    with LlamaServer() as server:
        engine = engine_of(server, slots=2)
        policy = EnginePolicy(
            engine, store, render_observation=render, parse_action=parse, sampling=SamplingParams(max_tokens=1)
        )
        config = ProverConfig(k=3, seed=5)
        continuer = env_continuer(ReplayEnv(lambda: KeyEnv(horizon=4)), policy, config.max_continuation_turns)
        trajectory = rows[0][0]
        asyncio.run(
            verify_segment(
                trajectory, Segment(trajectory_id=trajectory.id, start=1, end=1), continuer, config.stages.verify
            )
        )
    prompt, completion = rows[0][1], rows[0][2]
    before = {tuple(prompt + completion[:2]), tuple(prompt + completion[:4])}  # contexts before turns 1 and 2
    extended = {tuple(p + out) for p, out in server.exchanges}
    firsts = 0
    for sent, _ in server.exchanges:
        if tuple(sent) in before:
            firsts += 1
        else:  # a later action: an earlier context + its generated ids + one rendered observation
            assert tuple(sent[:-1]) in extended and 100 <= sent[-1] < 140
    assert firsts == 2 * config.k  # K pre and K post continuations start from the recorded rows
