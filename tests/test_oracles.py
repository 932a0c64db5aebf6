"""Every decision rule against an independent oracle: tables over every outcome at small K.

The oracles here never call the library's decision code. Each rule is recomputed by a second method:

- ``delta_positive``: ``y/n > x/m`` as the integer comparison ``y m > x n``.
- ``beta_posterior``: ``P(p_post > p_pre)`` as an exact fraction, through the binomial form of the Beta CDF
  (``P(Beta(a, b) > t) = P(Bin(a + b - 1, t) <= a - 1)``) integrated term by term against the pre posterior
  (``int t^i (1 - t)^j dt = i! j! / (i + j + 1)!``), not the library's finite sum.
- ``lower_confidence_bound``: the two one-sided bounds at level ``a = alpha/2`` are disjoint iff
  ``max_p min(P(Bin(n, p) >= y), P(Bin(m, p) <= x)) < a`` (the first tail rises in ``p``, the second falls: the
  maximum is at their crossing, found here by bisection on their difference, never on either bound).
- curtailment: a boundary is hopeless iff no outcome of the other one (any count it may finish, any successes)
  is accepted by the oracle, by brute force.
- the adaptive test: its evidence from the module's formulas, its curtailment by brute force over every future
  (the accept boundary reachable on no path), its exact operating characteristics by a pair-by-pair recursion
  (the library's dynamic programme goes round by round).

The pipeline (:func:`verify_segment_detailed`) is then run on every outcome vector at small K, with a continuer
that plays that vector, and its decision, curtailment and spend are compared with the tables.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from fractions import Fraction
from functools import cache

import pytest

from prover_core import ProverConfig, Segment
from prover_core.acceptance import AcceptanceRule, acceptance_probability, prob_post_greater
from prover_core.continuations import hook_continuer
from prover_core.curtail import hopeless
from prover_core.sequential import SequentialTest, operating_characteristics
from prover_core.verify import continuation_seeds, verify_segment_detailed
from tests.conftest import make_trajectory

Oracle = Callable[[int, int, int, int], bool]
"""``(x, m, y, n) -> accept?`` for pre ``x/m`` and post ``y/n``."""

# ------------------------------------------------------------------------------------------------ fixed-K rules


def delta_positive(x: int, m: int, y: int, n: int) -> bool:
    return y * m > x * n


def _beta_integral(i: int, j: int) -> Fraction:
    """``int_0^1 t^i (1 - t)^j dt = i! j! / (i + j + 1)!``."""
    return Fraction(math.factorial(i) * math.factorial(j), math.factorial(i + j + 1))


@cache
def posterior_gain(x: int, m: int, y: int, n: int) -> Fraction:
    """Exact ``P(p_post > p_pre)`` with ``p_pre ~ Beta(x+1, m-x+1)``, ``p_post ~ Beta(y+1, n-y+1)``.

    ``P(p_post > t) = P(Bin(n + 1, t) <= y)``; integrate each binomial term against the pre density.
    """
    norm = _beta_integral(x, m - x)
    total = sum(
        (math.comb(n + 1, j) * _beta_integral(x + j, m - x + n + 1 - j) for j in range(y + 1)), start=Fraction(0)
    )
    return total / norm


def beta_posterior(threshold: float) -> Oracle:
    def decide(x: int, m: int, y: int, n: int) -> bool:
        prob = posterior_gain(x, m, y, n)
        assert abs(float(prob) - threshold) > 1e-9, "a near tie: the table would test rounding, not the rule"
        return prob >= Fraction(threshold)

    return decide


def _upper_tail(y: int, n: int, p: float) -> float:
    """``P(Bin(n, p) >= y)``."""
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(y, n + 1))


def _lower_tail(x: int, m: int, p: float) -> float:
    """``P(Bin(m, p) <= x)``."""
    return sum(math.comb(m, j) * p**j * (1 - p) ** (m - j) for j in range(x + 1))


@cache
def crossing_level(x: int, m: int, y: int, n: int) -> float:
    """``max_p min(P(Bin(n, p) >= y), P(Bin(m, p) <= x))``, at the crossing of the two tails."""
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if _upper_tail(y, n, mid) < _lower_tail(x, m, mid):
            lo = mid
        else:
            hi = mid
    return max(min(_upper_tail(y, n, p), _lower_tail(x, m, p)) for p in (lo, hi))


def lower_confidence_bound(alpha: float) -> Oracle:
    def decide(x: int, m: int, y: int, n: int) -> bool:
        level = crossing_level(x, m, y, n)
        assert abs(level - alpha / 2) > 1e-9, "a near tie: the table would test rounding, not the rule"
        return level < alpha / 2

    return decide


RULES: list[tuple[AcceptanceRule, Oracle]] = [
    (AcceptanceRule("delta_positive"), delta_positive),
    *[(AcceptanceRule("beta_posterior", threshold=t), beta_posterior(t)) for t in (0.62, 0.83, 0.91, 0.97)],
    *[(AcceptanceRule("lower_confidence_bound", alpha=a), lower_confidence_bound(a)) for a in (0.05, 0.1, 0.2, 0.4)],
]
RULE_IDS = [f"{r.name}-{r.threshold if r.name == 'beta_posterior' else r.alpha}" for r, _ in RULES]
COUNTS = [(x, m, y, n) for m in range(1, 7) for n in range(1, 7) for x in range(m + 1) for y in range(n + 1)]
"""Every pre ``x/m`` and post ``y/n`` with 1..6 finished continuations per boundary (failures shrink a count)."""


def config_of(rule: AcceptanceRule, **extra: object) -> ProverConfig:
    return ProverConfig(
        acceptance=rule.name,
        posterior_threshold=rule.threshold,
        lcb_alpha=rule.alpha,
        **extra,  # type: ignore[arg-type]
    )


def test_the_oracles_hand_values() -> None:
    """The oracles themselves, on values worked by hand."""
    # Beta(1,1) priors, nothing seen: P(p_post > p_pre) = 1/2; 0/1 vs 1/1: Beta(1,2) vs Beta(2,1): 5/6
    assert posterior_gain(0, 0, 0, 0) == Fraction(1, 2) and posterior_gain(0, 1, 1, 1) == Fraction(5, 6)
    assert posterior_gain(0, 1, 0, 1) == Fraction(1, 2)
    # 0/8 vs 8/8: the tails cross where p^8 = (1 - p)^8, p = 1/2, at 2^-8
    assert crossing_level(0, 8, 8, 8) == pytest.approx(0.5**8, rel=1e-12)
    # the named case: pre 0/8, post 5/8 is rejected at alpha = 0.1 (the bounds at 0.05 overlap) but would be
    # accepted at 0.1 (a wrong level): the crossing lies between the two
    assert 0.05 < crossing_level(0, 8, 5, 8) < 0.1
    assert not lower_confidence_bound(0.1)(0, 8, 5, 8)


@pytest.mark.parametrize(("rule", "oracle"), RULES, ids=RULE_IDS)
def test_every_rule_decides_every_outcome_as_its_oracle(rule: AcceptanceRule, oracle: Oracle) -> None:
    wrong = [(x, m, y, n) for x, m, y, n in COUNTS if rule.decide(x, m, y, n)[0] != oracle(x, m, y, n)]
    assert not wrong, f"{rule}: {len(wrong)} outcomes decided unlike the oracle, e.g. {wrong[:5]}"
    # and the table is not trivial: every rule accepts some outcome and rejects another
    decisions = {oracle(x, m, y, n) for x, m, y, n in COUNTS}
    assert decisions == {True, False}


def test_the_posterior_rule_accepts_at_its_threshold() -> None:
    """``P(p_post > p_pre) >= threshold``: a probability equal to the threshold is accepted, one just below is not.
    The cases are those whose exact probability the library's float sum reproduces to the last bit."""
    exact = [(c, float(posterior_gain(*c))) for c in COUNTS if 0 < posterior_gain(*c) < 1]
    ties = [(c, p) for c, p in exact if prob_post_greater(*c) == p]
    assert len(ties) >= 10
    for (x, m, y, n), p in ties:
        assert AcceptanceRule("beta_posterior", threshold=p).decide(x, m, y, n)[0], (x, m, y, n)
        assert not AcceptanceRule("beta_posterior", threshold=math.nextafter(p, 1.0)).decide(x, m, y, n)[0]


