"""prover_trl.parity: the trainer's logprobs for the parity monitor, on a tiny random Llama (exact on CPU)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from tests.hosts import require_host

require_host("trl")

import torch  # noqa: E402

from examples.trl_toy import tiny_causal_lm, word_tokenizer  # noqa: E402
from prover_engine import Generation, ParityMonitor  # noqa: E402
from prover_trl.parity import model_score, trainer_score  # noqa: E402

CONTEXT = [3, 7, 4, 9]
TOKENS = [5, 11, 6]


def model() -> torch.nn.Module:
    return tiny_causal_lm(word_tokenizer(), seed=1).float()


def by_hand(lm: torch.nn.Module, temperature: float) -> list[float]:
    """One token at a time: log softmax(logits / T) of each token after the context so far."""
    out, ids = [], list(CONTEXT)
    for t in TOKENS:
        with torch.no_grad():
            logits = lm(input_ids=torch.tensor([ids])).logits[0, -1] / temperature
        out.append(float(torch.log_softmax(logits, -1)[t]))
        ids.append(t)
    return out


def test_the_score_is_the_full_softmax_at_the_temperature_and_keeps_the_mode() -> None:
    lm = model()
    lm.train()
    scores = model_score(lm, 0.7)(CONTEXT, TOKENS)
    assert scores == pytest.approx(by_hand(lm, 0.7), abs=1e-5)
    assert lm.training
    trainer = SimpleNamespace(model=lm, temperature=0.7, accelerator=SimpleNamespace(unwrap_model=lambda m: m))
    assert trainer_score(trainer)(CONTEXT, TOKENS) == pytest.approx(scores, abs=1e-6)
    with pytest.raises(ValueError, match="temperature must be positive"):
        model_score(lm, 0.0)


def test_the_monitor_sees_no_gap_for_the_trained_distribution_and_the_cut_mass_for_top_k() -> None:
    """Engine logprobs renormalised over the top 5 (a top_k=5 engine): the gap is log(1 / top-5 mass)."""
    lm = model()
    tokens, exact, truncated, ids = [], [], [], list(CONTEXT)
    for _ in range(3):  # the second most likely token each time: inside the top 5, never the whole mass
        with torch.no_grad():
            logits = lm(input_ids=torch.tensor([ids])).logits[0, -1]
        top = torch.topk(logits, 5)
        t = int(top.indices[1])
        tokens.append(t)
        exact.append(float(torch.log_softmax(logits, -1)[t]))
        truncated.append(float(logits[t] - torch.logsumexp(top.values, -1)))
        ids.append(t)
    monitor = ParityMonitor(model_score(lm, 1.0), every=1)
    monitor.offer(CONTEXT, Generation(tuple(tokens), logprobs=tuple(exact)))
    assert asyncio.run(monitor.evaluate()).max_gap < 1e-5
    monitor.reset()
    monitor.offer(CONTEXT, Generation(tuple(tokens), logprobs=tuple(truncated)))
    stats = asyncio.run(monitor.evaluate())
    assert stats.mean == pytest.approx(sum(t - e for t, e in zip(truncated, exact, strict=True)) / 3, abs=1e-5)
    assert stats.mean > 0.1


def test_merged_reports_keep_the_parity_figures() -> None:
    from prover_core import Report
    from prover_trl.batch import merge_reports

    parts = [
        Report(
            engine_stats={"engine_logprob_gap_mean": 0.2, "engine_logprob_gap_max": 0.3, "engine_logprob_gap_tokens": 4}
        ),
        Report(
            engine_stats={"engine_logprob_gap_mean": 0.5, "engine_logprob_gap_max": 0.6, "engine_logprob_gap_tokens": 2}
        ),
    ]
    metrics = merge_reports(parts).metrics()
    assert metrics["prover/engine_logprob_gap_mean"] == pytest.approx((0.2 * 4 + 0.5 * 2) / 6)
    assert metrics["prover/engine_logprob_gap_max"] == 0.6 and metrics["prover/engine_logprob_gap_tokens"] == 6
