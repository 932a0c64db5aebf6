"""A :class:`~prover_core.Policy` over a :class:`~prover_engine.TokenEngine`, token-exact.

The context of the ``j``-th action of a continuation from boundary ``b`` of trajectory ``tau`` is

    prompt_ids + completion_ids[:a_b] + g_0 + o_1 + g_1 + ... + o_j

where ``a_b`` is the first token of turn ``b``'s action span, ``g_i`` the ids the engine generated for
the continuation's ``i``-th action followed by ``close_action(g_i)`` (what the rollout's template
appends after an action; default nothing, see :mod:`prover_engine.layout`) and
``o_i = render_observation(observation_i)``. With ``max_model_len`` set, each call's ``max_tokens`` is
``min(max_tokens, max_model_len - len(context))``, the room left (vLLM refuses ``len(context) +
max_tokens > max_model_len`` with a 400); a context with no room left raises
:class:`~prover_engine.errors.ContextLengthError` before any request. Action ``j`` is
sampled with seed ``action_seed(seed, j)``: a pre and a post continuation with the same seed (common
random numbers) draw their ``j``-th actions with the same engine seed.

Its tokens are known (a :class:`~prover_core.budget.TokenPolicy`), so verification can be capped in policy tokens
(``ProverConfig.max_extra_token_share``): an action may generate at most ``sampling.max_tokens`` tokens
(:meth:`EnginePolicy.max_action_tokens`, reserved before the call), and :meth:`EnginePolicy.action_tokens` says how
many it did generate (the engine's token ids; the ids ``close_action`` appends are the template's, not generated).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from prover_core.data import Trajectory
from prover_core.errors import EngineError
from prover_core.hosts import call_user, check_finite
from prover_core.protocols import PolicyContext
from prover_core.restore import observations_equal
from prover_engine.errors import ContextLengthError, EngineTimeoutError, TokenRecordError
from prover_engine.layout import CloseAction, check_record, no_close
from prover_engine.parity import ParityMonitor
from prover_engine.protocol import Generation, SamplingParams, TokenEngine
from prover_engine.schedule import PrefixGate
from prover_engine.tokens import TokenSequence, TokenStore

__all__ = ["EnginePolicy", "action_seed"]


def action_seed(seed: int, j: int) -> int:
    """The engine seed of the ``j``-th action of a continuation with ``seed`` (31 bits, stable)."""
    return int(np.random.SeedSequence([seed, j, 0x5EED]).generate_state(1)[0]) & 0x7FFFFFFF


def _check_generation(result: object, max_tokens: int) -> Generation:
    if not isinstance(result, Generation):
        raise EngineError(f"engine.generate must return a Generation, got {type(result).__name__}")
    if not result.token_ids:
        raise EngineError("the engine generated no tokens for an action")
    if len(result.token_ids) > max_tokens:
        raise EngineError(f"the engine returned {len(result.token_ids)} token ids for max_tokens={max_tokens}")
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
    clamped: int = 0
    """Calls whose ``max_tokens`` was cut to the room left within ``max_model_len``."""


class EnginePolicy:
    """Continues recorded trajectories on ``engine``, token-exactly (see the module docstring).

    ``tokens`` holds each training row's ``(prompt_ids, completion_ids)``; ``render_observation(obs)``
    returns the token ids the rollout appended for an observation, ``parse_action(generation)`` the
    action handed to the environment (default: the generation's text). At most ``max_concurrency``
    engine calls are in flight at once (the engine batches them); each call gets ``timeout_s``.

    ``close_action(generation)`` returns the ids the rollout appends after an action (e.g.
    :func:`~prover_engine.layout.close_turn` for a chat template's end-of-turn). With
    ``check_contexts`` (default), before a continuation of a trajectory builds its first context
    (action 1) the recorded row is replayed through ``close_action`` and ``render_observation``
    (:func:`~prover_engine.layout.check_record`, once per trajectory and step); a row they do not
    reproduce fails those continuations with :class:`~prover_engine.errors.TokenRecordError` (a recorded
    skip, never a continuation from a context the rollout would not have sent). ``max_model_len``: see the module
    docstring. ``group_prefixes`` (default): when calls wait for a slot, those of a trajectory already
    in flight go first (:mod:`prover_engine.schedule`), so an engine's prefix cache serves them.

    ``parity`` (a :class:`~prover_engine.parity.ParityMonitor`) is offered every action; its gaps
    reach the report's metrics through :meth:`report_stats`.

    It reports its tokens (:class:`~prover_core.budget.TokenPolicy`: :meth:`max_action_tokens`,
    :meth:`action_tokens`), for a cap in policy tokens.
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
        close_action: CloseAction | None = None,
        check_contexts: bool = True,
        max_model_len: int | None = None,
        group_prefixes: bool = True,
        parity: ParityMonitor | None = None,
    ) -> None:
        if not callable(getattr(engine, "generate", None)):
            raise TypeError(f"engine must have a generate(prompt_ids, params) method, got {type(engine).__name__}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        check_finite(timeout_s=timeout_s)
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if max_model_len is not None and max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {max_model_len}")
        self.engine = engine
        self.tokens = tokens
        self.render_observation = render_observation
        self.parse_action = parse_action or _text_of
        self.sampling = sampling or SamplingParams()
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.close_action = close_action or no_close
        self.check_contexts = check_contexts
        self.max_model_len = max_model_len
        self.group_prefixes = group_prefixes
        self.stats = EngineStats()
        self._checked: dict[str, TokenRecordError | None] = {}
        self.parity = parity
        self._contexts: dict[tuple[str, int, int], tuple[int, list[int]]] = {}
        self._generated: dict[tuple[str, int, int], tuple[int, int]] = {}
        """Each continuation's last action: ``(j, tokens generated)``."""
        self._limits: dict[asyncio.AbstractEventLoop, PrefixGate] = {}

    def clear(self) -> None:
        """Forget every continuation's context and the counters (call once per training step)."""
        self._contexts.clear()
        self._generated.clear()
        self._checked.clear()
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
        key, j = self._key(context)
        trajectory, b = context.trajectory, key[1]
        assert trajectory is not None
        if j == 0:
            ids = self.tokens.get(trajectory.id).context_before(trajectory, b)
            if context.replayed:
                ids = self._off_path(trajectory, b, ids, context.observation)
        else:
            if self.check_contexts:  # before the first context the continuation builds itself
                self._check(self.tokens.get(trajectory.id), trajectory)
            seen, previous = self._contexts.get(key, (-1, []))
            if seen != j - 1:
                raise EngineError(f"continuation {key} asked for action {j} but its context holds {seen + 1} actions")
            observation = self._rendered(context.observation)
            ids = previous + observation
        return key, j, ids

    @staticmethod
    def _key(context: PolicyContext) -> tuple[tuple[str, int, int], int]:
        """``(key, j)``: the continuation's key ``(trajectory id, boundary, seed)`` and the index of its next action."""
        trajectory, b = context.trajectory, context.boundary
        if trajectory is None or b is None:
            raise EngineError("EnginePolicy continues recorded trajectories only (no trajectory or boundary given)")
        return (trajectory.id, b, context.seed), len(context.history) - b

    def _rendered(self, observation: Any) -> list[int]:
        """``render_observation(observation)`` as a list of ints: the tokens the agent sees for it."""
        return [int(i) for i in self.render_observation(observation)]

    def _off_path(self, trajectory: Trajectory, b: int, ids: list[int], observation: Any) -> list[int]:
        """``ids`` (the recorded tokens before turn ``b``), with the recorded observation's tokens replaced by
        ``observation``'s when replayed actions met another transition (``delta_of="choices"``)."""
        if b >= trajectory.num_turns:
            raise EngineError(f"trajectory {trajectory.id!r} has no recorded turn {b} to continue from")
        recorded = trajectory.turns[b].observation
        if observations_equal(recorded, observation):
            return ids
        old = self._rendered(recorded)
        if not old or ids[-len(old) :] != old:
            raise EngineError(
                f"cannot continue trajectory {trajectory.id!r} off its recorded path at turn {b}: the recorded "
                "tokens do not end with render_observation of the recorded observation"
            )
        return ids[: -len(old)] + self._rendered(observation)

    async def act(self, context: PolicyContext) -> Any:
        key, j, ids = self.context_ids(context)
        params = self.fit(len(ids), self.sampling.with_seed(action_seed(context.seed, j)))
        generation = await self.generate(ids, params, prefix=key[0] if self.group_prefixes else None)
        closing = [int(i) for i in self.close_action(generation)]
        self._contexts[key] = (j, ids + list(map(int, generation.token_ids)) + closing)
        self._generated[key] = (j, len(generation.token_ids))
        if self.parity is not None:
            self.parity.offer(ids, generation)
        return self.parse_action(generation)

    def max_action_tokens(self, context: PolicyContext) -> int:
        """The most tokens the action for ``context`` may generate: ``sampling.max_tokens`` (:meth:`fit` only lowers
        it, and a generation past it is refused, :class:`EngineError`)."""
        return self.sampling.max_tokens

    def action_tokens(self, context: PolicyContext) -> int:
        """The tokens the engine generated for the action :meth:`act` just returned for ``context``."""
        key, j = self._key(context)
        done, tokens = self._generated.get(key, (-1, 0))
        if done != j:
            raise EngineError(f"continuation {key} has not generated its action {j} (its last: {done})")
        return tokens

    def fit(self, context_len: int, params: SamplingParams) -> SamplingParams:
        """``params`` with ``max_tokens`` cut to ``max_model_len - context_len`` (the room left), if smaller.

        The rule of verl's vLLM server (``max(1, min(max_tokens, max_model_len - len(prompt_ids)))`` after
        refusing a prompt with less than 1 token of room) and of vLLM's own check. No room: raises
        :class:`ContextLengthError` (counted as a failure, no request sent).
        """
        if self.max_model_len is None:
            return params
        room = self.max_model_len - context_len
        if room < 1:
            self.stats.failures += 1
            raise ContextLengthError(
                f"the continuation's context holds {context_len} tokens, which leaves no room for an action "
                f"within max_model_len={self.max_model_len}"
            )
        if params.max_tokens <= room:
            return params
        self.stats.clamped += 1
        return replace(params, max_tokens=room)

    def _check(self, record: TokenSequence, trajectory: Trajectory) -> None:
        """Check a trajectory's record once per step (see :func:`check_record`); re-raise a mismatch."""
        if trajectory.id not in self._checked:
            try:
                check_record(record, trajectory, self.render_observation, self.close_action)
                self._checked[trajectory.id] = None
            except TokenRecordError as exc:
                self._checked[trajectory.id] = exc
        error = self._checked[trajectory.id]
        if error is not None:
            raise TokenRecordError(str(error))

    async def generate(self, ids: Sequence[int], params: SamplingParams, prefix: Hashable = None) -> Generation:
        """One engine call under the concurrency limit and time limit; failures raise :class:`EngineError`.

        Calls wait for a slot in a :class:`~prover_engine.schedule.PrefixGate`: a free slot goes first
        to a call whose ``prefix`` (``act`` passes the trajectory id) is in flight, so continuations that
        share a prefix reach the engine together. ``None``: first come, first served.
        """
        key: Hashable = prefix if prefix is not None else object()
        async with self._limit().slot(key):
            self.stats.calls += 1
            self.stats.prompt_tokens += len(ids)
            try:
                call = _call(self.engine, list(ids), params)
                result = await (call if self.timeout_s is None else asyncio.wait_for(call, self.timeout_s))
                generation = _check_generation(result, params.max_tokens)
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

    def _limit(self) -> PrefixGate:
        loop = asyncio.get_running_loop()
        if loop not in self._limits:
            self._limits = {loop: PrefixGate(self.max_concurrency)}  # one loop at a time
        return self._limits[loop]


async def _call(engine: TokenEngine, ids: list[int], params: SamplingParams) -> object:
    """Await an async ``generate``; run a blocking one in a daemon thread (:func:`~prover_core._aio.in_thread`)
    so the event loop keeps going and a call past ``timeout_s`` is abandoned, not waited for."""
    return await call_user(engine.generate, ids, params, threaded=True)


def _text_of(generation: Generation) -> Any:
    if generation.text is None:
        raise EngineError("the engine returned no text; give EnginePolicy a parse_action that decodes token ids")
    return generation.text.strip()
