"""The chat-completions client: httpx (sync and async) with tenacity retries, accounting and a cache.

Retry policy (:class:`~prover_core.connections.RetryPolicy`, shared with the engines), per request: up to
``max_attempts`` attempts on status 408, 409, 429 and 5xx, on connection errors and on timeouts. Between attempts
it sleeps the server's ``Retry-After`` (capped at ``max_retry_after_s``) when given, else ``min(backoff_max_s,
backoff_initial_s * 2**(n-1)) + uniform(0, backoff_jitter_s)`` after the ``n``-th failed attempt. Any other 4xx,
a 2xx body that is not a chat completion (HTML, truncated JSON, JSON nested too deep, a string with a lone
surrogate), an answer over ``max_answer_bytes``, an error of the request itself (an illegal header), an exhausted
budget or an open circuit raise :class:`~prover_core.errors.JudgeError` at once. An error status (5xx included)
whose body says a request parameter is not supported (e.g. llama.cpp's 500 "tools param requires --jinja flag")
is not transient: it raises :class:`~prover_core.errors.JudgeUnsupportedError` at once, with a hint. The API key
is sent as a bearer token; it, the ``extra_headers`` values and the proxy are scrubbed from every error message
and log line, in every form (:mod:`~prover_core.redaction`), before any excerpt is cut.

Each attempt has one deadline, ``timeout_s``, for the whole answer: connecting, sending and reading the
full body (``asyncio.wait_for`` around the request; httpx's connect and read timeouts stay inside it). An
attempt past it fails with :class:`~prover_core.errors.AnswerTimeout` and is retried like any timeout, however
slowly the server trickles its answer. The blocking :meth:`ChatClient.chat` runs the same async request.

Usage figures are range-checked: a ``usage`` with a negative count is ignored (counted in ``usage_missing``), so
a server cannot refill the token budget. A response that cannot be written to the cache is still used (the failed
write is logged once and counted in ``cache_write_errors``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)
from tenacity import RetryCallState

from prover_core._aio import run_sync
from prover_core.connections import (
    AnswerTooLarge,
    LoopPool,
    LoopPools,
    Retryable,
    RetryPolicy,
    parse_retry_after,
    read_capped,
)
from prover_core.errors import (
    AnswerTimeout,
    JudgeAnswerTooLargeError,
    JudgeError,
    JudgeRefusedError,
    JudgeUnsupportedError,
)
from prover_core.judges.llm.cache import ResponseCache, request_key
from prover_core.judges.llm.config import LLMJudgeConfig
from prover_core.judges.llm.stats import JudgeStats

__all__ = ["ChatClient", "ChatResponse"]

log = logging.getLogger("prover_core.judges.llm")

_RETRY_STATUSES = frozenset({408, 409, 429})
T = TypeVar("T")

_UNSUPPORTED = re.compile(
    r"requires? --|not supported|unsupported|does not support|doesn't support|not implemented|"
    r"unknown (?:param|field|argument|key)|unrecognized (?:param|field|argument|key)|extra (?:inputs|fields) "
    r"are not permitted|extra_forbidden",
    re.IGNORECASE,
)
"""An error body matching this names a request parameter the server cannot handle: retrying will not help."""

_HINTS = (
    ("--jinja", "start llama-server with --jinja, or use mode='structured'"),
    (
        "tool",
        "enable tool calling on the server (vLLM: --enable-auto-tool-choice --tool-call-parser ...), "
        "or use mode='structured'",
    ),
    ("response_format", "set response_format='json_object' or 'none'"),
    ("json_schema", "set response_format='json_object' or 'none'"),
    ("max_tokens", "set max_tokens_field='max_completion_tokens' (or the reverse)"),
    ("max_completion_tokens", "set max_tokens_field='max_tokens'"),
)


_CONTEXT_OVERFLOW = re.compile(
    r"exceed_context_size|exceeds the available context|maximum context length|context length", re.IGNORECASE
)
"""A 4xx body matching this says the prompt does not fit the model's context (llama.cpp, vLLM, SGLang)."""

_CONTEXT_HINT = (
    "the judge's prompt does not fit the model's context: give the server more (llama-server: -c, shared by "
    "its -np slots; vLLM: --max-model-len; SGLang: --context-length) or send less (max_trajectory_chars, "
    "max_failures_shown, max_field_chars, max_tokens)"
)


def _unsupported_hint(body: str) -> str:
    """What to change in the config for an 'unsupported parameter' error body."""
    lowered = body.lower()
    for needle, hint in _HINTS:
        if needle in lowered:
            return hint
    return "remove the unsupported parameter (extra_body, response_format, mode) or upgrade the server"


_LAX = ConfigDict(extra="ignore")


def _encodable(body: Any) -> bool:
    """Whether ``body``'s strings are valid Unicode (no lone surrogate from a ``"\\ud800"`` escape), so that it can be
    sent back, hashed and cached as UTF-8."""
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError):
        return False
    return True


class ToolFunction(BaseModel):
    model_config = _LAX
    name: str
    arguments: str = ""

    @field_validator("arguments", mode="before")
    @classmethod
    def _as_json_text(cls, value: Any) -> Any:
        return json.dumps(value) if isinstance(value, dict) else ("" if value is None else value)


