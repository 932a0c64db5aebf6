"""An environment in worker processes that can be killed: a hung ``step`` costs one continuation, not the run.

A thread cannot be killed. Under a time limit, a synchronous ``step`` that never returns is abandoned in its thread,
and past :data:`~prover_core._aio.MAX_BLOCKED_THREADS` such threads the library refuses to start more for that
environment (:class:`~prover_core.errors.ThreadsExhaustedError`): an environment that hangs now and then would
switch verification off for the rest of a run. :class:`IsolatedEnv` runs a
:class:`~prover_core.protocols.RestorableEnv` in a pool of at most ``processes`` worker processes instead:

* each live episode is pinned to one worker from ``restore`` until it ends (its last step, an error, or garbage);
* the caller awaits the worker's answer on its event loop (a readable pipe, no thread);
* a call past its time limit (``timeout_s`` per ``restore`` or ``step``, or the continuation's
  ``ProverConfig.continuation_timeout_s``, which cancels the call) kills that worker and starts a replacement, so the
  continuation is counted as timed out and the pool stays at most ``processes`` workers, however often it hangs;
* a worker that dies is a :class:`~prover_core.errors.WorkerLostError` (counted, replaced); a factory that fails in
  the worker is a :class:`~prover_core.errors.UsageError` (raised: a setup error, not a skipped group).

Each worker is a fresh interpreter (``python -c``; it inherits ``sys.path``), never a fork of a trainer's threads and
never a re-import of the caller's ``__main__``. It builds the environment with ``factory()``, so the factory must
pickle and be importable by name: a function or class of a module (not of ``__main__``), or a ``functools.partial``
of one. Actions, recorded trajectories and steps cross a local socket pickled. Outcomes are
the environment's own: same restore, same seed, same steps, so a verification gives what it gives in process
(``tests/test_isolate.py`` checks it). A worker's restorer keeps its snapshot cache across calls (keyed by content,
so never stale).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import socket
import subprocess
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from prover_core.data import Trajectory
from prover_core.errors import ContinuationTimeoutError, ProtocolError, UsageError, WorkerLostError
from prover_core.protocols import RestorableEnv, Step


def _serve(fd: int) -> None:
    """A worker's loop (``python -c``, reading socket ``fd``): build the environment from the pickled factory sent
    first, then answer ``restore`` and ``step`` requests in order."""
    conn = Connection(fd)
    payload = conn.recv_bytes()
    loop = asyncio.new_event_loop()  # an async environment's coroutines run here

    def resolved(value: Any) -> Any:
        while asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = loop.run_until_complete(value)
        return value

    try:
        env = pickle.loads(payload)()
    except Exception as exc:
        conn.send(("setup", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    episode: Any = None
    while True:
        try:
            kind, argument = conn.recv()
        except EOFError:  # the driver closed its end
            return
        try:
            if kind == "restore":
                episode = resolved(env.restore(*argument))
                answer = episode.last
            else:
                answer = resolved(episode.step(argument))
            conn.send(("ok", answer))
        except Exception as exc:  # the environment's own error (or a step that does not pickle): the caller's
            episode = None
            conn.send(("raised", _portable(exc)))


def _portable(error: Exception) -> Exception:
    """``error`` if it pickles, else a ``RuntimeError`` naming it (what crosses the pipe must pickle)."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


