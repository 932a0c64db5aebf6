"""Policy parity: do continuations sample the policy the trainer trains?

For a seeded sample of continuation actions (about one in ``every``; chosen by a hash of ``seed`` and
the action's context, so the choice does not depend on the order requests finish in), the engine's
log-probability of each sampled token, ``l_e(y_i) = log pi_engine(y_i | x, y_<i)`` (its generation's
``logprobs``: under the distribution the engine actually drew from), is compared with the trainer's
own, ``l_t(y_i)``, given by the user's ``score(context_ids, token_ids)`` at the same context. Over the
``n`` compared tokens, with ``d_i = l_e(y_i) - l_t(y_i)``::

    kl    = (1/n) * sum_i d_i                        (an unbiased estimate of KL(pi_engine || pi_trainer)
    kl_se = sqrt(s^2 / n),  s^2 = sum_i (d_i - kl)^2 / (n - 1)    a token, since y_i ~ pi_engine)
    gap_mean = (1/n) * sum_i |d_i|                   gap_max = max_i |d_i|

reported as ``engine_kl``, ``engine_kl_se``, ``engine_logprob_gap_mean``, ``engine_logprob_gap_max``,
``engine_logprob_gap_tokens`` (and ``engine_logprob_gap_actions``, ``engine_logprob_unavailable``:
sampled actions whose generation carried no logprobs, ``engine_logprob_gap_nonfinite``: tokens whose gap is not
finite, e.g. llama-server's ``prob: 0`` read as ``-inf``, left out of the figures above and warned about once, so a
diagnostic never discards a finished step). A warning is logged when the KL estimate is
above ``threshold`` with confidence, ``kl - 2 kl_se > threshold`` (at least 2 tokens).

Why the signed mean: numeric noise (bf16 against fp32, a quantised engine) moves ``d_i`` both ways
and its KL is second order in the noise (``gap_mean`` is first order: 0.05 nats a token for a 4-bit
engine against its dequantised weights, whose KL estimate is 0.003), while a wrong sampling parameter
shifts every ``d_i`` one way: top-k or top-p truncation gives ``d_i = -log(kept mass) >= 0``, stale
weights or a context the engine did not sample from a positive KL. The standard error keeps a rare
large ``d_i`` in a small sample from reading as a systematic gap. ``kl_se`` treats tokens as
independent (tokens of one action are not quite): a rough bound. Tokens 4-19 nats off, once seen on
llama-server, were not noise but such contexts: the server swapped a slot's KV cache under a request
in flight (fixed in :class:`~prover_engine.LlamaServerEngine`; docs/real-model.md); on the same
engine without that, no token of 2000 was 0.4 nats off.

Scoring is deferred: :meth:`ParityMonitor.offer` only records, :meth:`ParityMonitor.evaluate` calls
``score`` on what was recorded (once per step, after verification, so the trainer's model is free).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from prover_core.hosts import resolve
from prover_engine.protocol import Generation

__all__ = ["ParityMonitor", "ParitySample", "ParityStats", "kl_above", "merge_metrics"]

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
    signed_sum: float = 0.0
    square_sum: float = 0.0
    max_gap: float = 0.0
    unavailable: int = 0
    nonfinite: int = 0

    @property
    def mean(self) -> float:
        """``gap_mean = (1/n) sum |d_i|``."""
        return self.abs_sum / self.tokens if self.tokens else 0.0

    @property
    def kl(self) -> float:
        """``kl = (1/n) sum d_i``, the estimate of KL(engine || trainer) a token."""
        return self.signed_sum / self.tokens if self.tokens else 0.0

    @property
    def kl_se(self) -> float:
        """The standard error of :attr:`kl`, ``sqrt(s^2 / n)``; 0 below 2 tokens."""
        n = self.tokens
        if n < 2:
            return 0.0
        variance = max(0.0, (self.square_sum - n * self.kl**2) / (n - 1))
        return math.sqrt(variance / n)

    def above(self, threshold: float) -> bool:
        """Whether the KL is above ``threshold`` with confidence (:func:`kl_above`)."""
        return kl_above(self.kl, self.kl_se, self.tokens, threshold)


def kl_above(kl: float, kl_se: float, tokens: float, threshold: float) -> bool:
    """``kl - 2 kl_se > threshold`` over at least 2 tokens: the rule the monitor warns by (also for
    merged figures, e.g. a host's logged ``prover/engine_kl``, ``.../engine_kl_se``)."""
    return tokens >= 2 and kl - 2.0 * kl_se > threshold


class ParityMonitor:
    """Compares the engine's logprobs of sampled tokens with the trainer's (see the module docstring)."""

    def __init__(self, score: ScoreFn, *, every: int = 8, seed: int = 0, threshold: float = 0.05) -> None:
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
            every = [e - t for e, t in zip(sample.engine_logprobs, trainer, strict=True)]
            gaps = [g for g in every if math.isfinite(g)]
            if len(gaps) < len(every):
                self._nonfinite(len(every) - len(gaps), sample.engine_logprobs, trainer)
            if not gaps:
                continue
            self.stats.actions += 1
            self.stats.tokens += len(gaps)
            self.stats.abs_sum += sum(map(abs, gaps))
            self.stats.signed_sum += sum(gaps)
            self.stats.square_sum += sum(g * g for g in gaps)
            self.stats.max_gap = max(self.stats.max_gap, *map(abs, gaps))
        if pending and self.stats.above(self.threshold):
            logger.warning(
                "policy parity: continuations sample another policy than the one trained: KL(engine || trainer) "
                "is about %.3f +- %.3f nats a token, above %.3f (mean |gap| %.3f, max %.3f, %d tokens of %d "
                "actions); check the sampling parameters, the weights' version and the tokenisation",
                self.stats.kl,
                self.stats.kl_se,
                self.threshold,
                self.stats.mean,
                self.stats.max_gap,
                self.stats.tokens,
                self.stats.actions,
            )
        return self.stats

    def _nonfinite(self, count: int, engine: Sequence[float], trainer: Sequence[float]) -> None:
        """Count ``count`` tokens whose gap is not finite; warn about the first."""
        first = self.stats.nonfinite == 0
        self.stats.nonfinite += count
        if first:
            logger.warning(
                "policy parity: a logprob gap is not finite (engine %s, trainer %s); such tokens are counted in "
                "engine_logprob_gap_nonfinite and left out of the figures",
                list(engine[:8]),
                list(trainer[:8]),
            )

    def metrics(self) -> dict[str, float]:
        """The accumulated figures, unprefixed (``Report.metrics`` adds ``prover/``)."""
        s = self.stats
        return {
            "engine_kl": s.kl,
            "engine_kl_se": s.kl_se,
            "engine_logprob_gap_mean": s.mean,
            "engine_logprob_gap_max": s.max_gap,
            "engine_logprob_gap_tokens": float(s.tokens),
            "engine_logprob_gap_actions": float(s.actions),
            "engine_logprob_unavailable": float(s.unavailable),
            "engine_logprob_gap_nonfinite": float(s.nonfinite),
        }

    def reset(self) -> None:
        """Forget the figures and anything not yet scored (once per training step)."""
        self.stats = ParityStats()
        self.pending = []


_TOKEN_MEANS = ("engine_logprob_gap_mean", "engine_kl")


def merge_metrics(parts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One set of :meth:`ParityMonitor.metrics` from several processes' (independent samples).

    Counts are summed, ``gap_max`` is the max of maxima, the means are weighted by tokens
    (``sum_p n_p m_p / N``) and ``kl_se`` is that of the pooled mean, ``sqrt(sum_p (n_p se_p)^2) / N``;
    other keys are summed.
    """
    out: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = max(out.get(key, 0.0), value) if key == "engine_logprob_gap_max" else out.get(key, 0.0) + value
    tokens = sum(p.get("engine_logprob_gap_tokens", 0.0) for p in parts)
    for key in _TOKEN_MEANS:
        if key in out:
            weighted = sum(p.get(key, 0.0) * p.get("engine_logprob_gap_tokens", 0.0) for p in parts)
            out[key] = weighted / tokens if tokens else 0.0
    if "engine_kl_se" in out:
        pooled = sum((p.get("engine_kl_se", 0.0) * p.get("engine_logprob_gap_tokens", 0.0)) ** 2 for p in parts)
        out["engine_kl_se"] = math.sqrt(pooled) / tokens if tokens else 0.0
    return out
