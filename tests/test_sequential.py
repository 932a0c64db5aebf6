"""Adaptive sampling: the e-processes are supermartingales, the pipeline matches the exact dynamic
programme, false credit stays below alpha, and clear cases spend less than fixed K."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prover_core import DivergenceJudge, ProverConfig, compute_bonus
from prover_core.continuations import hook_continuer
from prover_core.demo import vault_policy
from prover_core.sequential import (
    SequentialState,
    SequentialTest,
    operating_characteristics,
    pair_probabilities,
)
from tests.verify_support import BATCH, SEG, bernoulli, make_restorable_env, run_many

ADAPTIVE = ProverConfig(k=8, sampling="adaptive")  # the K its figures (docs/verification.md) were measured at
TEST = ADAPTIVE.stages.verify.test
FIXED_SPEND = 2 * ADAPTIVE.k


def test_defaults() -> None:
    assert (TEST.alpha, TEST.beta, TEST.min_effect, TEST.max_pairs, TEST.round_pairs) == (0.3, 0.2, 0.5, 12, 2)


@pytest.mark.parametrize("q", [0.0, 0.2, 0.4, 0.5])
def test_accept_evidence_is_a_supermartingale_under_the_null(q: float) -> None:
    """E[W_{t+1} | past] <= W_t when P(+1 | discordant) = q <= 1/2 (equality at 1/2)."""
    for plus in range(8):
        for minus in range(8):
            now = TEST.accept_evidence(plus, minus)
            nxt = q * TEST.accept_evidence(plus + 1, minus) + (1 - q) * TEST.accept_evidence(plus, minus + 1)
            assert nxt <= now * (1 + 1e-12)
            if q == 0.5:
                assert nxt == pytest.approx(now)


@pytest.mark.parametrize("p", [0.5, 0.6, 0.9, 1.0])
def test_futility_evidence_is_a_supermartingale_when_the_gain_is_large(p: float) -> None:
    """E[V_{t+1} | past] <= V_t when P(D = +1) = p >= min_effect."""
    for pairs in range(10):
        for plus in range(pairs + 1):
            now = TEST.futility_evidence(plus, pairs)
            nxt = p * TEST.futility_evidence(plus + 1, pairs + 1) + (1 - p) * TEST.futility_evidence(plus, pairs + 1)
            assert nxt <= now * (1 + 1e-12)


def test_hand_values_of_the_evidence() -> None:
    # W after 3 +1 pairs: mean of (2q)^3 over q in (0.6, 0.75, 0.9, 0.99)
    expected = np.mean([(2 * q) ** 3 for q in (0.6, 0.75, 0.9, 0.99)])
    assert TEST.accept_evidence(3, 0) == pytest.approx(expected)
    assert TEST.decide(3, 0, 3) == "accept"  # 1/alpha = 3.33 < 4.67
    assert TEST.decide(2, 0, 2) == "continue"  # 2.71
    d = 0.5
    v4 = np.mean([((1 - r) / (1 - d)) ** 4 for r in (d / 8, d / 4, d / 2)])
    assert TEST.futility_evidence(0, 4) == pytest.approx(v4) and v4 >= 5
    assert TEST.decide(0, 0, 4) == "futile"


@pytest.mark.parametrize("coupling", ["independent", "shared_uniform"])
def test_false_credit_is_below_alpha_for_every_null(coupling: str) -> None:
    for p_pre in np.linspace(0.0, 1.0, 21):
        for gap in (0.0, 0.1, 0.3):
            p_post = max(0.0, p_pre - gap)
            oc = operating_characteristics(TEST, *pair_probabilities(p_pre, p_post, coupling))
            assert oc.accept <= TEST.alpha
            assert oc.accept <= 0.11  # the exact worst case on this grid is far below the bound
            assert sum(oc.stops.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("p_pre", "p_post", "paired"),
    [(0.5, 0.5, False), (0.3, 0.8, False), (0.1, 0.9, True), (0.2, 0.5, True), (0.6, 0.3, False)],
)
def test_pipeline_matches_the_exact_dynamic_programme(p_pre: float, p_post: float, paired: bool) -> None:
    runs = 800
    config = ADAPTIVE.model_copy(update={"paired_seeds": paired})
    coupling = "shared_uniform" if paired else "independent"
    oc = operating_characteristics(TEST, *pair_probabilities(p_pre, p_post, coupling))
    results = run_many(config, bernoulli(p_pre, p_post), runs)
    rate = np.mean([v.accepted for v, _ in results])
    spent = np.array([s.spent for _, s in results], dtype=float)
    assert abs(rate - oc.accept) < 4 * math.sqrt(max(oc.accept * (1 - oc.accept), 1e-4) / runs) + 1e-3
    assert abs(spent.mean() - 2 * oc.expected_pairs) < 4 * spent.std() / math.sqrt(runs) + 1e-3
    assert all(s.spent <= s.budget == 2 * TEST.max_pairs for _, s in results)
    assert all(s.sampling == "adaptive" and s.stop in oc.stops for _, s in results)


def test_clear_cases_spend_less_than_fixed_k() -> None:
    clear = [(0.1, 0.9), (0.05, 0.95), (0.5, 0.5), (0.3, 0.3), (0.8, 0.2)]
    for coupling in ("independent", "shared_uniform"):
        for p_pre, p_post in clear:
            oc = operating_characteristics(TEST, *pair_probabilities(p_pre, p_post, coupling))
            assert 2 * oc.expected_pairs < 0.85 * FIXED_SPEND, (p_pre, p_post, coupling, oc)
    # and through the pipeline, with decisions that are right
    for (p_pre, p_post), want in [((0.05, 0.95), True), ((0.5, 0.5), False), ((0.9, 0.1), False)]:
        results = run_many(ADAPTIVE, bernoulli(p_pre, p_post), 200)
        assert np.mean([s.spent for _, s in results]) < 0.7 * FIXED_SPEND
        assert np.mean([v.accepted for v, _ in results]) == pytest.approx(float(want), abs=0.05)


def test_at_least_30_percent_fewer_continuations_on_the_benchmark_mix() -> None:
    """The benchmark's Bernoulli mix (docs/verification.md): exact expected spend vs fixed K = 8."""
    total, n = 0.0, 0
    for coupling in ("independent", "shared_uniform"):
        for p in np.round(np.linspace(0.1, 0.9, 9), 2):
            for effect in (0.0, -0.2, -0.4, 0.2, 0.4, 0.6):
                if 0.0 <= p + effect <= 1.0:
                    oc = operating_characteristics(TEST, *pair_probabilities(p, p + effect, coupling))
                    total += oc.expected_pairs
                    n += 1
    assert total / n <= 0.7 * ADAPTIVE.k


