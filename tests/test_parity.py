"""ParityMonitor: the engine's logprobs of sampled tokens against the trainer's, on a tiny exact model.

The engine is LlamaServerEngine over the llama-server double (tests/llama_server.py), whose logits are
``tiny_logits``; the "trainer" scores with the full softmax of the same logits (``tiny_logprobs``), so
every gap is worked out here from the logits alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from prover_core import ProverConfig
from prover_engine import EnginePolicy, Generation, LlamaServerEngine, ParityMonitor, SamplingParams
from tests.engine_support import key_group, parse, render, store_of, verify_key_group
from tests.llama_server import LlamaServer, tiny_logits, tiny_logprobs


def trainer_score(context: Sequence[int], tokens: Sequence[int]) -> list[float]:
    return tiny_logprobs(context, tokens)


def run_bonus(server: LlamaServer, sampling: SamplingParams, monitor: ParityMonitor) -> Any:
    rows = key_group("g", successes=1, size=4)
    engine = LlamaServerEngine(server.url, logprobs=True, slots=2, backoff_s=0.0, timeout_s=5.0)
    policy = EnginePolicy(
        engine, store_of(rows), render_observation=render, parse_action=parse, sampling=sampling, parity=monitor
    )
    return verify_key_group(rows, policy, ProverConfig(k=4, seed=3))


def test_the_gap_is_zero_when_the_engine_samples_the_trained_distribution() -> None:
    monitor = ParityMonitor(trainer_score, every=1)
    with LlamaServer() as server:
        result = run_bonus(server, SamplingParams(max_tokens=3), monitor)
    metrics = result.report.metrics()
    generated = sum(len(out) for _, out in server.exchanges)
    assert metrics["prover/engine_logprob_gap_tokens"] == generated > 0
    assert metrics["prover/engine_logprob_gap_actions"] == len(server.exchanges)
    assert metrics["prover/engine_logprob_gap_mean"] < 1e-9
    assert metrics["prover/engine_logprob_gap_max"] < 1e-9
    assert abs(metrics["prover/engine_kl"]) < 1e-9 and metrics["prover/engine_kl_se"] < 1e-9


def test_a_wrong_top_k_shows_as_the_mass_cut_off_and_trips_the_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Engine at top_k=5, trainer on the full softmax: each token's gap is logsumexp(z) - logsumexp(top-5 z),
    the KL of the truncated distribution from the full one (-log of the kept mass), never negative."""
    monitor = ParityMonitor(trainer_score, every=1, threshold=0.05)
    with LlamaServer() as server, caplog.at_level(logging.WARNING, logger="prover_engine.parity"):
        result = run_bonus(server, SamplingParams(max_tokens=3, top_k=5), monitor)
    expected = []
    for prompt, out in server.exchanges:
        context = list(prompt)
        for token in out:
            z = tiny_logits(context)
            expected.append(np.logaddexp.reduce(z) - np.logaddexp.reduce(np.sort(z)[-5:]))
            context.append(token)
    metrics = result.report.metrics()
    assert metrics["prover/engine_logprob_gap_tokens"] == len(expected)
    assert metrics["prover/engine_logprob_gap_mean"] == pytest.approx(float(np.mean(expected)), abs=1e-9)
    assert metrics["prover/engine_logprob_gap_max"] == pytest.approx(float(np.max(expected)), abs=1e-9)
    assert metrics["prover/engine_kl"] == pytest.approx(float(np.mean(expected)), abs=1e-9)
    se = float(np.std(expected, ddof=1) / np.sqrt(len(expected)))
    assert metrics["prover/engine_kl_se"] == pytest.approx(se, abs=1e-9)
    assert float(np.mean(expected)) - 2 * se > 0.05
    assert any("another policy than the one trained" in r.message for r in caplog.records)


def test_the_sample_is_about_one_in_every_seeded_and_independent_of_order() -> None:
    contexts = [[i, i + 1, i % 7] for i in range(2000)]
    monitor = ParityMonitor(trainer_score, every=8, seed=1)
    picked = {tuple(c) for c in contexts if monitor.chosen(c)}
    assert 2000 / 8 * 0.8 < len(picked) < 2000 / 8 * 1.2
    assert picked == {tuple(c) for c in reversed(contexts) if ParityMonitor(trainer_score, every=8, seed=1).chosen(c)}
    assert picked != {tuple(c) for c in contexts if ParityMonitor(trainer_score, every=8, seed=2).chosen(c)}
    assert all(ParityMonitor(trainer_score, every=1).chosen(c) for c in contexts[:10])


def test_actions_without_logprobs_are_counted_and_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    monitor = ParityMonitor(trainer_score, every=1)
    with caplog.at_level(logging.WARNING, logger="prover_engine.parity"):
        assert not monitor.offer([1, 2], Generation((3, 4)))
        assert not monitor.offer([1, 2], Generation((3, 4)))
    assert monitor.metrics()["engine_logprob_unavailable"] == 2 and monitor.pending == []
    assert sum("no logprobs" in r.message for r in caplog.records) == 1


def test_a_score_of_the_wrong_length_is_refused_and_bad_arguments_raise() -> None:
    monitor = ParityMonitor(lambda c, t: [0.0], every=1)
    assert monitor.offer([1, 2], Generation((3, 4), logprobs=(-1.0, -2.0)))
    with pytest.raises(ValueError, match="score returned 1 logprobs for 2 tokens"):
        asyncio.run(monitor.evaluate())
    with pytest.raises(ValueError, match="every must be >= 1"):
        ParityMonitor(trainer_score, every=0)
    with pytest.raises(TypeError, match="score must be callable"):
        ParityMonitor(None, every=1)  # type: ignore[arg-type]


