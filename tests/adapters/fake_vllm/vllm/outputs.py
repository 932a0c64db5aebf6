"""vLLM's output classes, reduced to the fields OpenRLHF reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    cumulative_logprob: float | None = None
    logprobs: Any = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
