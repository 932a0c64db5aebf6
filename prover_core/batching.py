"""Micro-batching: the policy calls of concurrent continuations served by one call (a model's ``generate``).

``await batcher.submit(x)`` returns ``call([..., x, ...])[i]``: every continuation that submits in the same pass
of the event loop shares one ``call``. The batch is sent once a pass of the loop has added no request, so that
every continuation the last answers woke (and every one verification started meanwhile) has joined it: one
round of lockstep continuations is one call. A request whose caller was cancelled, or whose continuation
verification has stopped (:mod:`prover_core.clock`), while it waited is left out of the call (its caller gets
``CancelledError``). ``call`` is synchronous and blocks the loop, as a model's ``generate`` on the trainer's own
device does; an exception it raises reaches every caller of that batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from prover_core.clock import METER, Meter

Item = TypeVar("Item")
Answer = TypeVar("Answer")


class Batcher(Generic[Item, Answer]):
    """Serves the requests of one pass of the event loop with one ``call(items) -> answers`` (same order).

    ``calls`` and ``rows`` count the calls made and the requests in them (:meth:`reset_counts`).
    """

    def __init__(self, call: Callable[[list[Item]], Sequence[Answer]]) -> None:
        self.call = call
        self.calls = 0
        self.rows = 0
        self._pending: list[tuple[Item, asyncio.Future[Answer], Meter | None]] = []

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
        try:
            answers = list(self.call([item for item, _ in batch]))
            if len(answers) != len(batch):
                raise ValueError(f"a batched call answered {len(answers)} of {len(batch)} requests")
        except Exception as exc:
            for _, future in batch:
                future.set_exception(exc)
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            future.set_result(answer)


__all__ = ["Batcher"]
