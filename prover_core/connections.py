"""HTTP connections of the library's clients (the completions engines and the LLM judge): one pool per event loop,
one retry policy, an answer read up to a byte cap, and reading a ``Retry-After`` header.

A :class:`LoopPools` keeps, for each event loop that uses it, a few ``httpx.AsyncClient``\\ s and a limit of
requests in flight. The first :meth:`~LoopPools.session` of a loop opens them and the last one to leave closes them,
so nothing outlives the loop (``compute_bonus`` may run each step on a fresh loop). Requests go to the least busy
client: httpcore's pool spends time quadratic in its connections on every request (encode/httpx#3215), so
``max_concurrency`` requests are spread over clients of :data:`CLIENT_CONNECTIONS` connections each.

What the clients trust (docs/security.md): redirects are not followed; TLS is verified; the proxy variables
(``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, either case) and ``.netrc`` are ignored
(``trust_env=False``): a proxy is used only when passed as ``proxy``. A URL with credentials is refused
(:func:`~prover_core.redaction.refuse_url_credentials`); a bearer key sent over plain ``http`` to a host that is
not loopback is warned about once per host. :func:`read_capped` reads an answer up to ``max_answer_bytes``
(counted after decompression) and stops there with :class:`AnswerTooLarge`.

:class:`RetryPolicy` is the one retry policy of both clients; their differences are its parameters:

==========================  =========================================  =============================================
parameter                   engines (``OpenAICompletionsEngine``)       LLM judge (``LLMJudgeConfig``)
==========================  =========================================  =============================================
``max_attempts``            ``max_attempts`` (4)                         ``max_attempts`` (4)
``statuses``                429, 502, 503, 504                           408, 409, 429
``server_errors``           no                                           yes: every 5xx (unless "unsupported")
``retry_timeouts``          no: the server may still be generating       yes
``backoff_initial_s``       ``backoff_s`` (0.5)                          ``backoff_initial_s`` (1)
``backoff_max_s``           ``max_wait_s`` (30)                          ``backoff_max_s`` (30)
``jitter_s``                ``backoff_s`` (0.5)                          ``backoff_jitter_s`` (1)
``max_wait_s``              ``max_wait_s`` (30)                          none
``max_retry_after_s``       ``max_wait_s`` (30)                          ``max_retry_after_s`` (60)
==========================  =========================================  =============================================

Connection errors (refused, reset, dropped before the answer: ``httpx.NetworkError``, ``ConnectTimeout``,
``RemoteProtocolError``) are retried by both; an error of the request itself (``LocalProtocolError``: an
illegal header, say) never is.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import logging
import math
import random
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from prover_core.redaction import Redactor, header_secrets, refuse_url_credentials, register

logger = logging.getLogger(__name__)

CLIENT_CONNECTIONS = 8
"""Connections per ``httpx.AsyncClient`` (see the module docstring)."""
MAX_ANSWER_BYTES = 32 * 2**20
"""The default cap on one answer's body (32 MiB after decompression)."""
_WARNED_HOSTS: set[str] = set()


@dataclass
class LoopPool:
    """One event loop's clients, the limit of requests in flight, and each client's requests in flight."""

    clients: list[httpx.AsyncClient]
    limit: asyncio.Semaphore
    busy: list[int]
    users: int = 0

    @asynccontextmanager
    async def client(self) -> AsyncIterator[httpx.AsyncClient]:
        """A slot under the limit, on the least busy client (which then always has a free connection)."""
        async with self.limit:
            i = min(range(len(self.clients)), key=self.busy.__getitem__)
            self.busy[i] += 1
            try:
                yield self.clients[i]
            finally:
                self.busy[i] -= 1


