"""Policy parity: do continuations sample the policy the trainer trains?

For a seeded sample of continuation actions (about one in ``every``; chosen by a hash of ``seed`` and
the action's context, so the choice does not depend on the order requests finish in), the engine's
log-probability of each sampled token, ``l_e(y_i) = log pi_engine(y_i | x, y_<i)`` (its generation's
``logprobs``: under the distribution the engine actually drew from), is compared with the trainer's
own, ``l_t(y_i)``, given by the user's ``score(context_ids, token_ids)`` at the same context. Over the
``n`` compared tokens::

    gap_mean = (1/n) * sum_i |l_e(y_i) - l_t(y_i)|        gap_max = max_i |l_e(y_i) - l_t(y_i)|

reported as ``engine_logprob_gap_mean``, ``engine_logprob_gap_max`` and ``engine_logprob_gap_tokens``
(and ``engine_logprob_gap_actions``, ``engine_logprob_unavailable``: sampled actions whose generation
carried no logprobs). ``gap_mean`` above ``threshold`` logs a warning. A wrong sampling parameter
(top-k, top-p, temperature), stale weights or a re-tokenised context all show as a gap; numeric
noise (bf16 against fp32, a quantised engine) as a small one.

Scoring is deferred: :meth:`ParityMonitor.offer` only records, :meth:`ParityMonitor.evaluate` calls
``score`` on what was recorded (once per step, after verification, so the trainer's model is free).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from prover_core._aio import resolve
from prover_core.engine.protocol import Generation

logger = logging.getLogger(__name__)

ScoreFn = Callable[[Sequence[int], Sequence[int]], Sequence[float] | Awaitable[Sequence[float]]]
"""``score(context_ids, token_ids) -> logprobs``: ``log p(token_ids[i] | context_ids + token_ids[:i])``."""


@dataclass(frozen=True)
class ParitySample:
    """One sampled action: its context, its tokens and the engine's logprobs of them."""

    context_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    engine_logprobs: tuple[float, ...]


@dataclass
class ParityStats:
    """Gaps accumulated since the last :meth:`ParityMonitor.reset` (``abs_sum / tokens`` is the mean)."""

    actions: int = 0
    tokens: int = 0
    abs_sum: float = 0.0
    max_gap: float = 0.0
    unavailable: int = 0

    @property
    def mean(self) -> float:
        return self.abs_sum / self.tokens if self.tokens else 0.0


class ParityMonitor:
    """Compares the engine's logprobs of sampled tokens with the trainer's (see the module docstring)."""

    def __init__(self, score: ScoreFn, *, every: int = 8, seed: int = 0, threshold: float = 0.2) -> None:
        if not callable(score):
            raise TypeError("score must be callable: score(context_ids, token_ids) -> logprobs")
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        if not threshold > 0:
            raise ValueError(f"threshold must be positive, got {threshold}")
        self.score = score
        self.every = every
        self.seed = seed
        self.threshold = threshold
        self.stats = ParityStats()
        self.pending: list[ParitySample] = []

    def chosen(self, context_ids: Sequence[int]) -> bool:
        """Whether the action taken after ``context_ids`` is in the sample (about one in ``every``)."""
        if self.every == 1:
            return True
        h = hashlib.blake2b(repr((self.seed, tuple(int(i) for i in context_ids))).encode(), digest_size=8)
        return int.from_bytes(h.digest(), "big") % self.every == 0

    def offer(self, context_ids: Sequence[int], generation: Generation) -> bool:
        """Record ``generation`` (sampled after ``context_ids``) if it is in the sample; ``True`` if recorded."""
        if not self.chosen(context_ids):
            return False
        if generation.logprobs is None or len(generation.logprobs) != len(generation.token_ids):
            self.stats.unavailable += 1
            if self.stats.unavailable == 1:
                logger.warning(
                    "policy parity: the engine returned no logprobs for a sampled action; create it with "
                    "logprobs=True (e.g. LlamaServerEngine(..., logprobs=True))"
                )
            return False
        self.pending.append(
            ParitySample(tuple(map(int, context_ids)), tuple(map(int, generation.token_ids)), generation.logprobs)
        )
        return True

    async def evaluate(self) -> ParityStats:
        """Score the recorded actions with ``score``, fold their gaps into :attr:`stats`, warn above ``threshold``."""
        pending, self.pending = self.pending, []
        for sample in pending:
            trainer = [float(x) for x in await resolve(self.score(sample.context_ids, sample.token_ids))]
            if len(trainer) != len(sample.token_ids):
                raise ValueError(
                    f"score returned {len(trainer)} logprobs for {len(sample.token_ids)} tokens: one per token expected"
                )
            gaps = [abs(e - t) for e, t in zip(sample.engine_logprobs, trainer, strict=True)]
            if not all(math.isfinite(g) for g in gaps):
                raise ValueError(f"a logprob gap is not finite: engine {sample.engine_logprobs}, trainer {trainer}")
            self.stats.actions += 1
            self.stats.tokens += len(gaps)
            self.stats.abs_sum += sum(gaps)
            self.stats.max_gap = max(self.stats.max_gap, *gaps)
        if pending and self.stats.mean > self.threshold:
            logger.warning(
                "policy parity: continuations' logprobs differ from the trainer's by %.3f nats a token on average "
                "(max %.3f, %d tokens of %d actions; threshold %.3f): the engine samples another policy than "
                "the one trained (sampling parameters, stale weights or tokenisation?)",
                self.stats.mean,
                self.stats.max_gap,
                self.stats.tokens,
                self.stats.actions,
                self.threshold,
            )
        return self.stats

    def metrics(self) -> dict[str, float]:
        """The accumulated figures, unprefixed (``Report.metrics`` adds ``prover/``)."""
        s = self.stats
        return {
            "engine_logprob_gap_mean": s.mean,
            "engine_logprob_gap_max": s.max_gap,
            "engine_logprob_gap_tokens": float(s.tokens),
            "engine_logprob_gap_actions": float(s.actions),
            "engine_logprob_unavailable": float(s.unavailable),
        }

    def reset(self) -> None:
        """Forget the figures and anything not yet scored (once per training step)."""
        self.stats = ParityStats()
        self.pending = []


def merge_metrics(parts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One set of :meth:`ParityMonitor.metrics` from several processes' (counts summed, max of maxima,
    the mean weighted by tokens); other keys are summed."""
    out: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = max(out.get(key, 0.0), value) if key == "engine_logprob_gap_max" else out.get(key, 0.0) + value
    if "engine_logprob_gap_mean" in out:
        tokens = sum(p.get("engine_logprob_gap_tokens", 0.0) for p in parts)
        weighted = sum(p.get("engine_logprob_gap_mean", 0.0) * p.get("engine_logprob_gap_tokens", 0.0) for p in parts)
        out["engine_logprob_gap_mean"] = weighted / tokens if tokens else 0.0
    return out
