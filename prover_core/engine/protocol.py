"""What an inference engine implements for continuations: token ids in, sampled token ids out."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    """Sampling for one action. ``seed`` makes the draw reproducible where the engine supports it."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    extra: dict[str, object] = field(default_factory=dict)
    """Engine-specific fields passed through as they are (e.g. ``{"top_k": 50}``)."""

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def with_seed(self, seed: int) -> SamplingParams:
        return replace(self, seed=seed)


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
