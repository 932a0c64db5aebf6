"""Engine calls that share a prefix go together: a concurrency gate that prefers the prefixes in flight.

The 2K continuations of a verified group all start with the same recorded prefix (``prompt_ids +
completion_ids[:a_b]``), and an engine keeps a limited number of prefixes cached (llama.cpp: one per
slot; vLLM and SGLang: a prefix cache that evicts under pressure). Admitting calls in arrival order
interleaves every group's continuations, so each call may evict the prefix the next one needs (on a
real llama-server, docs/engines.md: prompt tokens evaluated 1.6-2.1x, verification slower with everything in
flight than one call at a time). :class:`PrefixGate` admits at most ``limit`` calls at once and gives
a free slot to the oldest waiting call whose prefix key is already in flight, else to one with the
key admitted last (what a one-slot engine has cached), else to the oldest waiting call: a group's
continuations, including the later actions of multi-turn continuations, run together and finish
before the next group takes their slots. It changes only the order of calls, never what any call
samples (each action has its own seed).
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

__all__ = ["PrefixGate"]


class PrefixGate:
    """At most ``limit`` holders at once; a freed slot goes to a waiter whose key is in flight or was admitted last.

    Waiters of one key are served first come, first served; keys in the order their first waiter came.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.active: Counter[Hashable] = Counter()
        self._waiting: dict[Hashable, deque[asyncio.Future[None]]] = {}
        self._last: Hashable = None

    @property
    def in_flight(self) -> int:
        return sum(self.active.values())

    @asynccontextmanager
    async def slot(self, key: Hashable) -> AsyncIterator[None]:
        """Hold one of the ``limit`` slots for ``key`` while the block runs."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(waiter)
        self._grant()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted, then cancelled before it ran
                self._release(key)
            else:
                self._drop(key, waiter)
            raise
        try:
            yield
        finally:
            self._release(key)

    def _pick(self) -> Hashable | None:
        for key in self._waiting:
            if self.active[key] > 0:
                return key
        if self._last in self._waiting:
            return self._last
        return next(iter(self._waiting), None)

    def _grant(self) -> None:
        while self.in_flight < self.limit:
            key = self._pick()
            if key is None:
                return
            queue = self._waiting[key]
            waiter = queue.popleft()
            if not queue:
                del self._waiting[key]
            if waiter.cancelled():
                continue
            self.active[key] += 1
            self._last = key
            waiter.set_result(None)

    def _release(self, key: Hashable) -> None:
        self.active[key] -= 1
        if self.active[key] <= 0:
            del self.active[key]
        self._grant()

    def _drop(self, key: Hashable, waiter: asyncio.Future[None]) -> None:
        queue = self._waiting.get(key)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[key]
