"""The token engines over TRL's vLLM backends.

Server mode: TRL's real ``VLLMClient`` against a real HTTP server on 127.0.0.1 speaking vLLM's
``/v1/completions`` (``tests/adapters/vllm_loopback.py``), through ``prover_engine.EnginePolicy``.
Colocate mode: ``vllm.LLM`` needs a GPU build of vllm, so the engine is driven with a stand-in that has
``LLM.generate``'s signature and returns ``RequestOutput``-shaped objects (what it checks: batching,
one seeded ``SamplingParams`` per context, the wake/sleep order of TRL's sleep mode, logprob extraction).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.hosts import require_host

trl = require_host("trl")
require_host("requests")

import torch  # noqa: E402

from examples.trl_toy import tiny_causal_lm, word_tokenizer  # noqa: E402
from prover_core import PolicyContext, Trajectory, Turn  # noqa: E402
from prover_core.errors import EngineError  # noqa: E402
from prover_core.protocols import policy_rng  # noqa: E402
from prover_engine import EnginePolicy, SamplingParams, TokenStore  # noqa: E402
from prover_engine.errors import EngineTimeoutError  # noqa: E402
from prover_engine.policy import action_seed  # noqa: E402
from prover_trl.engines import VLLMColocateEngine, VLLMServerEngine  # noqa: E402
from tests.adapters.vllm_loopback import LoopbackVLLM, client_for  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return word_tokenizer()


@pytest.fixture(scope="module")
def served(tokenizer: Any) -> Iterator[tuple[LoopbackVLLM, Any]]:
    with LoopbackVLLM(tiny_causal_lm(tokenizer, seed=0), eos_token_id=tokenizer.eos_token_id) as server:
        yield server, client_for(server.url)


@pytest.fixture(autouse=True)
def _reset(served: tuple[LoopbackVLLM, Any]) -> None:
    server, _ = served
    server.requests.clear()
    server.fail_next, server.delay_s, server.mangle_prompts = False, 0.0, False
    server.generation_config, server.max_in_flight = {}, 0


def _reference_logprobs(model: Any, prompt: list[int], tokens: list[int]) -> list[float]:
    """log p(token_i | prompt + tokens[:i]) by one forward pass (temperature 1)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    logps = torch.log_softmax(logits, dim=-1)
    return [float(logps[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


def test_server_engine_sends_the_exact_ids_and_seed_and_returns_real_logprobs(
    served: tuple[LoopbackVLLM, Any], tokenizer: Any
) -> None:
    server, client = served
    engine = VLLMServerEngine(client)
    prompt = tokenizer.encode("enter hall door", add_special_tokens=False)
    params = SamplingParams(max_tokens=4, temperature=1.0, seed=7, stop_token_ids=(3,))
    first = engine.generate_blocking(prompt, params)
    (request,) = server.requests
    assert request["prompt"] == [prompt] and request["n"] == 1 and request["seed"] == 7
    assert request["stop_token_ids"] == [3] and request["max_tokens"] == 4 and request["logprobs"] == 0
    assert {k: request[k] for k in params.distribution()} == params.distribution()  # the complete distribution
    assert 1 <= len(first.token_ids) <= 4 and first.logprobs is not None
    assert first.logprobs == pytest.approx(_reference_logprobs(server.model, prompt, list(first.token_ids)), abs=1e-5)
    assert engine.generate_blocking(prompt, params).token_ids == first.token_ids  # the seed: reproducible draws
    draws = {engine.generate_blocking(prompt, params.with_seed(s)).token_ids for s in range(8)}
    assert len(draws) > 1  # different seeds, different draws


def test_server_defaults_never_replace_the_rollouts_distribution(
    served: tuple[LoopbackVLLM, Any], tokenizer: Any
) -> None:
    """vLLM fills fields a request leaves out from the model's generation_config (here top_k=1: greedy).
    The engine sends every field, so the rollout's top_k=0 holds and seeds still give different draws."""
    server, client = served
    server.generation_config = {"top_k": 1}
    engine = VLLMServerEngine(client)
    prompt = tokenizer.encode("enter hall door", add_special_tokens=False)
    draws = {engine.generate_blocking(prompt, SamplingParams(max_tokens=4, seed=s)).token_ids for s in range(8)}
    assert len(draws) > 1 and all(r["top_k"] == 0 for r in server.requests)
    server.requests.clear()
    body = {"prompt": [prompt], "max_tokens": 4, "return_token_ids": True, "return_tokens_as_token_ids": True}
    without = {  # a request that leaves top_k out samples with the server's default: one greedy draw
        tuple(
            client.session.post(f"{server.url}/v1/completions", json={**body, "seed": s}).json()["choices"][0][
                "token_ids"
            ]
        )
        for s in range(4)
    }
    assert len(without) == 1


def test_server_engine_keeps_max_concurrency_requests_in_flight(served: tuple[LoopbackVLLM, Any]) -> None:
    """asyncio's default executor (``min(32, cpu_count + 4)`` threads) would cap the requests in flight;
    the engine's own pool keeps ``max_concurrency`` of them at the server."""
    server, client = served
    server.hold_until = 40  # each request waits until 40 are in flight (at most hold_s): none finishes early
    policy = EnginePolicy(
        VLLMServerEngine(client, max_workers=40), TokenStore(), render_observation=list, max_concurrency=40
    )

    async def run() -> None:
        await asyncio.gather(*(policy.generate([4, 5, i % 7 + 4], SamplingParams(max_tokens=1)) for i in range(40)))

    try:
        asyncio.run(run())
    finally:
        server.hold_until = 0  # the server is the module's
    assert server.max_in_flight == 40 > min(32, (os.cpu_count() or 1) + 4)


def test_server_engine_refuses_a_server_that_re_tokenised_the_prompt(served: tuple[LoopbackVLLM, Any]) -> None:
    server, client = served
    server.mangle_prompts = True
    with pytest.raises(EngineError, match="exact prompt token ids"):
        VLLMServerEngine(client).generate_blocking([4, 5, 6], SamplingParams(max_tokens=2))


def _lucky(tokens: TokenStore) -> Trajectory:
    turns = tuple(
        Turn(observation=o, action=a, token_span=span)
        for o, a, span in [("hall", "go", (0, 2)), ("door", "push", (3, 5)), ("open", "end", (6, 7))]
    )
    t = Trajectory(id="t0", group_id="g", reset={}, turns=turns, success=True)
    tokens.add(t, [4, 5], [6, 7, 8, 9, 10, 11, 12])
    return t


def _context(obs: str, history: list[Turn], trajectory: Trajectory, seed: int, boundary: int) -> PolicyContext:
    return PolicyContext(
        trajectory=trajectory,
        history=tuple(history),
        observation=obs,
        info={},
        seed=seed,
        rng=policy_rng(seed),
        boundary=boundary,
    )


def test_engine_policy_over_the_server_continues_token_exactly_with_paired_seeds(
    served: tuple[LoopbackVLLM, Any], tokenizer: Any
) -> None:
    server, client = served
    tokens = TokenStore()
    trajectory = _lucky(tokens)
    policy = EnginePolicy(
        VLLMServerEngine(client),
        tokens,
        # the recorded observations render to the row's own ids (EnginePolicy checks the record); new ones to [9, 9]
        render_observation=lambda obs: {"door": [8], "open": [11]}.get(obs, [9, 9]),
        parse_action=lambda g: list(g.token_ids),
        sampling=SamplingParams(max_tokens=2),
        max_concurrency=4,
    )

    async def continuation(boundary: int, seed: int) -> list[list[int]]:
        history = list(trajectory.turns[:boundary])
        first = await policy.act(_context("x", history, trajectory, seed, boundary))
        history.append(Turn(observation="x", action=first))
        second = await policy.act(_context("y", history, trajectory, seed, boundary))
        return [first, second]

    async def both() -> list[list[list[int]]]:
        return await asyncio.gather(continuation(1, 11), continuation(2, 11))

    pre, post = asyncio.run(both())
    by_prompt = {tuple(r["prompt"][0]): r for r in server.requests}
    assert len(by_prompt) == 4
    recorded = [4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert tuple(recorded[:5]) in by_prompt  # s_1: prompt + completion[:3]
    assert tuple(recorded[:8]) in by_prompt  # s_2: prompt + completion[:6]
    assert tuple(recorded[:5] + pre[0] + [9, 9]) in by_prompt  # generated ids + rendered observation
    assert tuple(recorded[:8] + post[0] + [9, 9]) in by_prompt
    assert by_prompt[tuple(recorded[:5])]["seed"] == by_prompt[tuple(recorded[:8])]["seed"] == action_seed(11, 0)
    assert by_prompt[tuple(recorded[:5] + pre[0] + [9, 9])]["seed"] == action_seed(11, 1)
    assert policy.stats.calls == 4 and policy.stats.generated_tokens == sum(map(len, pre + post))


def test_server_faults_are_typed_engine_errors(served: tuple[LoopbackVLLM, Any]) -> None:
    server, client = served
    tokens = TokenStore()
    policy = EnginePolicy(VLLMServerEngine(client), tokens, render_observation=lambda o: [], timeout_s=0.3)
    server.fail_next = True
    with pytest.raises(EngineError, match="400"):
        asyncio.run(policy.generate([4, 5], SamplingParams(max_tokens=2)))
    server.delay_s = 1.0
    with pytest.raises(EngineTimeoutError):
        asyncio.run(policy.generate([4, 5], SamplingParams(max_tokens=2)))
    assert policy.stats.failures == 2


# -- colocate ---------------------------------------------------------------------------------------------------
class _Logprob(SimpleNamespace):
    pass


class _FakeLLM:
    """``vllm.LLM``'s ``generate(prompts, sampling_params=list, use_tqdm=False)``, ``wake_up`` and ``sleep``.

    vLLM 0.29 pauses its scheduler while asleep and queues new requests until ``wake_up``; ``LLM.generate``
    (synchronous) would wait for ever. Here that raises :class:`_WouldHang` instead of hanging the test.
    Left out: real sampling (outputs are a function of the prompt and seed), EOS, ``max_model_len``.
    """

    def __init__(self, asleep: bool = False) -> None:
        self.calls: list[tuple[list[Any], list[Any]]] = []
        self.events: list[str] = []
        self.awake: set[str] = set() if asleep else {"weights", "kv_cache"}

    def generate(self, prompts: list[Any], sampling_params: list[Any], use_tqdm: bool) -> list[Any]:
        if self.awake != {"weights", "kv_cache"}:
            raise _WouldHang(f"LLM.generate on a sleeping engine (awake: {sorted(self.awake)}) never returns")
        self.events.append("generate")
        self.calls.append((prompts, sampling_params))
        out = []
        for p, sp in zip(prompts, sampling_params, strict=True):
            ids = [p["prompt_token_ids"][-1] + 1, sp.seed % 7]
            lps = [
                {t: _Logprob(logprob=-0.5 * (k + 1), rank=1), 99: _Logprob(logprob=-9.0, rank=2)}
                for k, t in enumerate(ids)
            ]
            sample = SimpleNamespace(token_ids=ids, logprobs=lps, text="x", finish_reason="length")
            out.append(SimpleNamespace(outputs=[sample]))
        return out

    def wake_up(self, tags: list[str]) -> None:
        self.awake.update(tags)
        self.events.append(f"wake:{','.join(tags)}")

    def sleep(self, level: int) -> None:
        self.awake.clear()
        self.events.append(f"sleep:{level}")


class _WouldHang(RuntimeError):
    pass


def _colocated(llm: _FakeLLM, sleep_mode: bool) -> Any:
    """TRL's ``VLLMGeneration`` as the engine uses it: ``sync_weights`` wakes the weights and pushes them."""
    generation = SimpleNamespace(
        mode="colocate", tensor_parallel_size=1, llm=llm, enable_sleep_mode=sleep_mode, _llm_weights_sleeping=sleep_mode
    )

    def sync_weights() -> None:
        llm.wake_up(["weights"])
        llm.events[-1] = "sync"
        generation._llm_weights_sleeping = False

    generation.sync_weights = sync_weights
    return generation


@pytest.mark.parametrize("sleep_mode", [False, True])
def test_colocate_engine_batches_one_tick_with_a_seed_per_context(sleep_mode: bool) -> None:
    llm = _FakeLLM(asleep=sleep_mode)
    generation = _colocated(llm, sleep_mode)
    engine = VLLMColocateEngine(generation, sampling_class=SimpleNamespace)

    async def run() -> list[Any]:
        return await asyncio.gather(
            *(engine.generate([10, i], SamplingParams(max_tokens=2, seed=100 + i)) for i in range(3))
        )

    results = asyncio.run(run())
    assert engine.batches == 1 and len(llm.calls) == 1
    prompts, params = llm.calls[0]
    assert prompts == [{"prompt_token_ids": [10, i]} for i in range(3)]
    assert [p.seed for p in params] == [100, 101, 102] and all(p.n == 1 and p.logprobs == 0 for p in params)
    assert [r.token_ids for r in results] == [(i + 1, (100 + i) % 7) for i in range(3)]
    assert all(r.logprobs == (-0.5, -1.0) for r in results)  # the sampled token's logprob, not the top-ranked other
    if sleep_mode:
        assert llm.events == ["sync", "wake:kv_cache", "generate", "sleep:2"] and generation._llm_weights_sleeping
    else:
        assert llm.events == ["generate"] and engine.weight_syncs == 0


def test_colocate_session_pushes_the_weights_once_for_all_batches_of_a_verification() -> None:
    """Without a session every flush of continuation calls re-streams all weights (sleep level 2 drops them)."""
    llm = _FakeLLM(asleep=True)
    generation = _colocated(llm, True)
    engine = VLLMColocateEngine(generation, sampling_class=SimpleNamespace)

    async def three_batches() -> None:
        for j in range(3):  # one action after another: three event-loop ticks, three batches
            await engine.generate([10, j], SamplingParams(max_tokens=2, seed=j))

    asyncio.run(three_batches())
    assert engine.weight_syncs == 3 and llm.events.count("sync") == 3
    llm.events.clear()
    with engine.session():
        asyncio.run(three_batches())
        assert llm.awake == {"weights", "kv_cache"}
    assert engine.batches == 6 and engine.weight_syncs == 4
    assert llm.events == ["sync", "wake:kv_cache", "generate", "generate", "generate", "sleep:2"]
    assert generation._llm_weights_sleeping and not llm.awake


def test_the_colocate_double_would_hang_on_a_sleeping_engine() -> None:
    """What the adapter must avoid: generating on the asleep engine without waking it first."""
    llm = _FakeLLM(asleep=True)
    with pytest.raises(_WouldHang):
        llm.generate([{"prompt_token_ids": [1]}], [SimpleNamespace(seed=1)], use_tqdm=False)


def test_trainer_sampling_reads_the_trainer_and_its_generation_kwargs_in_one_place() -> None:
    from prover_trl.engines import trainer_sampling

    trainer = SimpleNamespace(
        temperature=0.8,
        top_p=0.9,
        top_k=None,
        min_p=None,
        repetition_penalty=1.1,
        max_completion_length=12,
        args=SimpleNamespace(generation_kwargs=None),
    )
    assert trainer_sampling(trainer) == SamplingParams(
        max_tokens=12, temperature=0.8, top_p=0.9, top_k=0, min_p=0.0, repetition_penalty=1.1
    )
    trainer.args.generation_kwargs = {"top_k": -1, "presence_penalty": 0.5, "seed": 3, "max_tokens": 20, "x": 1}
    assert trainer_sampling(trainer) == SamplingParams(
        max_tokens=20, temperature=0.8, top_p=0.9, repetition_penalty=1.1, presence_penalty=0.5, extra={"x": 1}
    )
    assert trainer_sampling(trainer, max_tokens=5).max_tokens == 5


def test_ddp_timeout_note() -> None:
    from prover_trl.trainer import ddp_timeout_note

    assert ddp_timeout_note(1000.0, 1800, 2, "main") is not None and "ddp_timeout=1800" in str(
        ddp_timeout_note(1000.0, 1800, 2, "main")
    )
    assert ddp_timeout_note(800.0, 1800, 2, "main") is None  # within half of it
    assert ddp_timeout_note(5000.0, 1800, 1, "main") is None  # nobody waits


def test_colocate_engine_refuses_tensor_parallelism() -> None:
    with pytest.raises(ValueError, match="tensor parallelism"):
        VLLMColocateEngine(SimpleNamespace(mode="colocate", tensor_parallel_size=2, llm=None))


# -- which policy the trainer builds for which backend ------------------------------------------------------------
def _fake_trainer(use_vllm: bool, mode: str, processes: int, main: bool, tp: int = 1, fsdp: bool = False) -> Any:
    from prover_trl.trainer import ProverGRPOTrainer, ProverSetup

    tokenizer = word_tokenizer()
    fake = SimpleNamespace(
        use_vllm=use_vllm,
        vllm_mode=mode,
        is_fsdp_enabled=fsdp,
        accelerator=SimpleNamespace(num_processes=processes, is_main_process=main, state=SimpleNamespace()),
        args=SimpleNamespace(
            vllm_tensor_parallel_size=tp, generation_kwargs={"seed_offset": 3}, vllm_max_model_length=64
        ),
        vllm_generation=SimpleNamespace(
            mode=mode, tensor_parallel_size=tp, vllm_client=SimpleNamespace(generate=print)
        ),
        prover=ProverSetup(policy_options={"max_concurrency": 7}),
        prover_verify_on="main" if mode == "server" else "owner",
        processing_class=tokenizer,
        temperature=0.7,
        top_p=0.9,
        top_k=5,
        min_p=None,
        repetition_penalty=1.0,
        max_completion_length=12,
    )
    fake._engine_policy = lambda engine, **kw: ProverGRPOTrainer._engine_policy(fake, engine, **kw)
    fake._policy_options = lambda: ProverGRPOTrainer._policy_options(fake)
    return fake


def test_the_default_policy_follows_the_trainer_backend() -> None:
    from prover_trl.trainer import ProverGRPOTrainer

    server = ProverGRPOTrainer._default_policy(_fake_trainer(True, "server", 4, main=True))
    assert isinstance(server, EnginePolicy) and isinstance(server.engine, VLLMServerEngine)
    assert server.max_concurrency == 7
    assert server.sampling == SamplingParams(
        max_tokens=12, temperature=0.7, top_p=0.9, top_k=5, min_p=0.0, repetition_penalty=1.0, extra={"seed_offset": 3}
    )
    assert server.engine.max_workers == 7
    assert ProverGRPOTrainer._default_policy(_fake_trainer(True, "server", 4, main=False)) is None  # no client there
    colocate = ProverGRPOTrainer._default_policy(_fake_trainer(True, "colocate", 4, main=False))
    assert isinstance(colocate, EnginePolicy) and isinstance(colocate.engine, VLLMColocateEngine)
    # colocated vLLM's context limit clamps continuations (server mode: the server's own, not known here)
    assert colocate.max_model_len == 64 and server.max_model_len is None
    for refused in (_fake_trainer(True, "colocate", 4, True, tp=2), _fake_trainer(False, "", 2, True, fsdp=True)):
        with pytest.raises(NotImplementedError, match="collective"):
            ProverGRPOTrainer._default_policy(refused)
    one = _fake_trainer(False, "", 1, True, fsdp=True)  # a single process never generates collectively
    one.prover.policy_options = {}
    assert type(ProverGRPOTrainer._default_policy(one)).__name__ == "TrainerPolicy"
