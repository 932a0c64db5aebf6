"""A :class:`~prover_engine.TokenEngine` over an OpenAI-compatible ``/v1/completions`` endpoint.

Token ids in, token ids out, for servers that take a list of ids as ``prompt`` and return the sampled
ids (vLLM; not SGLang 0.5.12, whose ``/v1/completions`` returns none: use
:class:`~prover_engine.sglang.SGLangEngine` there). Each
call POSTs ``{"model", "prompt": ids, "max_tokens", "seed", "stop_token_ids", "n": 1, "stream": false,
"return_token_ids": true}`` and every field of ``SamplingParams.distribution()`` (temperature, top_p,
top_k, min_p, repetition/presence/frequency penalties: nothing is left to the server's defaults), then
``SamplingParams.extra``; with ``logprobs=True`` also ``"logprobs": 0, "return_tokens_as_token_ids":
true``. The generated ids are read back exactly, never re-tokenised from text:

* ``choices[0].token_ids``: vLLM >= 0.10.2 (``CompletionRequest.return_token_ids`` and
  ``CompletionResponseChoice.token_ids`` in ``vllm/entrypoints/openai/completion/protocol.py``). SGLang
  0.5.12 has neither field (its choices carry ``matched_stop`` instead); later SGLang sources add them;
  an SGLang answer without ids is refused with an error that names ``SGLangEngine``;
* else ``choices[0].logprobs.tokens`` written as ``"token_id:N"``: vLLM with ``logprobs`` and
  ``return_tokens_as_token_ids`` ("tokens are represented as strings of the form 'token_id:{token_id}'",
  same file), the way to read ids from a vLLM older than 0.10.2 (which ignores ``return_token_ids``).

Anything else (not JSON, no choices, no ids, ids that are not non-negative integers, the two lists
disagreeing) raises :class:`~prover_engine.errors.EngineResponseError`.

Failures, per request (the policy is :class:`~prover_core.connections.RetryPolicy`, shared with the LLM judge):
status 429, 502, 503, 504 and connection errors (refused, reset, dropped before the answer) are retried, up to
``max_attempts`` attempts in all; between attempts it sleeps the server's ``Retry-After`` when given, else
``backoff_s * 2**(n-1)`` plus jitter in ``[0, backoff_s)``, either capped at ``max_wait_s``. Every other status
raises :class:`~prover_engine.errors.EngineHTTPError` at once (its ``status`` says which); an exhausted retryable
status raises it too. An attempt that runs past ``timeout_s`` raises :class:`~prover_engine.errors.EngineTimeoutError`
and is not retried (the server may still be generating it). An answer longer than ``max_answer_bytes``, or than
64 KiB plus 1 KiB per token of the prompt and of ``max_tokens`` (:meth:`OpenAICompletionsEngine.answer_cap`), is not
read further: :class:`~prover_engine.errors.EngineAnswerTooLargeError`.

Secrets (:mod:`~prover_core.redaction`): the API key is read from the environment variable ``api_key_env``
(surrounding whitespace stripped, a non-printable character refused) and sent as a bearer token; it, the values of
``headers`` and ``proxy`` never appear in a repr or an error message, in any form (raw, escaped, percent-encoded).
A ``base_url`` with credentials is refused. The environment's proxy variables are ignored; ``proxy`` names one.
Server values are range-checked: token ids are non-negative integers, a logprob is not NaN or above 0.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import httpx
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from tenacity import RetryCallState

from prover_core.connections import (
    MAX_ANSWER_BYTES,
    AnswerTooLarge,
    LoopPool,
    LoopPools,
    Retryable,
    RetryPolicy,
    parse_retry_after,
    read_capped,
)
from prover_core.errors import EngineError
from prover_core.hosts import finite_arguments
from prover_core.redaction import read_key, refuse_url_credentials
from prover_engine.errors import EngineAnswerTooLargeError, EngineHTTPError, EngineResponseError, EngineTimeoutError
from prover_engine.protocol import Generation, SamplingParams

__all__ = ["TOKEN_ID_LIMIT", "EngineCallStats", "LogProb", "OpenAICompletionsEngine", "TokenId", "check_logprob"]

_RETRY_STATUSES = frozenset({429, 502, 503, 504})
_ANSWER_BASE_BYTES = 64 * 1024
_ANSWER_TOKEN_BYTES = 1024
"""An answer may take ``_ANSWER_BASE_BYTES + _ANSWER_TOKEN_BYTES`` per token of prompt and ``max_tokens`` (at most
``max_answer_bytes``): :meth:`OpenAICompletionsEngine.answer_cap`."""
_RESERVED = frozenset(
    {"model", "prompt", "n", "stream", "max_tokens", "seed", "stop_token_ids", *SamplingParams().distribution()}
    | {"return_token_ids", "logprobs", "return_tokens_as_token_ids"}
)
_TOKEN_ID = re.compile(r"token_id:(\d+)")
TOKEN_ID_LIMIT = 2**31
"""Token ids are below ``2**31``: llama.cpp's ``llama_token`` is an ``int32_t``, and vLLM's and SGLang's ids are
int32 tensors; an id past it (a server's ``10**40``) is refused before it reaches a tokenizer."""
_LAX = ConfigDict(extra="ignore")
Answer = TypeVar("Answer", bound=BaseModel)
TokenId = Annotated[int, Field(strict=True, ge=0, lt=TOKEN_ID_LIMIT)]
"""A token id in a server's answer: an ``int`` in ``[0, 2**31)`` (a bool, float or string is refused)."""


def check_logprob(value: float) -> float:
    """``value`` if it is a log-probability (``<= 0``, ``-inf`` included); else :class:`ValueError`."""
    if math.isnan(value) or value > 0.0:
        raise ValueError(f"a logprob must be a number <= 0, got {value}")
    return value


LogProb = Annotated[float, AfterValidator(check_logprob)]
"""A log-probability: ``<= 0`` (``-inf`` allowed: probability 0), never NaN."""


class CompletionLogprobs(BaseModel):
    model_config = _LAX
    tokens: list[str] | None = None
    token_logprobs: list[LogProb | None] | None = None


class CompletionChoice(BaseModel):
    model_config = _LAX
    text: str | None = None
    token_ids: list[TokenId] | None = None
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    matched_stop: int | str | None = None  # SGLang's field (vLLM's is stop_reason): tells the servers apart

    def generation(self) -> Generation:
        """The sampled ids (``token_ids``, else ``"token_id:N"`` logprob tokens) and their logprobs."""
        from_logprobs = _ids_in_logprob_tokens(self.logprobs)
        if self.token_ids is not None:
            ids = self.token_ids
            if from_logprobs is not None and from_logprobs != ids:
                raise EngineResponseError(
                    f"the completion's token_ids {ids[:8]} disagree with its logprob tokens {from_logprobs[:8]}"
                )
        elif from_logprobs is not None:
            ids = from_logprobs
        elif "matched_stop" in self.model_fields_set:
            raise EngineResponseError(
                "the completion has no token ids and comes from SGLang, whose /v1/completions (0.5.12) does not "
                "answer `return_token_ids` and writes logprob tokens as text: use "
                "prover_engine.SGLangEngine (SGLang's native /generate, token ids in and out)"
            )
        else:
            raise EngineResponseError(
                "the completion has no token ids: the server must answer `return_token_ids` (vLLM >= 0.10.2) "
                "or, with logprobs=True, `return_tokens_as_token_ids` (vLLM)"
            )
        values = self.logprobs.token_logprobs if self.logprobs is not None else None
        logprobs = None
        if values is not None and len(values) == len(ids) and all(v is not None for v in values):
            logprobs = tuple(float(v) for v in values if v is not None)
        return Generation(tuple(ids), text=self.text, logprobs=logprobs, finish_reason=self.finish_reason)


class CompletionResponse(BaseModel):
    """The parts of an OpenAI completion (vLLM/SGLang extended) that the engine reads."""

    model_config = _LAX
    choices: list[CompletionChoice] = Field(min_length=1)


def _ids_in_logprob_tokens(logprobs: CompletionLogprobs | None) -> list[int] | None:
    """The ids of ``["token_id:5", ...]`` logprob tokens; ``None`` unless every token has that form."""
    if logprobs is None or logprobs.tokens is None:
        return None
    matches = [_TOKEN_ID.fullmatch(token) for token in logprobs.tokens]
    if not all(matches):
        return None
    digits = [m.group(1) for m in matches if m is not None]
    for d in digits:  # the length first: int() of a number past Python's digit limit raises ValueError
        if len(d) > len(str(TOKEN_ID_LIMIT)) or int(d) >= TOKEN_ID_LIMIT:
            raise EngineResponseError(f"a logprob token names an id of {len(d)} digits, past 2**31")
    return [int(d) for d in digits]


@dataclass
class EngineCallStats:
    """HTTP requests sent, retries made (and seconds slept before them), requests that failed for good."""

    requests: int = 0
    retries: int = 0
    retry_wait_s: float = 0.0
    failures: int = 0


class OpenAICompletionsEngine:
    """Continues token contexts on an OpenAI-compatible completions server (see the module docstring).

    ``base_url`` ends in ``/v1`` (``http://host:8000/v1``); ``model`` is the served model name. At most
    ``max_concurrency`` requests are in flight per event loop, each on a connection of its own (clients of
    :data:`~prover_core.connections.CLIENT_CONNECTIONS`), so a batching server sees them together; ``timeout_s``
    bounds each attempt, ``max_answer_bytes`` each answer; ``proxy`` is the only proxy used.
    """

    @finite_arguments  # NaN or infinite timeouts and backoffs are refused (pydantic ValidationError)
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = None,
        max_concurrency: int = 256,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        max_wait_s: float = 30.0,
        logprobs: bool = False,
        headers: Mapping[str, str] | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        proxy: str | None = None,
    ) -> None:
        base_url = refuse_url_credentials(base_url)  # before any message shows the URL, whatever its scheme's spelling
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_concurrency < 1 or max_attempts < 1 or max_answer_bytes < 1:
            raise ValueError("max_concurrency, max_attempts and max_answer_bytes must be >= 1")
        if timeout_s <= 0 or connect_timeout_s <= 0 or backoff_s < 0 or max_wait_s < 0:
            raise ValueError("timeouts must be positive, backoff_s and max_wait_s non-negative")
        self.api_key_env, self.proxy = api_key_env, proxy
        self.endpoint = base_url.rstrip("/") + "/completions"
        self.model = model
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_wait_s = max_wait_s
        self.logprobs = logprobs
        self.headers = dict(headers or {})
        self.max_answer_bytes = max_answer_bytes
        self.retry = RetryPolicy(
            max_attempts=max_attempts,
            statuses=_RETRY_STATUSES,
            server_errors=False,
            retry_timeouts=False,
            backoff_initial_s=backoff_s,
            backoff_max_s=max_wait_s,
            jitter_s=backoff_s,
            max_retry_after_s=max_wait_s,
            max_wait_s=max_wait_s,
        )
        self.stats = EngineCallStats()
        self._connect()

    def _connect(self) -> None:
        """Read the key from ``api_key_env`` and build the connection pools (at construction and unpickling)."""
        key = read_key(self.api_key_env, "the engine's API key") if self.api_key_env else None
        self._pools = LoopPools(
            self.endpoint,
            max_concurrency=self.max_concurrency,
            timeout_s=self.timeout_s,
            connect_timeout_s=self.connect_timeout_s,
            api_key=key,
            headers=self.headers,
            proxy=self.proxy,
        )
        self._redact = self._pools.redact

    def __getstate__(self) -> dict[str, Any]:
        """The settings and stats without the key and the connections: a pickle (a :class:`RayExecutor`'s object
        store, which may spill to disk) never holds the key; :meth:`__setstate__` reads it again from
        ``api_key_env`` where the engine is unpickled (unset there: :class:`ValueError` naming the variable).
        ``headers`` and ``proxy`` travel as given: pass a secret through ``api_key_env``."""
        state = dict(self.__dict__)
        del state["_pools"], state["_redact"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._connect()

    def __repr__(self) -> str:
        return (
            f"OpenAICompletionsEngine({self.endpoint!r}, model={self.model!r}, max_concurrency={self.max_concurrency})"
        )

    # -- connections --------------------------------------------------------------------------------

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """Hold this event loop's connection pool open (each call holds it; it closes when the last leaves).

        Wrap a whole verification (``async with engine.session(): await acompute_bonus(...)``) to keep
        connections alive between the turns of sparse continuations.
        """
        async with self._pools.session():
            yield

    # -- the request --------------------------------------------------------------------------------

    def payload(self, prompt_ids: Sequence[int], params: SamplingParams) -> dict[str, Any]:
        """The JSON body of one request."""
        clash = _RESERVED.intersection(params.extra)
        if clash:
            raise ValueError(f"SamplingParams.extra may not set {sorted(clash)}: the engine sets them")
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [int(i) for i in prompt_ids],
            "max_tokens": params.max_tokens,
            **params.distribution(),
            "n": 1,
            "stream": False,
            "return_token_ids": True,
        }
        if params.seed is not None:
            body["seed"] = int(params.seed)
        if params.stop_token_ids:
            body["stop_token_ids"] = [int(i) for i in params.stop_token_ids]
        if self.logprobs:
            body.update(logprobs=0, return_tokens_as_token_ids=True)
        body.update(params.extra)
        return body

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        """Sample one completion of ``prompt_ids``; raises :class:`EngineError` (or a subclass) on failure."""
        if len(prompt_ids) == 0:
            raise EngineError("empty prompt: there is no context to continue")
        body = self.payload(prompt_ids, params)
        cap = self.answer_cap(len(prompt_ids), params.max_tokens)
        async with self._pools.session() as pool:
            attempts = 0
            try:
                async for trial in self.retry.retrying(before_sleep=self._count_retry):
                    with trial:
                        attempts = trial.retry_state.attempt_number
                        return await self._attempt(pool, body, cap)
            except Retryable as exc:
                self.stats.failures += 1
                message = f"{self.endpoint} failed after {attempts} attempt(s): {exc}"
                if exc.status is not None:
                    raise EngineHTTPError(message, exc.status) from None
                raise EngineError(message) from None
            except EngineError:
                self.stats.failures += 1
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def answer_cap(self, prompt_tokens: int, max_tokens: int) -> int:
        """The bytes an answer may take: ``min(max_answer_bytes, 64 KiB + 1 KiB * (prompt_tokens + max_tokens))``,
        far more than any server needs for the ids, logprobs and text of ``max_tokens`` tokens (and an echo of the
        prompt), so a server answering millions of ids for a few tokens is stopped before they are read."""
        return min(self.max_answer_bytes, _ANSWER_BASE_BYTES + _ANSWER_TOKEN_BYTES * (prompt_tokens + max_tokens))

    async def _attempt(self, pool: LoopPool, body: dict[str, Any], cap: int) -> Generation:
        async with pool.client() as client:
            self.stats.requests += 1
            try:
                response = await asyncio.wait_for(read_capped(client, self.endpoint, body, cap), self.timeout_s)
            except AnswerTooLarge as exc:
                raise EngineAnswerTooLargeError(
                    f"{self.endpoint}: {exc} (min(max_answer_bytes, 64 KiB + 1 KiB per token of prompt and max_tokens))"
                ) from None
            except httpx.HTTPError as exc:
                detail = f"{type(exc).__name__}: {self._redact(str(exc))}"
                if self.retry.retries_error(exc):
                    raise Retryable(f"connection error ({detail})") from None
                if isinstance(exc, httpx.TimeoutException):
                    raise EngineTimeoutError(f"{self.endpoint} did not answer within {self.timeout_s} s") from None
                raise EngineError(f"request to {self.endpoint} failed: {detail}") from None
            except asyncio.TimeoutError:
                raise EngineTimeoutError(f"{self.endpoint} did not answer within {self.timeout_s} s") from None
        return self._read(response)

    def _read(self, response: httpx.Response) -> Generation:
        status = response.status_code
        if self.retry.retries_status(status):
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            raise Retryable(f"status {status}: {self._excerpt(response)}", status, retry_after)
        if status >= 300:
            raise EngineHTTPError(f"{self.endpoint} answered {status}: {self._excerpt(response)}", status)
        return self._parse(response)

    def _parse(self, response: httpx.Response) -> Generation:
        """The generation in a successful answer (a subclass for another server's schema overrides this)."""
        return self._answer(response, CompletionResponse, "a completion").choices[0].generation()

    def _answer(self, response: httpx.Response, schema: type[Answer], what: str) -> Answer:
        """A successful answer's body as ``schema``; :class:`EngineResponseError` naming ``what`` was expected."""
        try:
            return schema.model_validate_json(response.content)
        except ValidationError as exc:
            kind = response.headers.get("content-type", "?")
            raise EngineResponseError(
                f"{self.endpoint} answered with something that is not {what} ({kind}; "
                f"{exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}): {self._excerpt(response)}"
            ) from None

    # -- retries and redaction ----------------------------------------------------------------------

    def _count_retry(self, state: RetryCallState) -> None:
        self.stats.retries += 1
        self.stats.retry_wait_s += state.next_action.sleep if state.next_action is not None else 0.0

    def _excerpt(self, response: httpx.Response) -> str:
        return self._redact.excerpt(response.text)