@pytest.mark.parametrize(("rule", "oracle"), RULES[::2], ids=RULE_IDS[::2])
def test_a_drop_is_the_gain_with_the_roles_swapped(rule: AcceptanceRule, oracle: Oracle) -> None:
    config = config_of(rule)
    for x, m, y, n in COUNTS:
        built = config.stages.verify.rule
        assert built.accept(x, m, y, n, "gain")[0] == oracle(x, m, y, n)
        assert built.accept(x, m, y, n, "drop")[0] == oracle(y, n, x, m)


def _pmf(k: int, p: float) -> list[float]:
    return [math.comb(k, j) * p**j * (1 - p) ** (k - j) for j in range(k + 1)]


@pytest.mark.parametrize(("rule", "oracle"), RULES[::2], ids=RULE_IDS[::2])
def test_acceptance_probability_by_brute_force_over_outcome_vectors(rule: AcceptanceRule, oracle: Oracle) -> None:
    """``P(accept)`` and ``E[Delta 1{accept}]`` summed over all ``2^(2K)`` independent outcome vectors, and over
    the ``3^K`` pair types of one shared uniform per pair (both succeed, only the higher rate side, neither)."""
    k = 4
    for p_pre, p_post in [(0.3, 0.3), (0.2, 0.7), (0.6, 0.35), (0.5, 0.9)]:
        prob = bonus = 0.0
        for outcomes in itertools.product((0, 1), repeat=2 * k):
            pre, post = outcomes[:k], outcomes[k:]
            weight = math.prod(p_pre if r else 1 - p_pre for r in pre) * math.prod(
                p_post if r else 1 - p_post for r in post
            )
            if oracle(sum(pre), k, sum(post), k):
                prob += weight
                bonus += weight * (sum(post) - sum(pre)) / k
        assert acceptance_probability(rule, p_pre, p_post, k) == pytest.approx((prob, bonus), abs=1e-12)
        low, high = sorted((p_pre, p_post))
        prob = bonus = 0.0
        for kinds in itertools.product((0, 1, 2), repeat=k):  # 0 both succeed, 1 only the higher rate, 2 neither
            weight = math.prod((low, high - low, 1 - high)[c] for c in kinds)
            hi_wins, lo_wins = sum(c <= 1 for c in kinds), sum(c == 0 for c in kinds)
            x, y = (lo_wins, hi_wins) if p_post >= p_pre else (hi_wins, lo_wins)
            if oracle(x, k, y, k):
                prob += weight
                bonus += weight * (y - x) / k
        assert acceptance_probability(rule, p_pre, p_post, k, "shared_uniform") == pytest.approx(
            (prob, bonus), abs=1e-12
        )