def test_hand_worked_gaps_accumulate_over_evaluations_and_reset_clears_them() -> None:
    async def score(context: Sequence[int], tokens: Sequence[int]) -> list[float]:
        return [-1.0] * len(tokens)

    monitor = ParityMonitor(score, every=1)
    monitor.offer([1], Generation((5, 6), logprobs=(-1.5, -0.25)))  # gaps -0.5, +0.75
    asyncio.run(monitor.evaluate())
    monitor.offer([2], Generation((7,), logprobs=(-3.0,)))  # gap -2.0
    stats = asyncio.run(monitor.evaluate())
    assert (stats.actions, stats.tokens, stats.max_gap) == (2, 3, 2.0)
    assert stats.mean == pytest.approx((0.5 + 0.75 + 2.0) / 3)
    kl = (-0.5 + 0.75 - 2.0) / 3  # -0.58333
    variance = ((-0.5 - kl) ** 2 + (0.75 - kl) ** 2 + (-2.0 - kl) ** 2) / 2  # 1.58333
    assert stats.kl == pytest.approx(kl) and stats.kl_se == pytest.approx((variance / 3) ** 0.5)
    monitor.reset()
    assert monitor.metrics()["engine_logprob_gap_tokens"] == 0.0


def offered(monitor: ParityMonitor, gaps: Sequence[float]) -> ParityMonitor:
    """``monitor`` after scoring one action per gap, engine logprob ``-1 + gap`` against the trainer's -1."""
    for i, gap in enumerate(gaps):
        monitor.offer([i], Generation((7,), logprobs=(-1.0 + gap,)))
    asyncio.run(monitor.evaluate())
    return monitor


def test_one_rare_large_gap_does_not_warn_but_a_small_shift_on_every_token_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """35 tokens of numeric noise (+-0.05) and one of +4.7: the mean is 0.13 > 0.05, but its standard
    error (0.13) says one token; 36 tokens all shifted by 0.1 (a cut-off mass of 1 - e^-0.1) warn."""
    noise = [0.05 * (-1) ** i for i in range(35)] + [4.7]
    with caplog.at_level(logging.WARNING, logger="prover_engine.parity"):
        rare = offered(ParityMonitor(lambda c, t: [-1.0] * len(t), every=1, threshold=0.05), noise)
    kl = float(np.mean(noise))
    se = float(np.std(noise, ddof=1) / np.sqrt(36))
    assert rare.stats.kl == pytest.approx(kl) and rare.stats.kl_se == pytest.approx(se)
    assert kl > 0.05 and kl - 2 * se < 0.05 and not caplog.records
    with caplog.at_level(logging.WARNING, logger="prover_engine.parity"):
        shifted = offered(ParityMonitor(lambda c, t: [-1.0] * len(t), every=1, threshold=0.05), [0.1] * 36)
    assert shifted.stats.kl == pytest.approx(0.1) and shifted.stats.kl_se == pytest.approx(0.0, abs=1e-7)
    assert any("KL(engine || trainer) is about 0.100" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="prover_engine.parity"):
        offered(ParityMonitor(lambda c, t: [-1.0] * len(t), every=1, threshold=0.05), [3.0])
    assert not caplog.records  # one token bounds nothing


def test_per_process_figures_merge_into_the_token_weighted_mean_and_the_largest_max() -> None:
    from prover_engine.parity import merge_metrics

    a = {"engine_logprob_gap_mean": 0.1, "engine_logprob_gap_max": 0.5, "engine_logprob_gap_tokens": 30.0}
    b = {"engine_logprob_gap_mean": 0.4, "engine_logprob_gap_max": 0.9, "engine_logprob_gap_tokens": 10.0}
    merged = merge_metrics([a, b, {}])
    assert merged == {
        "engine_logprob_gap_mean": pytest.approx((0.1 * 30 + 0.4 * 10) / 40),
        "engine_logprob_gap_max": 0.9,
        "engine_logprob_gap_tokens": 40.0,
    }
    assert merge_metrics([]) == {}


def test_merged_kl_and_its_standard_error_equal_those_of_the_pooled_sample_mean() -> None:
    """Two processes' monitors merged: the KL is the pooled mean; the standard error combines the parts'
    (sqrt(sum (n_p se_p)^2) / N, the pooled mean's when the parts are independent)."""
    from prover_engine.parity import merge_metrics

    rng = np.random.default_rng(0)
    x, y = rng.normal(0.02, 0.1, 40), rng.normal(0.3, 0.2, 10)
    parts = [offered(ParityMonitor(lambda c, t: [-1.0] * len(t), every=1), g).metrics() for g in (x, y)]
    merged = merge_metrics(parts)
    assert merged["engine_kl"] == pytest.approx(float(np.mean(np.concatenate([x, y]))))
    se_x, se_y = np.std(x, ddof=1) / np.sqrt(40), np.std(y, ddof=1) / np.sqrt(10)
    assert merged["engine_kl_se"] == pytest.approx(float(np.hypot(40 * se_x, 10 * se_y) / 50))
    assert merged["engine_logprob_gap_tokens"] == 50.0