class LoopPools:
    """The clients of one endpoint, per event loop: ``max_concurrency`` requests in flight, ``timeout_s`` a read,
    ``connect_timeout_s`` a connection; ``api_key`` sent as a bearer token with ``headers``; ``proxy`` the only
    proxy used (the environment's are ignored). :attr:`redact` scrubs the key, the header values (of 8 characters
    or more: :func:`~prover_core.redaction.header_secrets`) and the proxy from a message."""

    def __init__(
        self,
        url: str,
        *,
        max_concurrency: int,
        timeout_s: float,
        connect_timeout_s: float,
        api_key: SecretStr | None = None,
        headers: Mapping[str, str] | None = None,
        proxy: str | None = None,
    ) -> None:
        self.url = refuse_url_credentials(url)
        self.proxy = proxy
        self.redact = register(Redactor([api_key, *header_secrets(headers or {}), proxy]))
        if api_key is not None:
            warn_plain_http_key(url)
        self.max_concurrency = max_concurrency
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key is not None:
            self.headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self._pools: dict[asyncio.AbstractEventLoop, LoopPool] = {}
        self._ssl: ssl.SSLContext | None = None

    @property
    def open(self) -> bool:
        """Whether any loop's clients are open."""
        return bool(self._pools)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[LoopPool]:
        """This event loop's pool, held open while inside (each request holds it; it closes when the last leaves)."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = self._new_pool()
        pool.users += 1
        try:
            yield pool
        finally:
            pool.users -= 1
            if pool.users == 0:
                del self._pools[loop]
                await asyncio.gather(*(client.aclose() for client in pool.clients))

    def _new_pool(self) -> LoopPool:
        shards = -(-self.max_concurrency // CLIENT_CONNECTIONS)
        size = -(-self.max_concurrency // shards)
        clients = [
            httpx.AsyncClient(
                headers=self.headers,
                trust_env=False,
                proxy=self.proxy,
                verify=self._ssl_context(),
                timeout=httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s),
                limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
            )
            for _ in range(shards)
        ]
        return LoopPool(clients, asyncio.Semaphore(self.max_concurrency), [0] * shards)

    def _ssl_context(self) -> ssl.SSLContext | bool:
        """No TLS for plain http (and no redirects followed); for https one context per endpoint, not per client
        (loading CA certificates takes 50+ ms)."""
        if not self.url.startswith("https://"):
            return False
        make = getattr(httpx, "create_ssl_context", None)  # httpx >= 0.28; older ones build it per client
        if make is None:
            return True
        if self._ssl is None:
            self._ssl = make()
        return self._ssl


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_plain_http_key(url: str) -> None:
    """Warn (once per host) that a bearer key goes in clear text to ``url`` when it is plain http and not loopback."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "http" and not is_loopback(host) and host not in _WARNED_HOSTS:
        _WARNED_HOSTS.add(host)
        logger.warning(
            "an API key will be sent in clear text over plain http to %s; use https unless the network is trusted",
            host,
        )


class AnswerTooLarge(Exception):
    """An answer's body passed ``limit`` bytes (each client raises its own typed error from it)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is larger than {limit} bytes; it was not read further")
        self.limit = limit


DECODED = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
"""The one layer of ``Content-Encoding`` an answer may carry (``identity`` aside), and its zlib window bits."""
ACCEPT_ENCODING = "gzip, deflate"
"""What the clients tell a server they decode (only what :class:`Inflater` bounds)."""


class Inflater:
    """Decodes one ``Content-Encoding`` layer (:data:`DECODED`) chunk by chunk, never holding more than ``limit``
    decoded bytes: each chunk is inflated at most up to what is left under the limit (``zlib``'s ``max_length``), so
    a small body that inflates to gigabytes costs at most ``limit`` bytes before :class:`AnswerTooLarge`."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.bits, self.limit, self.size = DECODED[encoding], limit, 0
        self.zlib = zlib.decompressobj(self.bits)

    def feed(self, data: bytes) -> bytes:
        out = []
        while data:
            try:
                piece = self.zlib.decompress(data, self.limit - self.size + 1)
            except zlib.error:
                if self.bits == zlib.MAX_WBITS and self.size == 0:  # "deflate" sent raw, without its zlib header
                    self.bits, self.zlib = -zlib.MAX_WBITS, zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise
            self.size += len(piece)
            if self.size > self.limit:
                raise AnswerTooLarge(self.limit)
            out.append(piece)
            data = self.zlib.unconsumed_tail
            if not data and self.zlib.eof and self.zlib.unused_data:  # another gzip member follows
                data, self.zlib = self.zlib.unused_data, zlib.decompressobj(self.bits)
        return b"".join(out)


def answer_encoding(response: httpx.Response) -> str | None:
    """The answer's one decoded layer (:data:`DECODED`), ``None`` for none; :class:`AnswerEncodingError` for a coding
    this client does not decode itself or for stacked layers (``gzip, gzip`` multiplies a bomb's ratio)."""
    codings = [c.strip().lower() for c in response.headers.get_list("content-encoding", split_commas=True)]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) > 1 or codings[0] not in DECODED:
        raise AnswerEncodingError(
            f"the answer's Content-Encoding {', '.join(codings)!r} is refused: this client decodes one layer of "
            f"{', '.join(sorted(DECODED))} itself, under the answer cap, and nothing else"
        )
    return codings[0]