class _Worker:
    """One worker process and the driver's end of its socket. ``pending``: a request sent and not answered (a worker
    abandoned so is killed, never reused); ``dead``: its socket closed."""

    def __init__(self, payload: bytes) -> None:
        ours, theirs = socket.socketpair()
        path = os.pathsep.join(p for p in sys.path if p)  # PYTHONPATH's entries are in sys.path already
        # A fresh interpreter, not multiprocessing: it never re-imports the caller's __main__ (a training script
        # without a __main__ guard), and never forks a trainer's threads.
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from prover_core.isolate import _serve; _serve({theirs.fileno()})"],
            pass_fds=(theirs.fileno(),),
            env={**os.environ, "PYTHONPATH": path},
        )
        theirs.close()  # the worker holds the only other end: its death is an end of file here
        self.conn = Connection(ours.detach())
        self.conn.send_bytes(payload)
        self.ready = self.pending = self.dead = self.setup_failed = False

    async def call(self, kind: str, argument: Any, timeout_s: float | None) -> tuple[str, Any]:
        """``(kind of answer, value)`` for one request; raises :class:`ContinuationTimeoutError` past ``timeout_s``."""
        if not self.ready:  # cancelled here, the worker is unharmed: it finishes starting in the pool
            answer, detail = await self._receive()
            if answer == "setup":
                self.dead = self.setup_failed = True
                raise UsageError(f"IsolatedEnv's factory failed in its worker process: {detail}")
            self.ready = True
        self.conn.send((kind, argument))
        self.pending = True
        try:
            reply: tuple[str, Any] = await asyncio.wait_for(self._receive(), timeout_s)
        except TimeoutError:
            raise ContinuationTimeoutError(
                f"IsolatedEnv: {kind} took longer than {timeout_s} s; its worker process was killed and replaced"
            ) from None
        self.pending = False
        return reply

    async def _receive(self) -> Any:
        if not self.conn.poll():
            loop = asyncio.get_running_loop()
            readable: asyncio.Future[None] = loop.create_future()
            fd = self.conn.fileno()
            loop.add_reader(fd, _wake, readable)
            try:
                await readable
            finally:
                loop.remove_reader(fd)
        try:
            return self.conn.recv()
        except (EOFError, OSError) as exc:
            self.dead = True
            code = None
            with contextlib.suppress(subprocess.TimeoutExpired):  # its socket closed: it is exiting
                code = self.process.wait(0.5)
            raise WorkerLostError(f"IsolatedEnv's worker process ended (exit code {code})") from exc

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.process.kill()
            self.process.wait(5)
        with contextlib.suppress(Exception):
            self.conn.close()


class _Pool:
    """At most ``size`` workers; an idle one is handed out, a broken one killed and replaced. Thread-safe (each of an
    executor's threads runs its own event loop)."""

    def __init__(self, payload: bytes, size: int) -> None:
        self.payload, self.size = payload, size
        self.lock = threading.Lock()
        self.idle: list[_Worker] = []
        self.live = 0
        self.started = self.killed = 0
        self.closed = False
        self.setup_error: str | None = None
        """Set once a worker's factory failed: later acquires are refused with it, no worker is started again."""
        self.waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    def _start(self) -> _Worker:
        worker = _Worker(self.payload)
        with self.lock:
            self.started += 1
        return worker

    async def acquire(self) -> _Worker:
        loop = asyncio.get_running_loop()
        while True:
            with self.lock:
                if self.closed:
                    raise UsageError("IsolatedEnv is closed")
                if self.setup_error is not None:
                    raise UsageError(self.setup_error)
                if self.idle:
                    return self.idle.pop()
                start = self.live < self.size
                if start:
                    self.live += 1
                else:
                    waiter: asyncio.Future[None] = loop.create_future()
                    self.waiters.append((loop, waiter))
            if start:
                try:
                    return self._start()
                except BaseException:
                    with self.lock:
                        self.live -= 1
                    raise
            try:
                await waiter
            finally:
                with self.lock, contextlib.suppress(ValueError):
                    self.waiters.remove((loop, waiter))

    def release(self, worker: _Worker, error: BaseException | None = None) -> None:
        """Take ``worker`` back: idle if it answered everything it was asked, else killed and replaced at once (the
        replacement starts while the pool goes on). ``error``: what its last call raised."""
        broken = worker.pending or worker.dead
        if broken:
            worker.kill()
        with self.lock:
            if worker.setup_failed:
                self.setup_error = str(error)
            replace = broken and not self.closed and self.setup_error is None
        replacement = None
        if replace:
            with contextlib.suppress(OSError):  # none could start: the next acquire tries again
                replacement = self._start()
        with self.lock:
            if replacement is not None:
                self.killed += 1
                self.idle.append(replacement)
            elif broken:
                self.killed += 1
                self.live -= 1
            elif self.closed:
                worker.kill()
                self.live -= 1
            else:
                self.idle.append(worker)
            self._wake(everyone=self.setup_error is not None)

    def _wake(self, everyone: bool = False) -> None:
        """Wake the longest waiter (a worker came back), or every one (none ever will: they raise). Under the lock."""
        while self.waiters:
            loop, waiter = self.waiters.popleft()
            with contextlib.suppress(RuntimeError):  # that loop closed: its waiter gave up
                loop.call_soon_threadsafe(_wake, waiter)
            if not everyone:
                return

    def close(self) -> None:
        with self.lock:
            self.closed, idle, self.idle = True, self.idle, []
            self.live -= len(idle)
            self._wake(everyone=True)
        for worker in idle:
            worker.kill()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Episode:
    """A live episode in a worker: ``last`` and ``async step(action)``; the worker goes back to the pool when the
    episode ends, raises, or is garbage."""

    def __init__(self, pool: _Pool, worker: _Worker, last: Step, timeout_s: float | None) -> None:
        self.last, self._worker, self._timeout_s = last, worker, timeout_s
        self._release = weakref.finalize(self, pool.release, worker)

    async def step(self, action: Any) -> Step:
        if not self._release.alive:
            raise UsageError("this episode has ended; restore a new one")
        try:
            kind, value = await self._worker.call("step", action, self._timeout_s)
        except BaseException:
            self._release()
            raise
        if kind != "ok":
            self._release()
            raise value
        step: Step = value
        self.last = step
        if step.done:
            self._release()
        return step

    def close(self) -> None:
        self._release()


