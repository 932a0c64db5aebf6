"""Calling user code that may be sync or async, and running the async pipeline from sync code."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


async def resolve(value: Any) -> Any:
    """Await ``value`` if it is awaitable (the result of an ``async`` method), else return it."""
    while inspect.isawaitable(value):
        value = await value
    return value


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code, even inside a running event loop.

    Inside a running loop (a notebook, an async trainer) the coroutine runs on a fresh loop in a
    worker thread, since ``asyncio.run`` cannot nest.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
