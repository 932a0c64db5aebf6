"""A CPU stand-in for the few vLLM names OpenRLHF 0.11.2 uses, for tests only (vLLM needs CUDA).

Put ``tests/adapters/fake_vllm`` on ``sys.path`` and OpenRLHF's own ``openrlhf/trainer/ray/vllm_engine.py``
(``RolloutRayActor``, ``create_vllm_engines``, ``batch_vllm_engine_call``) and ``samples_generator.py``
import and run unchanged on top of it. What stands in for the GPU model is ``AsyncLLMEngine``:
``engine_args.model`` names a Python object ``"module:name"`` (a class is instantiated per engine), the
*model*, called as ``model(prompt_token_ids, sampling_params)`` (plain or ``async``) and returning the
token ids it samples. The engine applies ``max_tokens`` and ``stop_token_ids`` as vLLM does, sets
``finish_reason``, decodes text with the model's ``decode(ids)`` if it has one, and refuses to generate
while asleep (``sleep`` / ``wake_up(tags=[...])`` track the weights and the KV cache separately).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from vllm.outputs import CompletionOutput, RequestOutput

__version__ = "0.11.0"  # what OpenRLHF checks (> 0.8.5)

__all__ = ["AsyncEngineArgs", "AsyncLLMEngine", "CompletionOutput", "RequestOutput", "SamplingParams"]


@dataclass
class SamplingParams:
    """vLLM's field names and defaults for the fields OpenRLHF and prover_openrlhf set."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_tokens: int = 0
    max_tokens: int | None = 16
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False


class AsyncEngineArgs:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs
        self.model = kwargs.get("model")


def _resolve(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class AsyncLLMEngine:
    """The engine ``RolloutRayActor`` drives (``self.llm``)."""

    def __init__(self, engine_args: AsyncEngineArgs) -> None:
        self.engine_args = engine_args
        model = _resolve(str(engine_args.model))
        self.model = model() if isinstance(model, type) else model  # a class: one model per engine
        self.awake = {"weights", "kv_cache"}
        self.unfinished = 0
        self.output_processor = SimpleNamespace(get_num_unfinished_requests=lambda: self.unfinished)

    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs) -> AsyncLLMEngine:
        return cls(engine_args)

    async def is_sleeping(self) -> bool:
        return not self.awake

    async def sleep(self, level: int = 1) -> None:
        self.awake.clear()

    async def wake_up(self, tags: list[str] | None = None) -> None:
        self.awake.update(tags or ["weights", "kv_cache"])

    async def reset_prefix_cache(self) -> None:
        return None

    async def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        return [None]

    async def generate(self, prompt: dict[str, Any], sampling_params: SamplingParams, request_id: str) -> Any:
        if self.awake != {"weights", "kv_cache"}:
            raise RuntimeError(f"vLLM engine is sleeping (awake: {sorted(self.awake)}); call wake_up first")
        ids = [int(i) for i in prompt["prompt_token_ids"]]
        self.unfinished += 1
        try:
            sampled = self.model(ids, sampling_params)
            if inspect.isawaitable(sampled):
                sampled = await sampled
            await asyncio.sleep(0)
        finally:
            self.unfinished -= 1
        tokens, finish = [], "length"
        limit = sampling_params.max_tokens if sampling_params.max_tokens is not None else len(sampled)
        stops = set(sampling_params.stop_token_ids or ())
        for t in sampled:
            if len(tokens) == limit:
                break
            tokens.append(int(t))
            if t in stops:
                finish = "stop"
                break
        else:
            finish = "stop" if len(tokens) < limit else "length"
        decode = getattr(self.model, "decode", None)
        text = decode(tokens) if decode is not None else ""
        yield RequestOutput(
            request_id=request_id,
            prompt_token_ids=ids,
            outputs=[CompletionOutput(index=0, text=text, token_ids=tokens, finish_reason=finish)],
            finished=True,
        )

    async def pause_generation(self, mode: str = "keep") -> None:
        return None

    async def resume_generation(self) -> None:
        return None
