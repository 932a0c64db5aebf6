"""Sampling episodes from the transformer: every episode is a coroutine, their tokens are batched.

An episode (a rollout, a held-out evaluation, or one of ProVer's continuations) asks for the
next-token logits one token at a time; :class:`Engine` collects the requests of every coroutine that
is ready in the same event-loop pass into one :func:`~prover_bench.llm.model.forward_cached`
call (the coroutines woken by one flush all ask again before the next flush runs). Each episode
samples from its own generators (policy and environment streams of its seed), so a result depends
only on the weights and the seed, never on what else was batched with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import numpy as np

from prover_bench.llm import model as M
from prover_bench.llm.tasks import END, MAX_ACTION_TOKENS, Record, Task, observation_tokens, play, start_record

T = TypeVar("T")


class Engine:
    """Batched next-token logits over a key/value cache of ``slots`` sequences."""

    def __init__(self, params: M.Params, slots: int = 512) -> None:
        self.params = params
        self.cache = M.Cache(slots)
        self._free = list(range(slots))
        self._pending: list[tuple[int, list[int], asyncio.Future[np.ndarray]]] = []
        self._scheduled = False
        self.forwards = 0
        self.tokens_sampled = 0

    def acquire(self) -> int:
        self._free.sort()
        if not self._free:
            raise RuntimeError("no free cache slot: raise Engine(slots=...)")
        return self._free.pop(0)

    def release(self, slot: int) -> None:
        self.cache.length[slot] = 0
        self._free.append(slot)

    def prefill(self, slot: int, tokens: Sequence[int]) -> np.ndarray:
        out: np.ndarray = M.prefill(self.params, self.cache, slot, list(tokens)).double().numpy()
        return out

    async def feed(self, slot: int, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` to ``slot``; the next-token logits after the last of them.

        Requests of one event-loop pass are batched by their number of tokens.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[np.ndarray] = loop.create_future()
        self._pending.append((slot, list(tokens), future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        by_size: dict[int, list[tuple[int, list[int], asyncio.Future[np.ndarray]]]] = {}
        for request in pending:
            by_size.setdefault(len(request[1]), []).append(request)
        for batch in by_size.values():
            try:
                logits = M.forward_cached(self.params, self.cache, [s for s, _, _ in batch], [t for _, t, _ in batch])
                rows = logits.double().numpy()
            except Exception as exc:  # hand the error to every waiting episode
                for *_, f in batch:
                    f.set_exception(exc)
                continue
            self.forwards += 1
            for (_, _, f), row in zip(batch, rows, strict=True):
                f.set_result(row)


def sample(logits: np.ndarray, rng: np.random.Generator) -> int:
    """One token from ``softmax(logits)`` (temperature 1) with one uniform draw."""
    z = np.exp(logits - logits.max())
    c = np.cumsum(z)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(c) - 1))


def streams(seed: int | Sequence[int]) -> tuple[np.random.Generator, np.random.Generator]:
    """The policy's and the environment's generators of an episode seed (independent streams)."""
    base = [seed] if isinstance(seed, int) else list(seed)
    return np.random.default_rng([*base, 1]), np.random.default_rng([*base, 2])


async def run_episode(engine: Engine, record: Record, seed: int | Sequence[int]) -> Record:
    """Play ``record`` (fresh or restored) to its end with the current policy; returns it, extended."""
    policy_rng, env_rng = streams(seed)
    slot = engine.acquire()
    try:
        logits = engine.prefill(slot, record.tokens + observation_tokens(record.task, record.final))
        while True:
            action = [sample(logits, policy_rng)]
            while action[-1] != END and len(action) < MAX_ACTION_TOKENS:
                logits = await engine.feed(slot, action[-1:])
                action.append(sample(logits, policy_rng))
            engine.tokens_sampled += len(action)
            play(record, action, float(env_rng.random()))
            if record.final.done:
                break
            logits = await engine.feed(slot, [action[-1], *observation_tokens(record.task, record.final)])
    finally:
        engine.release(slot)
    return record


async def episodes(engine: Engine, tasks: Sequence[Task], seeds: Sequence[Sequence[int]]) -> list[Record]:
    """Fresh episodes of ``tasks[i]`` with ``seeds[i]``, all in flight at once."""
    return list(
        await asyncio.gather(*(run_episode(engine, start_record(t), s) for t, s in zip(tasks, seeds, strict=True)))
    )


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a private event loop."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def threads() -> None:
    """One CPU thread for torch (the machine is shared; the benchmark is sized for it)."""
    import torch

    torch.set_num_threads(1)
