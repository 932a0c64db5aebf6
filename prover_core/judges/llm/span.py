"""The ``span`` answer form: a start turn and a length, each from an enum, always admissible.

With ``answer_form="span"`` the model answers ``{"failure_mode", "start_turn", "turns", "rationale"}``.
The schema (:func:`span_schema`) lets ``start_turn`` be only a turn an admissible segment starts on and
``turns`` only ``1..max_turns`` (both ``null`` to decline when allowed), so constrained decoding (llama.cpp's
grammar, vLLM's structured outputs) can emit nothing else. Every such pair maps to an admissible segment
(:func:`span_end`): ``[start_turn, e]`` with ``e`` the largest end of an admissible segment from
``start_turn`` with at most ``turns`` turns (the one-turn segment ``[start_turn, start_turn]`` is admissible
for every start in the enum, so ``e`` exists). The two enums are independent, so the pairs with one ``null``
are read too: a ``null`` start declines whatever the length, a start with a ``null`` length is the one
turn ``[start_turn, start_turn]``. The answer is rewritten into the ``start_turn``/``end_turn``
form before parsing (:func:`span_to_segment_text`), so validation and repair are shared with the
``segment`` form; a text that is not such an object passes unchanged and gets the usual repair.
"""

from __future__ import annotations

import json
from typing import Any

from prover_core.data import SegmentRules, Trajectory
from prover_core.judges.llm.answer import admissible_segments
from prover_core.judges.llm.prompt import ActionCheck

__all__ = ["span_end", "span_schema", "span_to_segment_text"]

_SPAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "failure_mode": {"type": "string"},
        "start_turn": {"type": ["integer", "null"]},
        "turns": {"type": ["integer", "null"]},
        "rationale": {"type": "string"},
    },
    "required": ["failure_mode", "start_turn", "turns", "rationale"],
    "additionalProperties": False,
}


def span_schema(success: Trajectory, rules: SegmentRules, check: ActionCheck, allow_decline: bool) -> dict[str, Any]:
    """The span answer's JSON schema: ``start_turn`` an enum of admissible starts, ``turns`` of ``1..max_turns``."""
    starts = sorted({s for s, _ in admissible_segments(success, rules, check)})
    null: list[int | None] = [None] if allow_decline else []
    kind: str | list[str] = ["integer", "null"] if allow_decline else "integer"
    properties = dict(_SPAN_SCHEMA["properties"])
    properties["start_turn"] = {"type": kind, "enum": [*starts, *null]}
    properties["turns"] = {"type": kind, "enum": [*range(1, rules.max_turns + 1), *null]}
    return {**_SPAN_SCHEMA, "properties": properties}


def span_end(start: int, turns: int, success: Trajectory, rules: SegmentRules, check: ActionCheck) -> int | None:
    """The end of the longest admissible segment from ``start`` with at most ``turns`` turns (``None``: none)."""
    ends = [e for s, e in admissible_segments(success, rules, check) if s == start and e - s + 1 <= turns]
    return max(ends) if ends else None


def _object(text: str) -> Any:
    for candidate in (text.strip(), text[text.find("{") : text.rfind("}") + 1]):
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):  # ValueError: not JSON, or an integer past Python's digit limit
            continue
    return None


def span_to_segment_text(
    content: str | None, success: Trajectory, rules: SegmentRules, check: ActionCheck
) -> str | None:
    """A span answer rewritten as the equivalent ``start_turn``/``end_turn`` JSON; anything else unchanged."""
    if content is None:
        return None
    value = _object(content)
    if not isinstance(value, dict) or "turns" not in value or "end_turn" in value:
        return content
    start, turns = value.get("start_turn"), value.pop("turns")
    if start is None:  # a null start declines, whatever the length (the enums are independent)
        value["end_turn"] = None
    else:
        turns = 1 if turns is None else turns  # a start with a null length: that one turn
        if isinstance(start, int) and isinstance(turns, int) and not isinstance(turns, bool) and turns >= 1:
            end = span_end(start, turns, success, rules, check)
            value["end_turn"] = end if end is not None else start + turns - 1  # out of the enum: the usual repair
        else:
            value["end_turn"] = turns  # not integers: left for the usual validation to name
    return json.dumps(value)
