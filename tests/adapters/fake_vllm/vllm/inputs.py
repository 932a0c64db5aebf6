"""``vllm.inputs.TokensPrompt`` (a TypedDict in vLLM: a plain dict at run time)."""

from __future__ import annotations

from typing import Any


def TokensPrompt(**kwargs: Any) -> dict[str, Any]:
    return dict(kwargs)
