"""The token engines over TRL's vLLM backends.

Server mode: TRL's real ``VLLMClient`` against a real HTTP server on 127.0.0.1 speaking vLLM's
``/v1/completions`` (``tests/adapters/vllm_loopback.py``), through ``prover_core.engine.EnginePolicy``.
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
from prover_core.engine import EnginePolicy, SamplingParams, TokenStore  # noqa: E402
from prover_core.engine.policy import action_seed  # noqa: E402
from prover_core.errors import EngineError, EngineTimeoutError  # noqa: E402
from prover_core.protocols import policy_rng  # noqa: E402
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
    params = SamplingParams(max_tokens=4, temperature=1.0, seed=7, stop_token_ids=(3,), extra={"top_k": 0})
    first = engine.generate(prompt, params)
    (request,) = server.requests
    assert request["prompt"] == [prompt] and request["n"] == 1 and request["seed"] == 7
    assert request["stop_token_ids"] == [3] and request["max_tokens"] == 4 and request["logprobs"] == 0
    assert 1 <= len(first.token_ids) <= 4 and first.logprobs is not None
    assert first.logprobs == pytest.approx(_reference_logprobs(server.model, prompt, list(first.token_ids)), abs=1e-5)
    assert engine.generate(prompt, params).token_ids == first.token_ids  # the seed makes the draw reproducible
    draws = {engine.generate(prompt, params.with_seed(s)).token_ids for s in range(8)}
    assert len(draws) > 1  # different seeds, different draws


def test_server_engine_refuses_a_server_that_re_tokenised_the_prompt(served: tuple[LoopbackVLLM, Any]) -> None:
    server, client = served
    server.mangle_prompts = True
    with pytest.raises(EngineError, match="exact prompt token ids"):
        VLLMServerEngine(client).generate([4, 5, 6], SamplingParams(max_tokens=2))


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
        render_observation=lambda obs: [9, 9],
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
    """``vllm.LLM``'s ``generate(prompts, sampling_params=list, use_tqdm=False)``, ``wake_up`` and ``sleep``."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[Any], list[Any]]] = []
        self.events: list[str] = []

    def generate(self, prompts: list[Any], sampling_params: list[Any], use_tqdm: bool) -> list[Any]:
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
        self.events.append(f"wake:{','.join(tags)}")

    def sleep(self, level: int) -> None:
        self.events.append(f"sleep:{level}")


@pytest.mark.parametrize("sleep_mode", [False, True])
def test_colocate_engine_batches_one_tick_with_a_seed_per_context(sleep_mode: bool) -> None:
    llm = _FakeLLM()
    synced: list[int] = []
    generation = SimpleNamespace(
        mode="colocate", tensor_parallel_size=1, llm=llm, enable_sleep_mode=sleep_mode, _llm_weights_sleeping=sleep_mode
    )
    generation.sync_weights = lambda: (synced.append(1), llm.events.append("sync"))
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
        assert llm.events == ["generate"] and not synced


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
        args=SimpleNamespace(vllm_tensor_parallel_size=tp, generation_kwargs={"seed_offset": 3}),
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
    fake._engine_policy = lambda engine: ProverGRPOTrainer._engine_policy(fake, engine)
    return fake


def test_the_default_policy_follows_the_trainer_backend() -> None:
    from prover_trl.trainer import ProverGRPOTrainer

    server = ProverGRPOTrainer._default_policy(_fake_trainer(True, "server", 4, main=True))
    assert isinstance(server, EnginePolicy) and isinstance(server.engine, VLLMServerEngine)
    assert server.max_concurrency == 7
    assert server.sampling == SamplingParams(
        max_tokens=12,
        temperature=0.7,
        top_p=0.9,
        extra={"top_k": 5, "min_p": 0.0, "repetition_penalty": 1.0, "seed_offset": 3},
    )
    assert ProverGRPOTrainer._default_policy(_fake_trainer(True, "server", 4, main=False)) is None  # no client there
    colocate = ProverGRPOTrainer._default_policy(_fake_trainer(True, "colocate", 4, main=False))
    assert isinstance(colocate, EnginePolicy) and isinstance(colocate.engine, VLLMColocateEngine)
    for refused in (_fake_trainer(True, "colocate", 4, True, tp=2), _fake_trainer(False, "", 2, True, fsdp=True)):
        with pytest.raises(NotImplementedError, match="collective"):
            ProverGRPOTrainer._default_policy(refused)
    one = _fake_trainer(False, "", 1, True, fsdp=True)  # a single process never generates collectively
    one.prover.policy_options = {}
    assert type(ProverGRPOTrainer._default_policy(one)).__name__ == "TrainerPolicy"
