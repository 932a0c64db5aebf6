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

from prover_core.errors import ThreadsExhaustedError

T = TypeVar("T")

MAX_BLOCKED_THREADS = 32
"""How many threads abandoned at their time limit, still blocked in one call of user code (one name: an
environment's continuations, a judge's ``propose``), the process tolerates: past it, :func:`in_thread` refuses to
start another for that call (:class:`~prover_core.errors.ThreadsExhaustedError`, naming it) until some end. So an
environment whose calls hang holds at most this many threads, plus those of the one call that found them blocked,
however many steps call it."""

_blocked: dict[object, str] = {}
"""The abandoned threads still running, each with the call it is blocked in."""
_blocked_lock = threading.Lock()


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


def blocked_threads() -> int:
    """How many threads of user code abandoned at their time limit are still running (every call together)."""
    with _blocked_lock:
        return len(_blocked)


async def in_thread(fn: Callable[..., Any], *args: Any, label: str | None = None) -> Any:
    """``fn(*args)`` in a daemon thread of its own; its result is then resolved on this loop.

    The awaiting task can time out while ``fn`` blocks: the thread is then abandoned (it cannot be
    killed), runs on until ``fn`` returns, and its result is dropped. Being a daemon it does not
    keep the interpreter alive, and no executor waits for it: not ``asyncio.run`` (which joins the
    loop's default executor, so ``asyncio.to_thread`` would hold the caller's loop until ``fn``
    returns, and fill that executor's few threads) nor the interpreter at exit. Every blocking call
    of user code under a time limit goes through here. A ``BaseException`` that is not an
    ``Exception`` (``KeyboardInterrupt``, ``SystemExit``, a user's own) raised by ``fn`` reaches the
    caller as a ``RuntimeError`` (:func:`escaped`) instead of silently ending the thread.

    Abandoned threads are bounded: while :data:`MAX_BLOCKED_THREADS` of them are still blocked in the same call
    (``label``, default ``fn``'s name), this raises :class:`~prover_core.errors.ThreadsExhaustedError` naming it
    instead of starting another.
    """
    name: str = label or str(getattr(fn, "__qualname__", type(fn).__name__))
    with _blocked_lock:
        blocked = sum(held == name for held in _blocked.values())
    if blocked >= MAX_BLOCKED_THREADS:
        raise ThreadsExhaustedError(
            f"{blocked} threads abandoned at their time limit are still blocked in {name}; no more are started "
            f"for it until they end (MAX_BLOCKED_THREADS = {MAX_BLOCKED_THREADS}). A call that can hang needs a "
            "time limit of its own; run an environment that can hang as IsolatedEnv(factory) (prover_core.isolate) "
            "or with RayExecutor, whose worker processes are killed at the limit"
        )
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    key, ended = object(), threading.Event()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            ok, value = True, fn(*args)
        except BaseException as exc:  # whatever ends the thread must reach the caller
            ok, value = False, exc if isinstance(exc, Exception) else escaped(exc)
        with _blocked_lock:
            ended.set()
            _blocked.pop(key, None)
        with contextlib.suppress(RuntimeError):  # the loop closed: the caller gave up long ago
            loop.call_soon_threadsafe(settle, ok, value)

    context = contextvars.copy_context()  # as asyncio.to_thread: the thread sees the caller's context variables
    threading.Thread(target=context.run, args=(work,), name="prover-user-code", daemon=True).start()
    try:
        answer = await future
    except asyncio.CancelledError:  # a time limit gave up on it: counted until it ends
        with _blocked_lock:
            if not ended.is_set():
                _blocked[key] = name
        raise
    return await resolve(answer)


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
