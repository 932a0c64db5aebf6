"""Calling user code that may be sync or async, and running the async pipeline from sync code."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Callable, Coroutine
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


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a daemon thread of its own; its result is then resolved on this loop.

    The awaiting task can time out while ``fn`` blocks: the thread is then abandoned (it cannot be
    killed), runs on until ``fn`` returns, and its result is dropped. Being a daemon it does not
    keep the interpreter alive, and no executor waits for it: not ``asyncio.run`` (which joins the
    loop's default executor, so ``asyncio.to_thread`` would hold the caller's loop until ``fn``
    returns, and fill that executor's few threads) nor the interpreter at exit. Every blocking call
    of user code under a time limit goes through here. A ``BaseException`` that is not an
    ``Exception`` (``KeyboardInterrupt``, ``SystemExit``, a user's own) raised by ``fn`` reaches the
    caller as a ``RuntimeError`` (:func:`escaped`) instead of silently ending the thread.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            ok, value = True, fn(*args)
        except BaseException as exc:  # whatever ends the thread must reach the caller
            ok, value = False, exc if isinstance(exc, Exception) else escaped(exc)
        with contextlib.suppress(RuntimeError):  # the loop closed: the caller gave up long ago
            loop.call_soon_threadsafe(settle, ok, value)

    context = contextvars.copy_context()  # as asyncio.to_thread: the thread sees the caller's context variables
    threading.Thread(target=context.run, args=(work,), name="prover-user-code", daemon=True).start()
    return await resolve(await future)


def escaped(error: BaseException) -> RuntimeError:
    """A ``RuntimeError`` carrying ``error``, a ``BaseException`` raised by user code in a worker thread.

    Re-raised as it is, ``KeyboardInterrupt`` or ``SystemExit`` would stop the caller's event loop; lost,
    the caller would wait out its time limit and record a timeout that never happened.
    """
    wrapped = RuntimeError(f"user code raised {type(error).__name__} in a worker thread: {error}")
    wrapped.__cause__ = error
    return wrapped


async def call_user(fn: Callable[..., Any], *args: Any, threaded: bool) -> Any:
    """Call user code that may be sync or async; with ``threaded``, a sync ``fn`` runs in a thread
    (:func:`in_thread`) so that the event loop, and any time limit on it, keeps running."""
    if threaded and not inspect.iscoroutinefunction(fn):
        return await in_thread(fn, *args)
    return await resolve(fn(*args))


_LOOP_MISMATCH = ("attached to a different loop", "bound to a different event loop", "different event loop")


def loop_mismatch(error: BaseException) -> BaseException | None:
    """The error in ``error``'s chain that says async code used another event loop's objects, if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RuntimeError) and any(text in str(current) for text in _LOOP_MISMATCH):
            return current
        current = current.__cause__ or current.__context__
    return None
