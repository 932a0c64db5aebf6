"""Micro-batching: the policy calls of concurrent continuations served by one call (a model's ``generate``).

``await batcher.submit(x)`` returns ``call([..., x, ...])[i]``: every continuation that submits in the same pass
of the event loop shares one ``call``. The batch is sent once a pass of the loop has added no request, so that
every continuation the last answers woke (and every one verification started meanwhile) has joined it: one
round of lockstep continuations is one call. A request whose caller was cancelled, or whose continuation
verification has stopped (:mod:`prover_core.clock`), while it waited is left out of the call (its caller gets
``CancelledError``). ``call`` may be synchronous (it blocks the loop, as a model's ``generate`` on the trainer's own
device does) or return an awaitable (a served model); an exception it raises reaches every caller of that batch.

:class:`BatchedPolicy` is how the core serves a :class:`~prover_core.protocols.BatchPolicy`: a one-context policy
whose ``act`` joins the round's batch, one ``act_batch`` call per round.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from prover_core.clock import METER, Meter
from prover_core.protocols import BatchPolicy, PolicyContext

Item = TypeVar("Item")
Answer = TypeVar("Answer")


class Batcher(Generic[Item, Answer]):
    """Serves the requests of one pass of the event loop with one ``call(items) -> answers`` (same order).

    ``calls`` and ``rows`` count the calls made and the requests in them (:meth:`reset_counts`).
    """

    def __init__(self, call: Callable[[list[Item]], Sequence[Answer] | Awaitable[Sequence[Answer]]]) -> None:
        self.call = call
        self.calls = 0
        self.rows = 0
        self._pending: list[tuple[Item, asyncio.Future[Answer], Meter | None]] = []
        self._answering: set[asyncio.Future[None]] = set()  # async calls in flight (a task needs a reference)

    def reset_counts(self) -> None:
        self.calls = self.rows = 0

    async def submit(self, item: Item) -> Answer:
        """``item``'s answer, from the next batch."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._when_settled, loop, 0)
        self._pending.append((item, future, METER.get()))
        return await future

    def _when_settled(self, loop: asyncio.AbstractEventLoop, seen: int) -> None:
        """Send the batch once a whole pass of the loop has added no request to it."""
        if len(self._pending) > seen:
            loop.call_soon(self._when_settled, loop, len(self._pending))
        else:
            self._send()

    def _send(self) -> None:
        batch = []
        for item, future, meter in self._pending:
            if meter is not None and meter.stopped:
                future.cancel()
            if not future.done():  # cancelled, or stopped: left out
                batch.append((item, future))
        self._pending = []
        if not batch:
            return
        self.calls += 1
        self.rows += len(batch)
        futures = [future for _, future in batch]
        try:
            answers = self.call([item for item, _ in batch])
        except Exception as exc:
            _settle(futures, exc)
            return
        if inspect.isawaitable(answers):
            task = asyncio.ensure_future(_answered(answers, futures))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)
        else:
            _settle(futures, answers)


async def _answered(answers: Awaitable[Sequence[Any]], futures: list[asyncio.Future[Any]]) -> None:
    try:
        _settle(futures, await answers)
    except Exception as exc:
        _settle(futures, exc)


def _settle(futures: list[asyncio.Future[Any]], answers: Sequence[Any] | Exception) -> None:
    """Each future its answer, in order; or every one the exception (a wrong count of answers is one)."""
    if not isinstance(answers, Exception):
        answers = list(answers)
        if len(answers) != len(futures):
            answers = ValueError(f"a batched call answered {len(answers)} of {len(futures)} requests")
    for i, future in enumerate(futures):
        if future.done():  # its caller was cancelled while an async call ran
            continue
        if isinstance(answers, Exception):
            future.set_exception(answers)
        else:
            future.set_result(answers[i])


class BatchedPolicy:
    """A one-context policy over a :class:`~prover_core.protocols.BatchPolicy`: ``await act(context)`` joins the
    batch of its pass of the event loop (:class:`Batcher`), and one ``policy.act_batch(contexts)`` serves it.

    One :class:`Batcher` per event loop (an executor's worker threads each run their own loop).
    """

    def __init__(self, policy: BatchPolicy) -> None:
        self.policy = policy
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Batcher[PolicyContext, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BatchedPolicy({self.policy!r})"

    def _batcher(self) -> Batcher[PolicyContext, Any]:
        loop = asyncio.get_running_loop()
        with self._lock:
            batcher = self._batchers.get(loop)
            if batcher is None:
                batcher = self._batchers[loop] = Batcher(self.policy.act_batch)
            return batcher

    async def act(self, context: PolicyContext) -> Any:
        return await self._batcher().submit(context)


__all__ = ["BatchedPolicy", "Batcher"]