class ToolCall(BaseModel):
    model_config = _LAX
    id: str | None = None
    function: ToolFunction


class ChatMessage(BaseModel):
    model_config = _LAX
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class Choice(BaseModel):
    model_config = _LAX
    message: ChatMessage
    finish_reason: str | None = None


class PromptTokensDetails(BaseModel):
    model_config = _LAX
    cached_tokens: int | None = Field(default=None, ge=0)


class Usage(BaseModel):
    model_config = _LAX
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    prompt_tokens_details: PromptTokensDetails | None = None

    @property
    def cached_tokens(self) -> int:
        details = self.prompt_tokens_details
        return (details.cached_tokens or 0) if details is not None else 0


class ChatResponse(BaseModel):
    """The parts of an OpenAI chat completion the judge reads."""

    model_config = _LAX
    choices: list[Choice] = Field(min_length=1)
    usage: Usage | None = None

    @field_validator("usage", mode="wrap")
    @classmethod
    def _usage_or_none(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A usage with counts out of range (negative) is no usage: the answer stays, its figures do not."""
        try:
            return handler(value)
        except ValidationError:
            return None


class ChatClient:
    """Sends chat-completion requests through one pooled async client per event loop."""

    def __init__(self, config: LLMJudgeConfig, stats: JudgeStats) -> None:
        self.config = config
        self.stats = stats
        self._key: SecretStr | None = config.api_key()
        self._pools = LoopPools(
            config.base_url,
            max_concurrency=config.max_concurrency,
            timeout_s=config.timeout_s,
            connect_timeout_s=config.connect_timeout_s,
            api_key=self._key,
            headers=config.extra_headers,
            proxy=config.proxy,
        )
        self.retry = RetryPolicy(
            max_attempts=config.max_attempts,
            statuses=_RETRY_STATUSES,
            server_errors=True,
            retry_timeouts=True,
            backoff_initial_s=config.backoff_initial_s,
            backoff_max_s=config.backoff_max_s,
            jitter_s=config.backoff_jitter_s,
            max_retry_after_s=config.max_retry_after_s,
        )
        self.cache = ResponseCache(config.cache_dir, config.max_answer_bytes) if config.cache_dir is not None else None
        self._cache_warned = False

    # -- connection handling ---------------------------------------------------------------------

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """Hold this loop's pooled async clients; they are closed when their last user leaves."""
        async with self._pools.session():
            yield

    def close(self) -> None:
        """Nothing to release: each loop's client closes itself when its last user leaves."""

    # -- errors ----------------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with every form of the API key, the header values and the proxy replaced by ``***``."""
        return self._pools.redact(text)

    def _body_excerpt(self, response: httpx.Response) -> str:
        return self._pools.redact.excerpt(response.text)

    def _read(self, response: httpx.Response, latency: float, key: str) -> ChatResponse:
        """A chat response from an HTTP response, or the exception that says why not."""
        status = response.status_code
        if status >= 400 and (status == 501 or _UNSUPPORTED.search(response.text[:2000])):
            excerpt = self._body_excerpt(response)
            raise JudgeUnsupportedError(
                f"chat server {self.config.endpoint} refused the request as unsupported (status {status}: "
                f"{excerpt}); not retried, it would fail again: {_unsupported_hint(excerpt)}"
            )
        if self.retry.retries_status(status):
            raise Retryable(
                f"status {status}: {self._body_excerpt(response)}",
                status,
                parse_retry_after(response.headers.get("Retry-After")),
            )
        if status >= 400:
            excerpt = self._body_excerpt(response)
            hint = f"; {_CONTEXT_HINT}" if _CONTEXT_OVERFLOW.search(response.text[:2000]) else ""
            raise JudgeError(f"chat server {self.config.endpoint} answered {status}: {excerpt}{hint}")
        kind = response.headers.get("content-type", "?")
        try:
            body = response.json()
        except (ValueError, RecursionError) as exc:
            what = "JSON nested too deeply" if isinstance(exc, RecursionError) else "not JSON"
            raise JudgeError(
                f"chat server {self.config.endpoint} returned a body that is {what} ({kind}): "
                f"{self._body_excerpt(response)}"
            ) from None
        if not _encodable(body):
            raise JudgeError(
                f"chat server {self.config.endpoint} returned text that is not valid Unicode (a lone surrogate)"
            ) from None
        try:
            parsed = ChatResponse.model_validate(body)
        except ValidationError as exc:
            raise JudgeError(
                f"chat server {self.config.endpoint} returned JSON that is not a chat completion "
                f"({exc.error_count()} schema errors): {self._body_excerpt(response)}"
            ) from None
        usage = parsed.usage
        if usage is None:
            self.stats.response(latency, None, None)
        else:
            self.stats.response(latency, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
        if self.cache is not None and isinstance(body, dict):
            self._store(key, body)
        return parsed

    def _store(self, key: str, body: dict[str, Any]) -> None:
        """Write an answer to the cache; a failed write is logged (once) and counted, the answer kept."""
        assert self.cache is not None
        try:
            self.cache.put(key, body)
        except (OSError, ValueError, TypeError) as exc:
            self.stats.add(cache_write_errors=1)
            if not self._cache_warned:
                self._cache_warned = True
                log.warning("the judge's answer could not be written to the cache (%s: %s)", type(exc).__name__, exc)

    # -- retry policy ----------------------------------------------------------------------------

    def _before_sleep(self, state: RetryCallState) -> None:
        """Count the wait before a retry (the retry itself is counted when it is sent, in ``admit``)."""
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        self.stats.add(retry_wait_s=wait)
        exc = state.outcome.exception() if state.outcome is not None else None
        log.warning("judge request failed (%s); retry %d in %.2fs", exc, state.attempt_number, wait)

    def _exhausted(self, exc: Retryable, attempts: int) -> JudgeError:
        circuit = "; circuit open: no more judge calls this step" if self.stats.circuit_open else ""
        return JudgeError(
            f"chat server {self.config.endpoint} failed after {attempts} attempt(s){circuit}: {self.redact(str(exc))}"
        )

    def _transport(self, exc: httpx.HTTPError | AnswerTimeout) -> Exception:
        """A timeout or connection error is worth a retry; any other httpx error (bad URL, decoding) is not."""
        self.stats.failure()
        text = self.redact(str(exc))
        detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        if self.retry.retries_error(exc):
            if isinstance(exc, (httpx.TimeoutException, AnswerTimeout)):
                limits = f"timeout_s={self.config.timeout_s:g}, connect_timeout_s={self.config.connect_timeout_s:g}"
                return Retryable(f"timed out ({detail}; {limits})")
            return Retryable(f"connection error ({detail})")
        return JudgeError(f"request to chat server {self.config.endpoint} failed: {detail}")

    async def _post(self, client: httpx.AsyncClient, payload: dict[str, Any]) -> httpx.Response:
        """POST ``payload`` and read the whole answer (at most ``max_answer_bytes``) within ``timeout_s``;
        :class:`AnswerTimeout` past it."""
        c = self.config
        try:
            return await asyncio.wait_for(read_capped(client, c.endpoint, payload, c.max_answer_bytes), c.timeout_s)
        except asyncio.TimeoutError:
            raise AnswerTimeout("the whole answer took longer than timeout_s") from None

    def _lookup(self, key: str) -> ChatResponse | None:
        if self.cache is None:
            return None
        body = self.cache.get(key)
        if body is None or not _encodable(body):
            return None
        try:
            parsed = ChatResponse.model_validate(body)
        except ValidationError:
            return None
        self.stats.add(cache_hits=1)
        return parsed

    def _failed(self, call: Callable[[], T]) -> T:
        """Run ``call``; count a :class:`JudgeError` or :class:`Retryable` as a failed attempt."""
        try:
            return call()
        except (JudgeError, Retryable):
            self.stats.failure()
            raise

    def _request_failed(self, exc: Exception, attempts: int) -> JudgeError:
        """The error of a request that failed after its retries; counts it for the circuit breaker."""
        if isinstance(exc, JudgeRefusedError):
            return exc  # not sent: not a failure of the server
        self.stats.request_failed()
        if isinstance(exc, Retryable):
            return self._exhausted(exc, attempts)
        assert isinstance(exc, JudgeError)
        return exc

    # -- sending ---------------------------------------------------------------------------------

    async def achat(self, payload: dict[str, Any]) -> ChatResponse:
        """POST ``payload`` (async, inside :meth:`session`), with retries; raises :class:`JudgeError`."""
        key = request_key(payload)
        cached = self._lookup(key)
        if cached is not None:
            return cached
        async with self._pools.session() as pool:
            return await self._achat(payload, key, pool)

    async def _achat(self, payload: dict[str, Any], key: str, pool: LoopPool) -> ChatResponse:
        async def attempt(number: int) -> ChatResponse:
            async with pool.client() as client:
                self.stats.admit(retry=number > 1)
                start = time.perf_counter()
                try:
                    response = await self._post(client, payload)
                except (httpx.HTTPError, AnswerTimeout) as exc:
                    raise self._transport(exc) from None
                except AnswerTooLarge as exc:
                    self.stats.failure()
                    raise JudgeAnswerTooLargeError(
                        f"chat server {self.config.endpoint}: {exc} (max_answer_bytes)"
                    ) from None
            return self._failed(lambda: self._read(response, time.perf_counter() - start, key))

        attempts = 0
        try:
            async for trial in self.retry.retrying(self._before_sleep, stop=lambda _: self.stats.circuit_open):
                with trial:
                    attempts = trial.retry_state.attempt_number
                    return await attempt(attempts)
        except (Retryable, JudgeError) as exc:
            raise self._request_failed(exc, attempts) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def chat(self, payload: dict[str, Any]) -> ChatResponse:
        """POST ``payload`` (blocking), with retries; raises :class:`JudgeError`. It runs :meth:`achat` on an
        event loop of its own (in a worker thread if this one runs a loop), so its connection closes after it."""
        return run_sync(self.achat(payload))
