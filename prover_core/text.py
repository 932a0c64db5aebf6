"""Short, readable text for logs and tables: whitespace collapsed, cut at a word boundary."""

from __future__ import annotations

__all__ = ["ELLIPSIS", "shorten"]

ELLIPSIS = "…"
"""The mark of shortened text."""


def shorten(value: object, width: int) -> str:
    """``str(value)`` on one line, at most ``width`` characters: runs of whitespace become one space,
    and a longer text is cut after its last whole word that fits, followed by ``…``. A first word
    longer than ``width`` is cut inside (there is no boundary to cut at)."""
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    text = " ".join(str(value).split())
    if len(text) <= width:
        return text
    room = width - len(ELLIPSIS)
    head = text[: room + 1]  # one more: a space right after the last fitting word keeps that word
    cut = head.rfind(" ")
    kept = head[:cut] if cut > 0 else text[:room]
    return kept.rstrip(" ,;:.") + ELLIPSIS
