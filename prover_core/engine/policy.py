"""A :class:`~prover_core.Policy` over a :class:`~prover_core.engine.TokenEngine`, token-exact.

The context of the ``j``-th action of a continuation from boundary ``b`` of trajectory ``tau`` is

    prompt_ids + completion_ids[:a_b] + g_0 + o_1 + g_1 + ... + o_j

where ``a_b`` is the first token of turn ``b``'s action span, ``g_i`` the ids the engine generated for
the continuation's ``i``-th action and ``o_i = render_observation(observation_i)``. Action ``j`` is
sampled with seed ``action_seed(seed, j)``: a pre and a post continuation with the same seed (common
random numbers) draw their ``j``-th actions with the same engine seed.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prover_core._aio import resolve
from prover_core.engine.parity import ParityMonitor
from prover_core.engine.protocol import Generation, SamplingParams, TokenEngine
from prover_core.engine.tokens import TokenStore
from prover_core.errors import EngineError, EngineTimeoutError
from prover_core.protocols import PolicyContext


def action_seed(seed: int, j: int) -> int:
    """The engine seed of the ``j``-th action of a continuation with ``seed`` (31 bits, stable)."""
    return int(np.random.SeedSequence([seed, j, 0x5EED]).generate_state(1)[0]) & 0x7FFFFFFF


def _check_generation(result: object) -> Generation:
    if not isinstance(result, Generation):
        raise EngineError(f"engine.generate must return a Generation, got {type(result).__name__}")
    if not result.token_ids:
        raise EngineError("the engine generated no tokens for an action")
    if any(not isinstance(i, int | np.integer) or i < 0 for i in result.token_ids):
        raise EngineError(f"the engine returned invalid token ids: {list(result.token_ids)[:8]}")
    return result


@dataclass
class EngineStats:
    """What the engine was asked for in this policy's lifetime (reset with :meth:`EnginePolicy.clear`)."""

    calls: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    failures: int = 0


class EnginePolicy:
    """Continues recorded trajectories on ``engine``, token-exactly (see the module docstring).

    ``tokens`` holds each training row's ``(prompt_ids, completion_ids)``; ``render_observation(obs)``
    returns the token ids the rollout appended for an observation, ``parse_action(generation)`` the
    action handed to the environment (default: the generation's text). At most ``max_concurrency``
    engine calls are in flight at once (the engine batches them); each call gets ``timeout_s``.
    ``parity`` (a :class:`~prover_core.engine.parity.ParityMonitor`) is offered every action; its gaps
    reach the report's metrics through :meth:`report_stats`.
    """

    def __init__(
        self,
        engine: TokenEngine,
        tokens: TokenStore,
        *,
        render_observation: Callable[[Any], Sequence[int]],
        parse_action: Callable[[Generation], Any] | None = None,
        sampling: SamplingParams | None = None,
        max_concurrency: int = 256,
        timeout_s: float | None = None,
        parity: ParityMonitor | None = None,
    ) -> None:
        if not callable(getattr(engine, "generate", None)):
            raise TypeError(f"engine must have a generate(prompt_ids, params) method, got {type(engine).__name__}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.engine = engine
        self.tokens = tokens
        self.render_observation = render_observation
        self.parse_action = parse_action or _text_of
        self.sampling = sampling or SamplingParams()
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.stats = EngineStats()
        self.parity = parity
        self._contexts: dict[tuple[str, int, int], tuple[int, list[int]]] = {}
        self._limits: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}

    def clear(self) -> None:
        """Forget every continuation's context and the counters (call once per training step)."""
        self._contexts.clear()
        self.stats = EngineStats()
        if self.parity is not None:
            self.parity.reset()

    async def report_stats(self) -> dict[str, float]:
        """Figures for the step's report: the parity monitor's gaps (scored now), else nothing."""
        if self.parity is None:
            return {}
        await self.parity.evaluate()
        return self.parity.metrics()

    def context_ids(self, context: PolicyContext) -> tuple[tuple[str, int, int], int, list[int]]:
        """``(key, j, ids)``: the continuation's key, the index of its next action, and its exact context."""
        trajectory = context.trajectory
        if trajectory is None or context.boundary is None:
            raise EngineError("EnginePolicy continues recorded trajectories only (no trajectory or boundary given)")
        b = context.boundary
        j = len(context.history) - b
        key = (trajectory.id, b, context.seed)
        if j == 0:
            ids = self.tokens.get(trajectory.id).context_before(trajectory, b)
        else:
            seen, previous = self._contexts.get(key, (-1, []))
            if seen != j - 1:
                raise EngineError(f"continuation {key} asked for action {j} but its context holds {seen + 1} actions")
            observation = [int(i) for i in self.render_observation(context.observation)]
            ids = previous + observation
        return key, j, ids

    async def act(self, context: PolicyContext) -> Any:
        key, j, ids = self.context_ids(context)
        generation = await self.generate(ids, self.sampling.with_seed(action_seed(context.seed, j)))
        self._contexts[key] = (j, ids + list(map(int, generation.token_ids)))
        if self.parity is not None:
            self.parity.offer(ids, generation)
        return self.parse_action(generation)

    async def generate(self, ids: Sequence[int], params: SamplingParams) -> Generation:
        """One engine call under the concurrency limit and time limit; failures raise :class:`EngineError`."""
        async with self._limit():
            self.stats.calls += 1
            self.stats.prompt_tokens += len(ids)
            try:
                call = _call(self.engine, list(ids), params)
                result = await (call if self.timeout_s is None else asyncio.wait_for(call, self.timeout_s))
                generation = _check_generation(result)
            except asyncio.TimeoutError as exc:
                self.stats.failures += 1
                raise EngineTimeoutError(f"the engine did not answer within {self.timeout_s} s") from exc
            except EngineError:
                self.stats.failures += 1
                raise
            except Exception as exc:
                self.stats.failures += 1
                raise EngineError(f"the engine raised {type(exc).__name__}: {exc}") from exc
        self.stats.generated_tokens += len(generation.token_ids)
        return generation

    def _limit(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if loop not in self._limits:
            self._limits = {loop: asyncio.Semaphore(self.max_concurrency)}  # one loop at a time
        return self._limits[loop]


async def _call(engine: TokenEngine, ids: list[int], params: SamplingParams) -> object:
    """Await an async ``generate``; run a blocking one in a thread so the event loop keeps going."""
    if inspect.iscoroutinefunction(engine.generate):
        return await engine.generate(ids, params)
    return await resolve(await asyncio.to_thread(engine.generate, ids, params))


def _text_of(generation: Generation) -> Any:
    if generation.text is None:
        raise EngineError("the engine returned no text; give EnginePolicy a parse_action that decodes token ids")
    return generation.text.strip()