class AnswerEncodingError(AnswerTooLarge):
    """An answer whose ``Content-Encoding`` the client does not decode: refused unread like an answer past the cap
    (each client raises its own "answer too large" error, whose message names the encoding)."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.limit = 0


async def read_capped(client: httpx.AsyncClient, url: str, body: Any, max_bytes: int) -> httpx.Response:
    """POST ``body`` as JSON and read the answer, at most ``max_bytes`` of it after decoding; :class:`AnswerTooLarge`
    past it, before the rest is read. The raw bytes are read (httpx's own decoding inflates a whole network chunk
    with no limit) and decoded here by :class:`Inflater`, one layer of :data:`DECODED` at most
    (:func:`answer_encoding`). The answer comes back as an ``httpx.Response`` holding the decoded bytes."""
    async with client.stream("POST", url, json=body, headers={"Accept-Encoding": ACCEPT_ENCODING}) as response:
        encoding = answer_encoding(response)
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:  # encoded or not: decoding only adds
            raise AnswerTooLarge(max_bytes)
        inflater = Inflater(encoding, max_bytes) if encoding else None
        chunks: list[bytes] = []
        size = 0
        async for raw in response.aiter_raw():
            chunk = raw if inflater is None else inflater.feed(raw)
            size += len(chunk)
            if size > max_bytes:
                raise AnswerTooLarge(max_bytes)
            chunks.append(chunk)
    headers = [(k, v) for k, v in response.headers.multi_items() if k not in ("content-encoding", "content-length")]
    return httpx.Response(response.status_code, headers=headers, content=b"".join(chunks), request=response.request)


class Retryable(Exception):
    """A failed attempt worth another: a retryable status (``status``), a connection error or (where the policy
    says so) a timeout; ``retry_after`` is the server's ``Retry-After`` in seconds."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


RETRIED_CONNECTION_ERRORS = (httpx.NetworkError, httpx.ConnectTimeout, httpx.RemoteProtocolError)
"""Connection errors worth another attempt: refused, reset, dropped before the answer, no connection in time."""


@dataclass(frozen=True)
class RetryPolicy:
    """When to try again and how long to wait (the module docstring has the engines' and the judge's values).

    After the ``n``-th failed attempt the wait is the server's ``Retry-After`` capped at ``max_retry_after_s``
    when given, else ``min(max_wait_s, min(backoff_max_s, backoff_initial_s * 2**(n-1)) + uniform(0, jitter_s))``.
    """

    max_attempts: int
    statuses: frozenset[int]
    server_errors: bool
    retry_timeouts: bool
    backoff_initial_s: float
    backoff_max_s: float
    jitter_s: float
    max_retry_after_s: float
    max_wait_s: float = math.inf

    def retries_status(self, status: int) -> bool:
        """Whether an answer with ``status`` is worth another attempt."""
        return status in self.statuses or (self.server_errors and status >= 500)

    def retries_error(self, exc: Exception) -> bool:
        """Whether a transport error is worth another attempt (a timeout, httpx's or a ``TimeoutError`` such as
        :class:`~prover_core.errors.AnswerTimeout`, only if ``retry_timeouts``)."""
        if isinstance(exc, RETRIED_CONNECTION_ERRORS):
            return True
        return self.retry_timeouts and isinstance(exc, (httpx.TimeoutException, TimeoutError))

    def wait(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to sleep after failed attempt number ``attempt`` (the formula in the class docstring)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_s)
        backoff = min(self.backoff_max_s, self.backoff_initial_s * 2.0 ** (attempt - 1))
        return min(self.max_wait_s, backoff + random.uniform(0.0, self.jitter_s))

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        return self.wait(state.attempt_number, exc.retry_after if isinstance(exc, Retryable) else None)

    def retrying(
        self,
        before_sleep: Callable[[RetryCallState], Awaitable[None] | None],
        stop: Callable[[RetryCallState], bool] | None = None,
    ) -> AsyncRetrying:
        """A tenacity loop that retries :class:`Retryable` up to ``max_attempts`` attempts (or until ``stop``)."""
        attempts = stop_after_attempt(self.max_attempts)
        return AsyncRetrying(
            stop=attempts if stop is None else lambda s: bool(attempts(s) or stop(s)),
            wait=self._wait,
            retry=retry_if_exception_type(Retryable),
            before_sleep=before_sleep,
            reraise=True,
        )


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay seconds or an HTTP date); ``None`` if absent/bad."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    return max(0.0, seconds) if seconds == seconds else None


__all__ = [
    "ACCEPT_ENCODING",
    "CLIENT_CONNECTIONS",
    "DECODED",
    "MAX_ANSWER_BYTES",
    "RETRIED_CONNECTION_ERRORS",
    "AnswerEncodingError",
    "AnswerTooLarge",
    "Inflater",
    "LoopPool",
    "LoopPools",
    "RetryPolicy",
    "Retryable",
    "answer_encoding",
    "is_loopback",
    "parse_retry_after",
    "read_capped",
    "warn_plain_http_key",
]
