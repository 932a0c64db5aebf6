"""Acceptance rules against exact probabilities: closed forms, hand values and sampling error."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prover_core import ProverConfig
from prover_core.acceptance import (
    RULES,
    AcceptanceRule,
    acceptance_probability,
    clopper_pearson_lower,
    clopper_pearson_upper,
    prob_post_greater,
)
from tests.verify_support import bernoulli, run_many


def acceptance_rate(config: ProverConfig, p_pre: float, p_post: float, runs: int) -> tuple[float, float]:
    """Empirical (acceptance rate, mean credited Delta) over ``runs`` verifications with different seeds."""
    res = [(v.accepted, v.delta if v.accepted else 0.0) for v, _ in run_many(config, bernoulli(p_pre, p_post), runs)]
    return sum(a for a, _ in res) / runs, sum(d for _, d in res) / runs


def test_posterior_probability_matches_numerical_integration() -> None:
    grid = np.linspace(0, 1, 20001)
    for x, m, y, n in [(0, 8, 0, 8), (1, 8, 3, 8), (3, 8, 1, 8), (2, 5, 4, 7), (8, 8, 8, 8)]:
        pre = grid**x * (1 - grid) ** (m - x)
        post = grid**y * (1 - grid) ** (n - y)
        pre, post = pre / np.trapezoid(pre, grid), post / np.trapezoid(post, grid)
        cdf_pre = np.concatenate([[0.0], np.cumsum((pre[1:] + pre[:-1]) / 2 * np.diff(grid))])
        numeric = float(np.trapezoid(post * cdf_pre, grid))  # P(p_pre < p_post)
        assert prob_post_greater(x, m, y, n) == pytest.approx(numeric, abs=1e-4)


@given(st.integers(1, 12), st.integers(1, 12), st.data())
def test_posterior_probabilities_are_complementary(m: int, n: int, data: st.DataObject) -> None:
    x, y = data.draw(st.integers(0, m)), data.draw(st.integers(0, n))
    assert prob_post_greater(x, m, y, n) + prob_post_greater(y, n, x, m) == pytest.approx(1.0, abs=1e-9)


def test_clopper_pearson_hand_values() -> None:
    # x = 0 of n: upper bound solves (1 - U)^n = a; x = n: lower bound solves L^n = a.
    assert clopper_pearson_upper(0, 8, 0.05) == pytest.approx(1 - 0.05 ** (1 / 8), abs=1e-9)
    assert clopper_pearson_lower(8, 8, 0.05) == pytest.approx(0.05 ** (1 / 8), abs=1e-9)
    assert clopper_pearson_lower(0, 8, 0.05) == 0.0 and clopper_pearson_upper(8, 8, 0.05) == 1.0
    low = clopper_pearson_lower(3, 8, 0.05)  # P(Bin(8, L) >= 3) = 0.05
    tail = sum(math.comb(8, j) * low**j * (1 - low) ** (8 - j) for j in range(3, 9))
    assert tail == pytest.approx(0.05, abs=1e-9)


def test_delta_positive_null_rate_closed_form() -> None:
    """K = 8, p = 1/2: P(Delta > 0) = (1 - C(16, 8) / 4^8) / 2 = 0.40181; false bonus in the paper's 0.06-0.10."""
    rule = AcceptanceRule("delta_positive")
    prob, bonus = acceptance_probability(rule, 0.5, 0.5, 8)
    assert prob == pytest.approx((1 - math.comb(16, 8) / 4**8) / 2, abs=1e-12)
    pmf = [math.comb(8, j) / 2**8 for j in range(9)]  # by symmetry E[Delta 1{Delta > 0}] = E|Delta| / 2
    assert bonus == pytest.approx(sum(a * b * abs(i - j) / 8 for i, a in enumerate(pmf) for j, b in enumerate(pmf)) / 2)
    for p in (0.3, 0.5, 0.7):
        assert 0.32 <= acceptance_probability(rule, p, p, 8)[0] <= 0.41
        assert 0.06 <= acceptance_probability(rule, p, p, 8)[1] <= 0.10


