"""Token engines over TRL's own vLLM backends, for :class:`prover_engine.EnginePolicy`.

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
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from prover_core.hosts import EngineError
from prover_engine import Generation, SamplingParams

DISTRIBUTION = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
)
"""The :class:`~prover_engine.SamplingParams` fields that shape the distribution (vLLM's names)."""

_CLIENT_NAMED = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
"""Fields ``VLLMClient.generate`` takes as named arguments; the penalties go in ``generation_kwargs``."""


def trainer_sampling(trainer: Any, max_tokens: int | None = None) -> SamplingParams:
    """The rollout's sampling, read in ONE place from the trainer, as :class:`~prover_engine.SamplingParams`.

    TRL's ``VLLMGeneration.generate`` samples with the trainer's ``temperature``, ``top_p``, ``top_k``,
    ``min_p`` (``None``: 0), ``repetition_penalty`` and ``max_completion_length``, then lets
    ``args.generation_kwargs`` override any of them. The same here: a distribution field or ``max_tokens``
    in ``generation_kwargs`` wins; other keys pass through in ``extra`` (``seed`` is dropped: continuations
    seed every action themselves); a negative ``top_k`` (vLLM's old "off") is 0. ``max_tokens``
    (``max_action_tokens``) wins over all.
    """
    kwargs = dict(getattr(trainer.args, "generation_kwargs", None) or {})
    fields: dict[str, Any] = {
        "temperature": float(trainer.temperature),
        "top_p": float(trainer.top_p),
        "top_k": int(trainer.top_k or 0),
        "min_p": float(trainer.min_p or 0.0),
        "repetition_penalty": float(trainer.repetition_penalty),
    }
    for name in DISTRIBUTION:
        if name in kwargs:
            fields[name] = kwargs.pop(name)
    fields["top_k"] = max(int(fields["top_k"] or 0), 0)
    length = kwargs.pop("max_tokens", None) or trainer.max_completion_length
    kwargs.pop("seed", None)
    kwargs.pop("n", None)
    return SamplingParams(max_tokens=int(max_tokens or length), extra=kwargs, **fields)


def _sampled_logprobs(rows: Any) -> tuple[float, ...] | None:
    if rows is None:
        return None
    return tuple(float("nan") if r[0] is None else float(r[0]) for r in rows)


class VLLMServerEngine:
    """:class:`~prover_engine.TokenEngine` over TRL's ``VLLMClient`` (``trainer.vllm_generation.vllm_client``).

    One request per action, ``n=1``, the complete sampling distribution, the continuation's seed and
    stop tokens. The server's echo of the prompt ids is checked: a server that re-tokenised the context
    raises :class:`~prover_core.errors.EngineError`.

    The client is blocking; ``generate`` runs it on this engine's own ``max_workers`` threads. (Run in
    asyncio's default executor instead, at most ``min(32, cpu_count + 4)`` requests would be in flight
    whatever ``EnginePolicy.max_concurrency`` says.) The client's connection pool keeps 64 connections
    (``_DEFAULT_GENERATION_CONCURRENCY``); more requests in flight open extra connections that are not reused.
    """

    def __init__(self, client: Any, *, max_workers: int = 64) -> None:
        if not callable(getattr(client, "generate", None)):
            raise TypeError(f"client must be a trl VLLMClient, got {type(client).__name__}")
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.client = client
        self.max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="prover-vllm-client")
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.generate_blocking, prompt_ids, params)

    def generate_blocking(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        """One ``VLLMClient.generate`` call (blocking)."""
        ids = [int(i) for i in prompt_ids]
        distribution = params.distribution()
        named = {k: distribution.pop(k) for k in _CLIENT_NAMED}
        extra: dict[str, Any] = {**params.extra, **distribution}  # the penalties: request fields of vLLM's server
        if params.seed is not None:
            extra["seed"] = params.seed
        if params.stop_token_ids:
            extra["stop_token_ids"] = list(params.stop_token_ids)
        out = self.client.generate(
            prompts=[ids], n=1, max_tokens=params.max_tokens, logprobs=0, generation_kwargs=extra, **named
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
    """:class:`~prover_engine.TokenEngine` over the trainer's colocated ``vllm.LLM``.

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
        self.weight_syncs = 0
        self._awake = False
        self._in_session = False
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
            **params.extra,
            **params.distribution(),  # vLLM's SamplingParams: top_k 0 is "off" as TRL sends it
            "n": 1,
            "max_tokens": params.max_tokens,
            "logprobs": 0,
            "seed": params.seed,
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

    @contextmanager
    def session(self) -> Iterator[None]:
        """One verification: with sleep mode, the engine is woken (weights pushed) at most once inside and
        put back to sleep once at the end, not around every batch. The training weights do not change while
        continuations run (before the optimizer step), so one push is enough."""
        self._in_session = True
        try:
            yield
        finally:
            self._in_session = False
            self._sleep_if_awake()

    def _sleep_if_awake(self) -> None:
        if self._awake:
            self._awake = False
            self.generation.llm.sleep(level=2)
            self.generation._llm_weights_sleeping = True

    def _run(self, prompts: list[list[int]], params: list[Any]) -> list[Any]:
        """One ``llm.generate`` call, woken and put back to sleep like TRL's ``VLLMGeneration.generate``
        (inside :meth:`session`: woken once, put to sleep when the session ends)."""
        vg = self.generation
        if bool(getattr(vg, "enable_sleep_mode", False)) and not self._awake:
            if getattr(vg, "_llm_weights_sleeping", False):
                vg.sync_weights()  # sleep level 2 dropped the weights: push the current ones
                self.weight_syncs += 1
            vg.llm.wake_up(tags=["kv_cache"])
            self._awake = True
        try:
            self.batches += 1
            inputs = [{"prompt_token_ids": ids} for ids in prompts]
            return list(vg.llm.generate(inputs, sampling_params=params, use_tqdm=False))
        finally:
            if not self._in_session:
                self._sleep_if_awake()


def _colocate_generation(output: Any) -> Generation:
    """A ``vllm.RequestOutput`` (one sample) as a :class:`Generation` with the sampled tokens' logprobs."""
    sample = output.outputs[0]
    ids = tuple(int(t) for t in sample.token_ids)
    logprobs = None
    if sample.logprobs is not None:
        logprobs = tuple(float(position[token].logprob) for token, position in zip(ids, sample.logprobs, strict=True))
    return Generation(token_ids=ids, text=sample.text, logprobs=logprobs, finish_reason=sample.finish_reason)