def test_failures_stop_adaptive_sampling_without_credit() -> None:
    def flaky(t, turn, seed):  # type: ignore[no-untyped-def]
        if turn == SEG.end + 1 and seed % 4 == 0:
            raise RuntimeError("simulator crashed")
        return turn > SEG.start

    results = run_many(ADAPTIVE, hook_continuer(flaky), 50)
    hit = [(v, s) for v, s in results if s.failures]
    assert hit, "some seed must crash"
    for v, s in hit:
        assert v.incomplete and not v.accepted and s.stop == "incomplete" and "simulator crashed" in v.reason
        assert s.failures == {"error": v.failed_continuations} and s.spent < s.budget
    tolerant = ADAPTIVE.model_copy(update={"min_finished": 6})  # 2 failures allowed per boundary
    assert sum(v.accepted for v, _ in run_many(tolerant, hook_continuer(flaky), 50)) > sum(v.accepted for v, _ in hit)


def test_drop_direction_mirrors_gain() -> None:
    down = run_many(ADAPTIVE, bernoulli(0.95, 0.05), 100, direction="drop")
    assert all(v.accepted and v.delta < 0 and s.direction == "drop" for v, s in down)
    up = run_many(ADAPTIVE, bernoulli(0.05, 0.95), 100, direction="drop")
    assert not any(v.accepted for v, _ in up)


def test_state_and_validation() -> None:
    state = SequentialState(TEST)
    for pre, post in [(False, True), (True, True), (None, True), (True, False)]:
        state.add(pre, post)
    assert (state.drawn, state.pairs, state.plus, state.minus) == (4, 3, 1, 1)
    assert state.decide() in ("continue", "curtailed", "futile")
    with pytest.raises(ValueError):
        SequentialTest(alpha=0.0)
    with pytest.raises(ValueError):
        SequentialTest(accept_grid=(0.4,))
    with pytest.raises(ValueError):
        SequentialTest(min_effect=0.3, futility_grid=(0.3,))
    with pytest.raises(ValueError):
        operating_characteristics(TEST, 0.7, 0.7)
    with pytest.raises(ValueError):
        pair_probabilities(0.1, 0.2, "psychic")


def test_every_continuation_failing_is_incomplete_even_when_failures_are_allowed() -> None:
    def broken(t, turn, seed):  # type: ignore[no-untyped-def]
        raise RuntimeError("down")

    config = ADAPTIVE.model_copy(update={"min_finished": 1})
    ((v, s),) = run_many(config, hook_continuer(broken), 1)
    assert v.incomplete and not v.accepted and s.stop == "incomplete" and s.rounds == 1
    assert s.failures == {"error": 4} and s.spent == 4


def test_cost_bookkeeping_in_the_report() -> None:
    """Continuations and policy turns per step, as shares of the rollout, and the saving against fixed K."""
    fixed = compute_bonus(
        BATCH, judge=DivergenceJudge(), env=make_restorable_env(), policy=vault_policy(), config=ProverConfig(k=8)
    )
    adaptive = compute_bonus(
        BATCH, judge=DivergenceJudge(), env=make_restorable_env(), policy=vault_policy(), config=ADAPTIVE
    )
    rollout_turns = sum(t.num_turns for t in BATCH)
    for result in (fixed, adaptive):
        m = result.report.metrics(prefix="")
        stats = [g.verify_stats for g in result.report.groups if g.verify_stats is not None]
        verified = [g.verification for g in result.report.groups if g.verification is not None]
        assert stats and len(stats) == len(verified) == m["groups_verified"]
        assert m["continuations"] == sum(s.spent for s in stats)
        assert m["policy_turns"] == sum(v.policy_turns for v in verified) > 0
        assert result.report.rollout_turns == rollout_turns and result.report.rollout_episodes == len(BATCH)
        assert m["extra_turn_share"] == pytest.approx(m["policy_turns"] / rollout_turns)
        assert m["continuation_share"] == pytest.approx(m["continuations"] / len(BATCH))
        assert m["continuations_saved_share"] == pytest.approx(1 - m["continuations"] / (16 * len(stats)))
    assert fixed.report.metrics()["prover/continuations_saved_share"] == 0.0
    assert adaptive.report.metrics()["prover/continuations_saved_share"] > 0.3
    assert all(g.verify_stats.stop != "fixed" for g in adaptive.report.groups if g.verify_stats)