def test_null_rates_are_ordered_and_the_bound_is_valid() -> None:
    for p in np.linspace(0.05, 0.95, 19):
        rates = {name: acceptance_probability(AcceptanceRule(name), p, p, 8)[0] for name in RULES}
        assert rates["lower_confidence_bound"] <= rates["beta_posterior"] <= rates["delta_positive"]
        assert 0.0 < rates["beta_posterior"] <= 0.11  # the reference's "about 0.02-0.11"
        for alpha in (0.05, 0.1, 0.3):  # the Clopper-Pearson rule is valid under every null p_post <= p_pre
            for lower in (p, max(0.0, p - 0.2)):
                assert (
                    acceptance_probability(AcceptanceRule("lower_confidence_bound", alpha=alpha), p, lower, 8)[0]
                    <= alpha
                )


def test_perfect_common_random_numbers_give_no_false_credit() -> None:
    for name in RULES:
        assert acceptance_probability(AcceptanceRule(name), 0.4, 0.4, 8, "shared_uniform") == (0.0, 0.0)
    # and with a real gain every pair is ordered, so Delta > 0 unless no pair is discordant: 1 - (1 - 0.5)^8
    prob, _ = acceptance_probability(AcceptanceRule(), 0.2, 0.7, 8, "shared_uniform")
    assert prob == pytest.approx(1 - 0.5**8, abs=1e-12)


@pytest.mark.parametrize("name", RULES)
@pytest.mark.parametrize(("p_pre", "p_post"), [(0.5, 0.5), (0.3, 0.3), (0.2, 0.7), (0.4, 0.6)])
def test_pipeline_acceptance_matches_exact_value(name: str, p_pre: float, p_post: float) -> None:
    """Null acceptance and power through verify_segment, within 4 standard errors of the exact value."""
    runs = 1000
    config = ProverConfig(k=8, acceptance=name, paired_seeds=False)
    exact, exact_bonus = acceptance_probability(AcceptanceRule(name), p_pre, p_post, 8)
    rate, bonus = acceptance_rate(config, p_pre, p_post, runs)
    se = math.sqrt(max(exact * (1 - exact), 1e-4) / runs)
    assert abs(rate - exact) < 4 * se + 1e-3
    assert abs(bonus - exact_bonus) < 4 * math.sqrt(max(exact, 1e-3) / runs) + 1e-3


def test_paired_pipeline_matches_shared_uniform_coupling() -> None:
    rate, _ = acceptance_rate(ProverConfig(k=8), 0.5, 0.5, 300)
    assert rate == 0.0  # R_pre,i = R_post,i for every pair: Delta = 0 exactly
    exact, _ = acceptance_probability(AcceptanceRule("beta_posterior"), 0.2, 0.7, 8, "shared_uniform")
    rate, _ = acceptance_rate(ProverConfig(k=8, acceptance="beta_posterior"), 0.2, 0.7, 1000)
    assert abs(rate - exact) < 4 * math.sqrt(exact * (1 - exact) / 1000)


def test_rule_reasons_and_config_wiring() -> None:
    ok, reason = AcceptanceRule("beta_posterior", threshold=0.9).decide(1, 8, 5, 8)
    assert ok == (prob_post_greater(1, 8, 5, 8) >= 0.9) and "P(p_post > p_pre)" in reason
    ok, reason = AcceptanceRule("lower_confidence_bound", alpha=0.1).decide(0, 8, 8, 8)
    assert ok and "lower bound" in reason  # 0.05^(1/8) = 0.688 > 1 - 0.05^(1/8) = 0.312
    assert not AcceptanceRule("lower_confidence_bound", alpha=0.1).decide(2, 8, 6, 8)[0]
    with pytest.raises(ValueError, match="unknown acceptance rule"):
        AcceptanceRule("maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="invalid counts"):
        AcceptanceRule().decide(9, 8, 0, 8)
    with pytest.raises(ValueError):
        ProverConfig(acceptance="beta_posterior", sampling="adaptive")
    with pytest.raises(ValueError):
        ProverConfig(posterior_threshold=1.0)


def test_a_drop_is_the_gain_with_pre_and_post_swapped() -> None:
    rule = AcceptanceRule()
    assert rule.accept(3, 4, 1, 4) == (False, "Delta = -0.500 <= 0")
    assert rule.accept(3, 4, 1, 4, "drop") == (True, "drop (roles of pre and post swapped): Delta = +0.500 > 0")
    assert rule.accept(1, 4, 3, 4, "drop")[0] is False and rule.accept(1, 4, 3, 4)[0] is True
