"""HTTP connections of the library's clients (the completions engines and the LLM judge): one pool per event loop,
and reading a ``Retry-After`` header.

A :class:`LoopPools` keeps, for each event loop that uses it, a few ``httpx.AsyncClient``\\ s and a limit of
requests in flight. The first :meth:`~LoopPools.session` of a loop opens them and the last one to leave closes them,
so nothing outlives the loop (``compute_bonus`` may run each step on a fresh loop). Requests go to the least busy
client: httpcore's pool spends time quadratic in its connections on every request (encode/httpx#3215), so
``max_concurrency`` requests are spread over clients of :data:`CLIENT_CONNECTIONS` connections each.
"""

from __future__ import annotations

import asyncio
import email.utils
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone

import httpx
from pydantic import SecretStr

CLIENT_CONNECTIONS = 8
"""Connections per ``httpx.AsyncClient`` (see the module docstring)."""


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
    ``connect_timeout_s`` a connection; ``api_key`` sent as a bearer token with ``headers``."""

    def __init__(
        self,
        url: str,
        *,
        max_concurrency: int,
        timeout_s: float,
        connect_timeout_s: float,
        api_key: SecretStr | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
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


__all__ = ["CLIENT_CONNECTIONS", "LoopPool", "LoopPools", "parse_retry_after"]
