"""Writing a benchmark's report: its Markdown and its numbers as JSON, side by side in one folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_report(folder: Path | str, text_name: str, text: str, json_name: str, payload: Any, **dump: Any) -> Path:
    """``folder/text_name`` (the Markdown) and ``folder/json_name`` (``json.dumps(payload, **dump)``); the folder."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / text_name).write_text(text, encoding="utf-8")
    (out / json_name).write_text(json.dumps(payload, **dump), encoding="utf-8")
    return out


__all__ = ["write_report"]