# -------------------------------------------------------------------------------------------------- curtailment


def hopeless_oracle(first: int, count: int, k: int, need: int, oracle: Oracle) -> bool:
    """No outcome of the second boundary (``need..k`` finished, any successes) is accepted.

    The first boundary is the one acceptance needs higher: post for a gain, pre for a drop (whose rule is the gain's
    with pre and post swapped), so either way it takes the oracle's post place."""
    return not any(oracle(s, c, first, count) for c in range(need, k + 1) for s in range(c + 1))


@pytest.mark.parametrize(("rule", "oracle"), RULES, ids=RULE_IDS)
def test_hopeless_is_exactly_when_no_outcome_of_the_other_boundary_is_accepted(
    rule: AcceptanceRule, oracle: Oracle
) -> None:
    for k in range(2, 7):
        for need in range(1, k + 1):
            config = config_of(rule, k=k, min_finished=need)
            for count in range(need, k + 1):
                for first in range(count + 1):
                    for direction in ("gain", "drop"):
                        want = hopeless_oracle(first, count, k, need, oracle)
                        got = hopeless(first, count, config.k, config.stages.verify.rule, direction)
                        assert got == want, (k, need, first, count, direction)


# ------------------------------------------------------------------------------------- the pipeline on every outcome

TRAJ = make_trajectory("o", "g", True, list("abcde"))
SEG = Segment(trajectory_id="o", start=1, end=2)  # pre boundary: turn 1, post boundary: turn 3


def playing(config: ProverConfig, pre: Sequence[int | None], post: Sequence[int | None]) -> Callable[..., bool]:
    """A ``continue_from`` giving continuation ``i`` of each boundary the outcome ``pre[i]`` / ``post[i]`` (``None``:
    it raises, a failed continuation)."""
    pre_seeds, post_seeds = continuation_seeds(config.stages.verify, TRAJ, len(pre))
    index = {SEG.start: {s: i for i, s in enumerate(pre_seeds)}, SEG.end + 1: {s: i for i, s in enumerate(post_seeds)}}
    assert all(len(v) == len(pre) for v in index.values())
    plays = {SEG.start: pre, SEG.end + 1: post}

    def go(trajectory: object, turn: int, seed: int) -> bool:
        outcome = plays[turn][index[turn][seed]]
        if outcome is None:
            raise RuntimeError("the simulator crashed")
        return bool(outcome)

    return go


