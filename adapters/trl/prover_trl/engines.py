"""Token engines over TRL's own vLLM backends, for :class:`prover_core.engine.EnginePolicy`.

* :class:`VLLMServerEngine`: vLLM server mode. Calls TRL's ``VLLMClient.generate`` with the token
  ids of the context (``/v1/completions`` with ``prompt`` = ids; the server never re-tokenises) and
  the continuation's seed. Only the main process holds the client, so the trainer runs the whole
  verification there (see :mod:`prover_trl.trainer`). The client is synchronous; ``EnginePolicy``
  runs its calls in threads, so up to ``max_concurrency`` requests are in flight and the server
  batches them.
* :class:`VLLMColocateEngine`: colocate mode. Each process's ``trainer.vllm_generation.llm`` (a
  ``vllm.LLM`` sharing the training GPU) generates the actions requested in one event-loop tick as
  one ``LLM.generate`` call, one ``SamplingParams`` (with its own seed) per context, waking the engine
  as TRL's ``VLLMGeneration.generate`` does when sleep mode is on.

Both return the sampled tokens' log-probabilities. vllm is imported only when a colocate call runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from prover_core.engine import Generation, SamplingParams
from prover_core.errors import EngineError

_NAMED = ("top_k", "min_p", "repetition_penalty")
"""Sampling fields ``VLLMClient.generate`` takes as named arguments; the rest go in ``generation_kwargs``."""


def trainer_sampling(trainer: Any, max_tokens: int | None = None) -> SamplingParams:
    """The trainer's own sampling settings (temperature, top-p/k, min-p, repetition penalty,
    ``generation_kwargs``) as :class:`~prover_core.engine.SamplingParams`; ``max_tokens`` defaults to
    ``max_completion_length`` (the rollout's per-action limit)."""
    extra: dict[str, object] = {
        "top_k": int(trainer.top_k or 0),
        "min_p": float(trainer.min_p or 0.0),
        "repetition_penalty": float(trainer.repetition_penalty),
    }
    extra.update(getattr(trainer.args, "generation_kwargs", None) or {})
    return SamplingParams(
        max_tokens=int(max_tokens or trainer.max_completion_length),
        temperature=float(trainer.temperature),
        top_p=float(trainer.top_p),
        extra=extra,
    )


def _sampled_logprobs(rows: Any) -> tuple[float, ...] | None:
    if rows is None:
        return None
    return tuple(float("nan") if r[0] is None else float(r[0]) for r in rows)


class VLLMServerEngine:
    """:class:`~prover_core.engine.TokenEngine` over TRL's ``VLLMClient`` (``trainer.vllm_generation.vllm_client``).

    One request per action, ``n=1``, the continuation's seed and stop tokens in ``generation_kwargs``
    (vLLM's request fields). The server's echo of the prompt ids is checked: a server that
    re-tokenised the context raises :class:`~prover_core.errors.EngineError`.
    """

    def __init__(self, client: Any) -> None:
        if not callable(getattr(client, "generate", None)):
            raise TypeError(f"client must be a trl VLLMClient, got {type(client).__name__}")
        self.client = client

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        ids = [int(i) for i in prompt_ids]
        extra = dict(params.extra)
        named = {k: extra.pop(k) for k in _NAMED if k in extra}
        if params.seed is not None:
            extra["seed"] = params.seed
        if params.stop_token_ids:
            extra["stop_token_ids"] = list(params.stop_token_ids)
        out = self.client.generate(
            prompts=[ids],
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            logprobs=0,
            generation_kwargs=extra,
            **named,
        )
        if [list(map(int, p)) for p in out["prompt_ids"]] != [ids]:
            raise EngineError("the vLLM server did not generate from the exact prompt token ids it was sent")
        (completion,) = out["completion_ids"]
        logprobs = out.get("logprobs")
        return Generation(
            token_ids=tuple(int(t) for t in completion),
            logprobs=None if logprobs is None else _sampled_logprobs(logprobs[0]),
        )


def _vllm_sampling_class() -> Callable[..., Any]:
    from vllm import SamplingParams as VLLMSamplingParams  # only installed on GPU machines

    return VLLMSamplingParams  # type: ignore[no-any-return]


class VLLMColocateEngine:
    """:class:`~prover_core.engine.TokenEngine` over the trainer's colocated ``vllm.LLM``.

    ``generation`` is ``trainer.vllm_generation`` (TRL's ``VLLMGeneration`` in colocate mode, tensor
    parallel size 1). Concurrent ``generate`` calls of one event-loop tick become one
    ``llm.generate`` batch; each context keeps its own ``SamplingParams`` and seed.
    ``sampling_class`` builds vLLM's ``SamplingParams`` (default: ``vllm.SamplingParams``).
    """

    def __init__(self, generation: Any, *, sampling_class: Callable[..., Any] | None = None) -> None:
        if getattr(generation, "mode", "colocate") != "colocate":
            raise ValueError("VLLMColocateEngine needs TRL's VLLMGeneration in colocate mode")
        if int(getattr(generation, "tensor_parallel_size", 1)) != 1:
            raise ValueError(
                "VLLMColocateEngine: with tensor parallelism every rank of the group must generate together"
            )
        self.generation = generation
        self.sampling_class = sampling_class
        self.batches = 0
        self._pending: list[tuple[list[int], SamplingParams, asyncio.Future[Generation]]] = []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Generation] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append(([int(i) for i in prompt_ids], params, future))
        return await future

    def _vllm_params(self, params: SamplingParams) -> Any:
        make = self.sampling_class or _vllm_sampling_class()
        fields: dict[str, Any] = {
            "n": 1,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "logprobs": 0,
            "seed": params.seed,
            **params.extra,
        }
        if params.stop_token_ids:
            fields["stop_token_ids"] = list(params.stop_token_ids)
        return make(**fields)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        try:
            outputs = self._run([ids for ids, _, _ in pending], [self._vllm_params(p) for _, p, _ in pending])
            if len(outputs) != len(pending):
                raise EngineError(f"vLLM returned {len(outputs)} outputs for {len(pending)} prompts")
            results = [_colocate_generation(o) for o in outputs]
        except Exception as exc:
            for _, _, future in pending:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, _, future), result in zip(pending, results, strict=True):
            if not future.done():
                future.set_result(result)

    def _run(self, prompts: list[list[int]], params: list[Any]) -> list[Any]:
        """One ``llm.generate`` call, woken and put back to sleep like TRL's ``VLLMGeneration.generate``."""
        vg = self.generation
        sleep = bool(getattr(vg, "enable_sleep_mode", False))
        if sleep and getattr(vg, "_llm_weights_sleeping", False):
            vg.sync_weights()  # sleep level 2 dropped the weights: push the current ones
        if sleep:
            vg.llm.wake_up(tags=["kv_cache"])
        try:
            self.batches += 1
            inputs = [{"prompt_token_ids": ids} for ids in prompts]
            return list(vg.llm.generate(inputs, sampling_params=params, use_tqdm=False))
        finally:
            if sleep:
                vg.llm.sleep(level=2)
                vg._llm_weights_sleeping = True


def _colocate_generation(output: Any) -> Generation:
    """A ``vllm.RequestOutput`` (one sample) as a :class:`Generation` with the sampled tokens' logprobs."""
    sample = output.outputs[0]
    ids = tuple(int(t) for t in sample.token_ids)
    logprobs = None
    if sample.logprobs is not None:
        logprobs = tuple(float(position[token].logprob) for token, position in zip(ids, sample.logprobs, strict=True))
    return Generation(token_ids=ids, text=sample.text, logprobs=logprobs, finish_reason=sample.finish_reason)