class IsolatedEnv:
    """A :class:`~prover_core.protocols.RestorableEnv` run in at most ``processes`` killable worker processes, each
    building its own environment with ``factory()`` (see the module's docs).

    ``timeout_s`` bounds each ``restore`` and each ``step`` (``None``: only the continuation's own limit,
    ``ProverConfig.continuation_timeout_s``, applies).
    """

    def __init__(
        self,
        factory: Callable[[], RestorableEnv],
        processes: int = 2,
        timeout_s: float | None = None,
    ) -> None:
        if not callable(factory):
            raise ProtocolError(f"IsolatedEnv needs a factory (a callable that builds an environment), got {factory!r}")
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise UsageError(f"IsolatedEnv(processes=...) must be a positive integer, got {processes!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise UsageError(f"IsolatedEnv(timeout_s=...) must be positive or None, got {timeout_s!r}")
        named = getattr(factory, "func", factory)  # a functools.partial names its function
        if getattr(named, "__module__", None) == "__main__":
            raise ProtocolError(
                f"IsolatedEnv's factory {named!r} is defined in __main__, which its worker processes do not import: "
                "define it in a module"
            )
        try:
            payload = pickle.dumps(factory)
        except Exception as exc:
            raise ProtocolError(
                f"IsolatedEnv's factory must pickle (a module-level function or class, or a functools.partial of one) "
                f"to reach its worker processes: {type(exc).__name__}: {exc}"
            ) from exc
        self.factory, self.processes, self.timeout_s = factory, processes, timeout_s
        self._pool = _Pool(payload, processes)
        self._closer = weakref.finalize(self, self._pool.close)

    def __repr__(self) -> str:
        return f"IsolatedEnv({self.factory!r}, processes={self.processes}, timeout_s={self.timeout_s})"

    async def restore(self, trajectory: Trajectory, turn: int, seed: int) -> _Episode:
        """The environment's own ``restore(trajectory, turn, seed)``, in a worker that then holds the episode."""
        worker = await self._pool.acquire()
        try:
            kind, value = await worker.call("restore", (trajectory, turn, seed), self.timeout_s)
        except BaseException as exc:
            self._pool.release(worker, exc)
            raise
        if kind != "ok":
            self._pool.release(worker)
            raise value
        return _Episode(self._pool, worker, value, self.timeout_s)

    def stats(self) -> dict[str, int]:
        """``started``: worker processes started; ``killed``: killed after a time limit or found dead; ``live``."""
        with self._pool.lock:
            return {"started": self._pool.started, "killed": self._pool.killed, "live": self._pool.live}

    def close(self) -> None:
        """Stop the idle workers (those holding an episode stop when it ends); later restores are refused."""
        self._closer()

    def __enter__(self) -> IsolatedEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["IsolatedEnv"]