Cases = Sequence[tuple[Sequence[int | None], Sequence[int | None]]]


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail, instead of hanging, when the code under test loops for ever (a round that draws no pair, say): the
    alarm interrupts even a loop that never yields to the event loop, and rings again every second after the
    deadline, for every verification of the batch that enters the same loop."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s: an endless loop?")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_all(config: ProverConfig, cases: Cases, direction: str) -> list:  # type: ignore[type-arg]
    async def go() -> list:  # type: ignore[type-arg]
        return await asyncio.gather(
            *(
                verify_segment_detailed(
                    TRAJ, SEG, hook_continuer(playing(config, pre, post)), config.stages.verify, None, direction
                )  # type: ignore[arg-type]
                for pre, post in cases
            )
        )

    with deadline(60):  # each call takes a few seconds
        return asyncio.run(go())


@pytest.mark.parametrize(
    ("rule", "oracle"), [RULES[0], RULES[2], RULES[6]], ids=[RULE_IDS[0], RULE_IDS[2], RULE_IDS[6]]
)
@pytest.mark.parametrize("direction", ["gain", "drop"])
def test_fixed_k_pipeline_on_every_outcome_vector(rule: AcceptanceRule, oracle: Oracle, direction: str) -> None:
    """K = 2..4, every pre and post outcome vector, curtailment off, overlapped and waiting: the verification is
    accepted as the oracle says; curtailed exactly when the first boundary is hopeless by brute force."""
    for k in (2, 3, 4):
        vectors = list(itertools.product((0, 1), repeat=k))
        cases = [(pre, post) for pre in vectors for post in vectors]
        for curtail, mode in [(False, "overlap"), (True, "overlap"), (True, "wait")]:
            config = config_of(rule, k=k, curtail=curtail, curtail_mode=mode)
            for (pre, post), (v, stats) in zip(cases, run_all(config, cases, direction), strict=True):
                x, y = sum(pre), sum(post)
                first = y if direction == "gain" else x
                want = oracle(x, k, y, k) if direction == "gain" else oracle(y, k, x, k)
                cut = curtail and hopeless_oracle(first, k, k, k, oracle)
                assert (v.accepted, v.curtailed) == (want and not cut, cut), (k, pre, post, curtail, mode)
                assert not v.incomplete and stats.stop == ("curtailed" if cut else "fixed")
                if not cut:
                    assert (v.pre_successes, v.pre_count, v.post_successes, v.post_count) == (x, k, y, k)
                    assert stats.spent == 2 * k
                elif mode == "wait":
                    assert stats.spent == k  # the second boundary never started


# ------------------------------------------------------------------------------------------- the adaptive test


