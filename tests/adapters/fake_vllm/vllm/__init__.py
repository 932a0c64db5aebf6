"""A CPU stand-in for the few vLLM names OpenRLHF 0.11.2 uses, for tests only (vLLM needs CUDA).

Put ``tests/adapters/fake_vllm`` on ``sys.path`` and OpenRLHF's own ``openrlhf/trainer/ray/vllm_engine.py``
(``RolloutRayActor``, ``create_vllm_engines``, ``batch_vllm_engine_call``) and ``samples_generator.py``
import and run unchanged on top of it. What stands in for the GPU model is ``AsyncLLMEngine``:
``engine_args.model`` names a Python object ``"module:name"`` (a class is instantiated per engine), the
*model*, called as ``model(prompt_token_ids, sampling_params)`` (plain or ``async``) and returning the
token ids it samples. The engine applies ``max_tokens``, ``stop_token_ids``, the model's EOS
(``model.eos_token_id``, unless ``ignore_eos``) and ``max_model_len`` (a prompt longer than it is refused;
generation stops at it with ``finish_reason="length"``) as vLLM's engine does, sets ``finish_reason``,
decodes text with the model's ``decode(ids)`` if it has one. While asleep it QUEUES requests until
``wake_up`` has restored both the weights and the KV cache, as vLLM 0.29 does (``sleep`` pauses the
scheduler; new requests wait): a caller that forgets to wake the engine waits, it gets no error.
``SamplingParams`` has vLLM's field names and neutral defaults (an engine-level ``SamplingParams`` takes
none of the model's ``generation_config``).

Left out: real sampling (the model decides; temperature, top-p/k, min-p and penalties are recorded, not
applied), batching, prefix caching, logprobs, abort and the ``pause_generation`` modes.
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
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0
    ignore_eos: bool = False
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
        self.max_model_len = engine_args.kwargs.get("max_model_len")
        self.unfinished = 0
        self._woken: asyncio.Event | None = None
        self.output_processor = SimpleNamespace(get_num_unfinished_requests=lambda: self.unfinished)

    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs) -> AsyncLLMEngine:
        return cls(engine_args)

    async def is_sleeping(self) -> bool:
        return not self.awake

    async def sleep(self, level: int = 1) -> None:
        self.awake.clear()
        self._event().clear()

    async def wake_up(self, tags: list[str] | None = None) -> None:
        self.awake.update(tags or ["weights", "kv_cache"])
        if self.awake == {"weights", "kv_cache"}:
            self._event().set()

    def _event(self) -> asyncio.Event:
        if self._woken is None:
            self._woken = asyncio.Event()
            if self.awake == {"weights", "kv_cache"}:
                self._woken.set()
        return self._woken

    async def _until_awake(self) -> None:
        """vLLM's scheduler is paused while asleep: a request waits for ``wake_up``."""
        await self._event().wait()

    async def reset_prefix_cache(self) -> None:
        return None

    async def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        return [None]

    async def generate(self, prompt: dict[str, Any], sampling_params: SamplingParams, request_id: str) -> Any:
        ids = [int(i) for i in prompt["prompt_token_ids"]]
        if self.max_model_len is not None and len(ids) >= self.max_model_len:
            raise ValueError(
                f"The prompt (length {len(ids)}) is longer than the maximum model length of {self.max_model_len}"
            )
        self.unfinished += 1
        try:
            await self._until_awake()
            sampled = self.model(ids, sampling_params)
            if inspect.isawaitable(sampled):
                sampled = await sampled
            await asyncio.sleep(0)
        finally:
            self.unfinished -= 1
        tokens, finish = [], "length"
        limit = sampling_params.max_tokens if sampling_params.max_tokens is not None else len(sampled)
        if self.max_model_len is not None:
            limit = min(limit, self.max_model_len - len(ids))
        stops = set(sampling_params.stop_token_ids or ())
        eos = getattr(self.model, "eos_token_id", None)
        if eos is not None and not sampling_params.ignore_eos:
            stops.add(int(eos))
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
