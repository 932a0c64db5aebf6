"""A :class:`~prover_engine.TokenEngine` over SGLang's native ``/generate`` endpoint (token ids in and out).

SGLang 0.5.12's ``/v1/completions`` returns no token ids (``CompletionResponseChoice`` has no
``token_ids``; ``CompletionRequest`` no ``return_token_ids``; its logprob tokens are text), so
:class:`~prover_engine.OpenAICompletionsEngine` cannot read it. The native endpoint can: each call
POSTs (``GenerateReqInput`` in ``sglang/srt/managers/io_struct.py``)::

    {"input_ids": ids, "stream": false, "return_logprob": <logprobs>, "logprob_start_len": -1,
     "sampling_params": {"max_new_tokens", "temperature", "top_p", "top_k" (-1: off), "min_p",
                         "repetition_penalty", "presence_penalty", "frequency_penalty",
                         "sampling_seed" (when set), "stop_token_ids" (when set), **SamplingParams.extra}}

and reads ``{"text", "output_ids", "meta_info": {"finish_reason": {"type": "stop"|"length"|"abort", ...},
"output_token_logprobs": [[logprob, id, text], ...]}}`` (``tokenizer_manager.py``): ``output_ids`` are
the sampled ids through the stop token (``Req.output_ids_through_stop``), never re-tokenised; with
``logprobs=True`` the ids inside ``output_token_logprobs`` must equal them.

Seeds: SGLang reads ``sampling_seed`` only when the server runs with ``--enable-deterministic-inference``
(``SamplingBatchInfo.from_schedule_batch``); otherwise every request samples with fresh randomness, so
pre and post continuations are not paired action by action (``Delta`` stays unbiased, its variance is
that of unpaired draws). Launch SGLang with that flag for common random numbers.

An answer whose ``finish_reason`` is ``abort`` (a request aborted by the server, e.g. around a weight
update) raises :class:`~prover_core.errors.EngineError`; statuses, retries, timeouts, concurrency and
the API key (SGLang's ``--api-key``, sent as a bearer token) are handled as by
:class:`~prover_engine.OpenAICompletionsEngine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from prover_core.errors import EngineError
from prover_core.redaction import refuse_url_credentials
from prover_engine.errors import EngineResponseError
from prover_engine.openai import TOKEN_ID_LIMIT, OpenAICompletionsEngine, TokenId, check_logprob
from prover_engine.protocol import Generation, SamplingParams

__all__ = ["SGLangEngine"]

_LAX = ConfigDict(extra="ignore")
_SAMPLING = frozenset({"max_new_tokens", "sampling_seed", "stop_token_ids", "n", *SamplingParams().distribution()})


def _token_id(value: Any) -> int:
    """``value`` if it is an ``int`` in ``[0, 2**31)`` (not a bool, nor a float such as ``1.5``); else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < TOKEN_ID_LIMIT:
        raise ValueError("not a token id")
    return value


def _number(value: Any) -> float:
    """``value`` as a float if it is a JSON number (not a bool or a string); OverflowError past a float's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("not a number")
    return float(value)


class _Meta(BaseModel):
    model_config = _LAX
    finish_reason: dict[str, Any] | None = None
    output_token_logprobs: list[list[Any]] | None = None


class GenerateResponse(BaseModel):
    """The parts of SGLang's ``/generate`` answer (one request, not streamed) that the engine reads."""

    model_config = _LAX
    text: str | None = None
    output_ids: list[TokenId]
    meta_info: _Meta = Field(default_factory=_Meta)

    def generation(self) -> Generation:
        reason = self.meta_info.finish_reason or {}
        kind = reason.get("type")
        if kind == "abort":
            raise EngineError(f"SGLang aborted the request: {reason.get('message', 'no message')}")
        logprobs = None
        entries = self.meta_info.output_token_logprobs
        if entries is not None:
            try:
                ids = [_token_id(entry[1]) for entry in entries]
                values = [check_logprob(_number(entry[0])) for entry in entries]
            except (IndexError, TypeError, ValueError, OverflowError):
                raise EngineResponseError(
                    "SGLang's output_token_logprobs are not [logprob (<= 0, not NaN), id (an int in [0, 2**31)), text] "
                    f"entries: {repr(entries[:3])[:200]}"
                ) from None
            if ids != self.output_ids:
                raise EngineResponseError(
                    f"SGLang's output_ids {self.output_ids[:8]} disagree with its logprob ids {ids[:8]}"
                )
            logprobs = tuple(values)
        finish = str(kind) if kind is not None else None
        return Generation(tuple(self.output_ids), text=self.text, logprobs=logprobs, finish_reason=finish)


class SGLangEngine(OpenAICompletionsEngine):
    """Continues token contexts on an SGLang server's native ``/generate`` (see the module docstring).

    ``base_url`` is the server's root (``http://host:30000``, not ``.../v1``); the other settings are
    :class:`OpenAICompletionsEngine`'s (``logprobs=True`` asks for ``output_token_logprobs``).
    """

    def __init__(self, base_url: str, **settings: Any) -> None:
        root = refuse_url_credentials(base_url).rstrip("/")  # before the message below shows the URL
        if root.endswith("/v1"):
            raise ValueError(f"SGLangEngine speaks to the server root (the native /generate), got {base_url!r}")
        super().__init__(root, "sglang", **settings)
        self.endpoint = root + "/generate"

    def __repr__(self) -> str:
        return f"SGLangEngine({self.endpoint!r}, max_concurrency={self.max_concurrency})"

    def payload(self, prompt_ids: Sequence[int], params: SamplingParams) -> dict[str, Any]:
        """The JSON body of one ``/generate`` request (``SamplingParams.extra`` goes into ``sampling_params``)."""
        clash = _SAMPLING.intersection(params.extra)
        if clash:
            raise ValueError(f"SamplingParams.extra may not set {sorted(clash)}: the engine sets them")
        sampling: dict[str, Any] = {"max_new_tokens": params.max_tokens, **params.distribution(), "n": 1}
        if params.top_k == 0:
            sampling["top_k"] = -1  # SGLang's "off"
        if params.seed is not None:
            sampling["sampling_seed"] = int(params.seed)
        if params.stop_token_ids:
            sampling["stop_token_ids"] = [int(i) for i in params.stop_token_ids]
        sampling.update(params.extra)
        return {
            "input_ids": [int(i) for i in prompt_ids],
            "sampling_params": sampling,
            "stream": False,
            "return_logprob": self.logprobs,
            "logprob_start_len": -1,
        }

    def _read(self, response: httpx.Response) -> Generation:
        if response.status_code >= 300:
            return super()._read(response)  # raises: retried statuses and HTTP errors as the base engine
        try:
            return self._answer(response, GenerateResponse, "a /generate answer").generation()
        except EngineError as exc:  # SGLang's abort message comes from the server: scrub it
            raise type(exc)(self._redact(str(exc))) from None