class Adaptive:
    """The adaptive test recomputed from the formulas of :mod:`prover_core.sequential`'s docstring."""

    def __init__(self, test: SequentialTest) -> None:
        self.t = test
        d = test.min_effect
        self.futility = test.futility_grid or (d / 8, d / 4, d / 2)

    def w(self, plus: int, minus: int) -> float:
        grid = self.t.accept_grid
        return math.fsum((2 * q) ** plus * (2 * (1 - q)) ** minus for q in grid) / len(grid)

    def v(self, plus: int, pairs: int) -> float:
        d = self.t.min_effect
        return math.fsum((r / d) ** plus * ((1 - r) / (1 - d)) ** (pairs - plus) for r in self.futility) / len(
            self.futility
        )

    def ends(self, drawn: int) -> int:
        """Pairs drawn after the round that starts at ``drawn``."""
        return min(drawn + self.t.round_pairs, self.t.max_pairs)

    def stop(self, plus: int, minus: int, pairs: int, drawn: int) -> str | None:
        """The stop at the end of a round (``None``: go on), without curtailment. ``pairs`` counts the complete pairs
        (the evidence), ``drawn`` also those lost to a failed continuation (the budget)."""
        w, v = self.w(plus, minus), self.v(plus, pairs)
        for value, bound in ((w, 1 / self.t.alpha), (v, 1 / self.t.beta)):
            assert abs(value - bound) > 1e-9 * bound, "a near tie: the table would test rounding, not the rule"
        if w >= 1 / self.t.alpha:
            return "accept"
        if v >= 1 / self.t.beta:
            return "futile"
        if drawn >= self.t.max_pairs:
            return "budget"
        return None

    @cache  # noqa: B019 (a few small instances per test)
    def reachable(self, plus: int, minus: int, pairs: int, drawn: int) -> bool:
        """Whether some future of pairs (each +1, -1, 0 or lost) from a round end that did not stop reaches accept."""
        nxt = self.ends(drawn)
        b = nxt - drawn
        for plus_new in range(b + 1):
            for minus_new in range(b - plus_new + 1):
                for lost in range(b - plus_new - minus_new + 1):
                    p, m, n = plus + plus_new, minus + minus_new, pairs + b - lost
                    stop = self.stop(p, m, n, nxt)
                    if stop == "accept" or (stop is None and self.reachable(p, m, n, nxt)):
                        return True
        return False

    def decide(self, plus: int, minus: int, drawn: int, pairs: int | None = None) -> str:
        pairs = drawn if pairs is None else pairs
        stop = self.stop(plus, minus, pairs, drawn)
        if stop is not None:
            return stop
        return "continue" if self.reachable(plus, minus, pairs, drawn) else "curtailed"

    def run(self, signs: Sequence[int | None], allowed_failures: int = 0) -> tuple[str, int, int, int]:
        """``(stop, pairs drawn, +1 pairs, -1 pairs)`` on a sequence of pair signs played round by round; ``None``
        is a pair whose pre continuation failed: ``incomplete`` once more than ``allowed_failures`` of the drawn
        pre continuations failed, or none finished."""
        drawn = plus = minus = 0
        while True:
            nxt = self.ends(drawn)
            plus += sum(s == 1 for s in signs[drawn:nxt])
            minus += sum(s == -1 for s in signs[drawn:nxt])
            drawn = nxt
            lost = sum(s is None for s in signs[:drawn])
            if lost > allowed_failures or lost == drawn:
                return "incomplete", drawn, plus, minus
            decision = self.decide(plus, minus, drawn, drawn - lost)
            if decision != "continue":
                return decision, drawn, plus, minus

    def characteristics(self, p_plus: float, p_minus: float) -> tuple[float, float, dict[str, float]]:
        """Exact ``(P(accept), E[pairs], P(each stop))``, one pair at a time."""
        stops: dict[str, float] = {}
        pairs = 0.0
        p_zero = 1 - p_plus - p_minus

        def walk(plus: int, minus: int, drawn: int, end: int, prob: float) -> None:
            nonlocal pairs
            if drawn == end:
                decision = self.decide(plus, minus, drawn)
                if decision != "continue":
                    stops[decision] = stops.get(decision, 0.0) + prob
                    pairs += prob * drawn
                    return
                end = self.ends(drawn)
            for dp, dm, w in ((1, 0, p_plus), (0, 1, p_minus), (0, 0, p_zero)):
                if w > 0:
                    walk(plus + dp, minus + dm, drawn + 1, end, prob * w)

        walk(0, 0, 0, self.ends(0), 1.0)
        return stops.get("accept", 0.0), pairs, stops


TESTS = [
    SequentialTest(),
    SequentialTest(max_pairs=6, round_pairs=1),
    SequentialTest(max_pairs=6, round_pairs=2),
    SequentialTest(max_pairs=7, round_pairs=3),
    SequentialTest(alpha=0.2, beta=0.3, min_effect=0.4, max_pairs=5, round_pairs=1),
    SequentialTest(alpha=0.1, max_pairs=8, round_pairs=2, accept_grid=(0.55, 0.8), futility_grid=(0.1, 0.3)),
]


@pytest.mark.parametrize("test", TESTS, ids=[f"a{t.alpha}-max{t.max_pairs}-round{t.round_pairs}" for t in TESTS])
def test_every_round_end_decides_as_the_oracle(test: SequentialTest) -> None:
    """Every state a round can end in, pairs lost to failures included: accept, futile, budget, curtailed (by brute
    force over futures) or go on."""
    oracle = Adaptive(test)
    seen: set[str] = set()
    ends = sorted({oracle.ends(d) for d in range(test.max_pairs)})
    for drawn in ends:
        for pairs in range(drawn + 1):  # pairs < drawn: some lost to a failed continuation
            for plus in range(pairs + 1):
                for minus in range(pairs - plus + 1):
                    want = oracle.decide(plus, minus, drawn, pairs)
                    assert test.decide(plus, minus, pairs, drawn) == want, (plus, minus, pairs, drawn)
                    seen.add(want)
    assert {"accept", "curtailed", "continue"} <= seen


