"""What an inference engine implements for continuations: token ids in, sampled token ids out."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

__all__ = ["Generation", "SamplingParams", "TokenEngine"]


@dataclass(frozen=True)
class SamplingParams:
    """The complete sampling distribution of one action, sent explicitly on every request.

    Every field an engine would otherwise fill from its own defaults is here, so that a continuation
    samples the rollout's policy, not the server's: vLLM fills unsent fields from the model's
    ``generation_config`` (e.g. ``top_k=20``), llama.cpp uses ``top_k=40, top_p=0.95, min_p=0.05``.
    The defaults are the plain distribution ``softmax(logits / temperature)``: nothing truncated or
    penalised. ``top_k=0`` means no top-k (engines that spell "off" as ``-1`` are translated by their
    engine). ``seed`` makes the draw reproducible where the engine supports it.
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    extra: dict[str, object] = field(default_factory=dict)
    """Engine-specific fields passed through as they are (it may not override the fields above)."""

    def __post_init__(self) -> None:
        finite = ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")
        for name in finite:
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite, got {getattr(self, name)}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: no top-k), got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be positive, got {self.repetition_penalty}")

    def with_seed(self, seed: int) -> SamplingParams:
        return replace(self, seed=seed)

    def distribution(self) -> dict[str, float | int]:
        """The fields that shape the sampling distribution, by their vLLM/OpenAI names (``top_k`` 0: off)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
        }


@dataclass(frozen=True)
class Generation:
    """One sampled action: its token ids (exactly as generated) and, if the engine returns them, text and logprobs."""

    token_ids: tuple[int, ...]
    text: str | None = None
    logprobs: tuple[float, ...] | None = None
    finish_reason: str | None = None


@runtime_checkable
class TokenEngine(Protocol):
    """An inference engine that continues a token context: ``generate`` may be plain or ``async``.

    It must not re-tokenise ``prompt_ids``; it raises :class:`~prover_core.errors.EngineError` (or a
    subclass) on failure. Concurrent calls are expected: an engine that batches serves them together.
    """

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation | Awaitable[Generation]: ...
