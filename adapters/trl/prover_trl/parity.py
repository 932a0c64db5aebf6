"""The trainer's own logprobs for :class:`~prover_engine.ParityMonitor`.

``trainer_score(trainer)`` is the ``score(context_ids, token_ids)`` a parity monitor needs: the
current model's ``log softmax(logits / T)`` of each token at its position, with ``T`` the trainer's
sampling temperature: what GRPO's loss computes (TRL divides the logits by ``args.temperature``
before its log-softmax). Top-k, top-p and min-p are not applied: the trained policy is the full
softmax, so an engine sampling with truncation shows as a gap. torch is imported on first call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Score = Callable[[Sequence[int], Sequence[int]], list[float]]


def model_score(model: Any, temperature: float = 1.0) -> Score:
    """``score(context, tokens) -> [log p(tokens[i] | context + tokens[:i])]`` of a causal LM at ``temperature``.

    One forward pass over ``context + tokens`` without gradients, in eval mode (the model's mode is
    restored afterwards).
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")

    def score(context: Sequence[int], tokens: Sequence[int]) -> list[float]:
        import torch

        if not context or not tokens:
            raise ValueError("score needs a non-empty context and at least one token")
        device = next(model.parameters()).device
        ids = torch.tensor([[*map(int, context), *map(int, tokens)]], device=device)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(context) - 1 : -1].float() / temperature
        finally:
            model.train(was_training)
        target = torch.tensor([int(t) for t in tokens], device=device)[:, None]
        return [float(x) for x in torch.log_softmax(logits, dim=-1).gather(-1, target)[:, 0].cpu()]

    return score


def trainer_score(trainer: Any) -> Score:
    """:func:`model_score` of a TRL trainer's current (unwrapped) model at its sampling temperature."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    return model_score(model, float(trainer.temperature))