@pytest.mark.parametrize("test", TESTS, ids=[f"a{t.alpha}-max{t.max_pairs}-round{t.round_pairs}" for t in TESTS])
@pytest.mark.parametrize(("p_plus", "p_minus"), [(0.0, 0.0), (0.2, 0.2), (0.5, 0.1), (0.65, 0.0), (0.1, 0.6)])
def test_operating_characteristics_by_a_pair_by_pair_recursion(
    test: SequentialTest, p_plus: float, p_minus: float
) -> None:
    accept_prob, pairs, stops = Adaptive(test).characteristics(p_plus, p_minus)
    oc = operating_characteristics(test, p_plus, p_minus)
    assert oc.accept == pytest.approx(accept_prob, abs=1e-12)
    assert oc.expected_pairs == pytest.approx(pairs, abs=1e-12)
    assert oc.stops == pytest.approx(stops, abs=1e-12)


def _pair_outcomes(signs: Sequence[int]) -> tuple[list[int], list[int]]:
    """Pre and post outcomes of pairs with these signs (a concordant pair alternates (1, 1) and (0, 0))."""
    pre, post = [], []
    for i, s in enumerate(signs):
        a, b = {1: (0, 1), -1: (1, 0), 0: (i % 2, i % 2)}[s]
        pre.append(a)
        post.append(b)
    return pre, post


@pytest.mark.parametrize(("k", "max_k", "rnd"), [(2, 4, 1), (4, 6, 2), (3, 5, 3)])
def test_adaptive_pipeline_on_every_sequence_of_pairs(k: int, max_k: int, rnd: int) -> None:
    """Every sequence of pair signs up to the budget through ``verify_segment_detailed``: the stop, the pairs drawn
    and the counts are the oracle's, for a gain and for a drop (the sequence mirrored)."""
    config = ProverConfig(k=k, sampling="adaptive", adaptive_max_k=max_k, adaptive_round=rnd)
    test = SequentialTest(max_pairs=max_k, round_pairs=rnd)
    oracle = Adaptive(test)
    sequences = list(itertools.product((1, -1, 0), repeat=max_k))
    stops = set()
    for direction in ("gain", "drop"):
        cases = []
        for signs in sequences:
            pre, post = _pair_outcomes(signs)
            cases.append((pre, post) if direction == "gain" else (post, pre))
        for signs, (pre, post), (v, stats) in zip(sequences, cases, run_all(config, cases, direction), strict=True):
            stop, drawn, plus, minus = oracle.run(signs)
            stops.add(stop)
            assert (stats.stop, stats.spent, stats.rounds) == (stop, 2 * drawn, -(-drawn // rnd)), signs
            assert v.accepted == (stop == "accept") and not v.incomplete
            assert (v.pre_count, v.post_count) == (drawn, drawn)
            assert (v.pre_successes, v.post_successes) == (sum(pre[:drawn]), sum(post[:drawn]))
            assert stats.accept_evidence == pytest.approx(oracle.w(plus, minus))
    assert {"accept", "curtailed"} <= stops  # futility needs longer runs than curtailment allows here


def test_adaptive_pipeline_with_failed_continuations() -> None:
    """Every sequence of 4 pairs, each +1, -1, 0 or with a failed pre continuation, one failure allowed per
    boundary: the evidence counts the complete pairs, the budget every drawn pair, and a second failure (or no
    finished continuation) makes the verification incomplete."""
    config = ProverConfig(
        k=2, min_finished=1, sampling="adaptive", adaptive_max_k=4, adaptive_round=1, adaptive_min_effect=0.8
    )
    oracle = Adaptive(SequentialTest(max_pairs=4, round_pairs=1, min_effect=0.8))
    sequences = list(itertools.product((1, -1, 0, None), repeat=4))
    cases = []
    for signs in sequences:
        pre, post = _pair_outcomes([0 if s is None else s for s in signs])
        cases.append(([None if s is None else a for s, a in zip(signs, pre, strict=True)], post))
    stops = set()
    for signs, (v, stats) in zip(sequences, run_all(config, cases, "gain"), strict=True):
        stop, drawn, _, _ = oracle.run(signs, allowed_failures=1)
        stops.add(stop)
        assert (stats.stop, stats.spent) == (stop, 2 * drawn), signs
        assert v.accepted == (stop == "accept") and v.incomplete == (stop == "incomplete")
        lost = sum(s is None for s in signs[:drawn])
        assert (v.pre_count, v.post_count, v.failed_continuations) == (drawn - lost, drawn, lost)
    assert {"accept", "futile", "budget", "curtailed", "incomplete"} <= stops
