"""The judge's answer: its JSON schema, parsing from model text, and validation against the rules.

A valid answer is turned into a :class:`Proposal` (or a :class:`Decline`); anything else yields the
reason it was rejected, which the judge is shown in a repair turn together with the admissible
segments (:func:`describe_admissible`).

The schema sent with each request (:func:`answer_schema`) encodes the per-field turn bounds: ``start_turn``
and ``end_turn`` are each an ``enum`` of the turns an admissible segment can start or end on (``0..last``
without the turns holding invalid actions; ``null`` too when declining is allowed), so a server with
constrained decoding cannot produce an out-of-range turn. What a per-field schema cannot say (``end_turn
>= start_turn``, at most ``max_turns`` turns, no invalid turn inside) is checked by :func:`check_answer`.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError

from prover_core.data import Decline, Proposal, Segment, SegmentRules, Trajectory
from prover_core.judges.llm.prompt import ActionCheck, clip

__all__ = [
    "JudgeAnswer",
    "admissible_segments",
    "answer_schema",
    "check_answer",
    "describe_admissible",
    "fenced_blocks",
    "parse_answer",
]


class JudgeAnswer(BaseModel):
    """``{"failure_mode", "start_turn", "end_turn", "rationale"}``; both turns ``null`` means decline.

    Turn numbers are parsed strictly: a JSON integer or ``null``, never ``false`` (which lax parsing
    reads as turn 0, turning an attempted decline into a proposal), ``"3"`` or ``3.5``.
    """

    model_config = ConfigDict(extra="ignore", strict=False)

    failure_mode: str
    start_turn: StrictInt | None
    end_turn: StrictInt | None
    rationale: str = ""


_ANSWER_SCHEMA: dict[str, Any] = {  # the shape; answer_schema() adds the turn bounds of one group
    "type": "object",
    "properties": {
        "failure_mode": {"type": "string"},
        "start_turn": {"type": ["integer", "null"]},
        "end_turn": {"type": ["integer", "null"]},
        "rationale": {"type": "string"},
    },
    "required": ["failure_mode", "start_turn", "end_turn", "rationale"],
    "additionalProperties": False,
}


def admissible_segments(success: Trajectory, rules: SegmentRules, check: ActionCheck) -> list[tuple[int, int]]:
    """Every ``(start, end)`` the judge may answer: admissible under ``rules`` and free of invalid actions."""
    valid = [check(turn) is None for turn in success.turns]
    return [(c.start, c.end) for c in rules.candidates(success) if all(valid[c.start : c.end + 1])]


def answer_schema(success: Trajectory, rules: SegmentRules, check: ActionCheck, allow_decline: bool) -> dict[str, Any]:
    """The answer's JSON schema with ``start_turn``/``end_turn`` restricted to the turns admissible segments use."""
    segments = admissible_segments(success, rules, check)
    null: list[int | None] = [None] if allow_decline else []
    starts = sorted({s for s, _ in segments})
    ends = sorted({e for _, e in segments})
    kind: str | list[str] = ["integer", "null"] if allow_decline else "integer"
    properties = dict(_ANSWER_SCHEMA["properties"])
    properties["start_turn"] = {"type": kind, "enum": [*starts, *null]}
    properties["end_turn"] = {"type": kind, "enum": [*ends, *null]}
    return {**_ANSWER_SCHEMA, "properties": properties}


def describe_admissible(success: Trajectory, rules: SegmentRules, check: ActionCheck, limit: int = 40) -> str:
    """The admissible segments in words: all listed when at most ``limit``, else the rule and the starts."""
    segments = admissible_segments(success, rules, check)
    if not segments:
        return "No segment is admissible; decline with start_turn = end_turn = null."
    if len(segments) <= limit:
        listed = ", ".join(f"{s}..{e}" for s, e in segments)
        return f"The admissible segments (start_turn..end_turn) are: {listed}."
    starts = sorted({s for s, _ in segments})
    return (
        f"Admissible: start_turn in {starts}, start_turn <= end_turn <= {max(e for _, e in segments)}, at most "
        f"{rules.max_turns} turns, no turn marked INVALID ACTION inside."
    )


_FENCE = "```"


def fenced_blocks(text: str) -> list[str]:
    r"""The stripped contents of the fenced blocks of ``text`` (a fence, optionally ``json``, then everything up to
    the next fence), in order: what ``re.findall`` of the pattern fence, ``(?:json)?\s*(.*?)``, fence finds. A scan
    of ``str.find`` calls, two per block and one more, so linear in ``text``; the pattern is quadratic in the
    spaces after a fence that never closes."""
    blocks: list[str] = []
    at = text.find(_FENCE)
    while at >= 0:
        start = at + len(_FENCE)
        if text.startswith("json", start):
            start += len("json")
        end = text.find(_FENCE, start)
        if end < 0:
            break
        blocks.append(text[start:end].strip())
        at = text.find(_FENCE, end + len(_FENCE))
    return blocks


def _json_object(text: str) -> Any:
    """The JSON value in ``text``: the whole text, a fenced block, or the outermost ``{...}``."""
    candidates = [text.strip()]
    candidates += fenced_blocks(text)
    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last:
        candidates.append(text[first : last + 1])
    error: ValueError | None = None
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError as exc:  # a JSONDecodeError, or an integer past Python's digit limit (4,300 digits)
            error = exc
    assert error is not None
    raise error


def parse_answer(content: str | None, truncated: bool = False) -> JudgeAnswer | str:
    """The :class:`JudgeAnswer` in a model's message text, or why there is none."""
    if content is None or not content.strip():
        return "the answer was empty; reply with the JSON object"
    try:
        value = _json_object(content)
    except json.JSONDecodeError as exc:
        why = " (the answer was cut off by the token limit; be brief)" if truncated else ""
        return f"the answer is not valid JSON{why}: {exc.msg} at position {exc.pos}; text began {clip(content, 80)!r}"
    except RecursionError:
        return f"the answer nests JSON too deeply; reply with the flat JSON object; text began {clip(content, 80)!r}"
    except ValueError:
        return f"the answer holds a number too long to read; give small integers; text began {clip(content, 80)!r}"
    if not isinstance(value, dict):
        return f"the answer must be a JSON object, got {type(value).__name__}"
    try:
        return JudgeAnswer.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors())
        return f"the JSON object does not match the schema: {problems}"


def check_answer(
    answer: JudgeAnswer,
    success: Trajectory,
    rules: SegmentRules,
    check: ActionCheck,
    allow_decline: bool,
) -> Proposal | Decline | str:
    """Schema, bounds, nonterminal end, length and action validity; the reason on a violation."""
    start, end = answer.start_turn, answer.end_turn
    if start is None and end is None:
        if not allow_decline:
            return "declining is not allowed: give start_turn and end_turn"
        return Decline(reason=f"LLM judge declined: {answer.failure_mode} {answer.rationale}".strip())
    if start is None or end is None:
        return "give both start_turn and end_turn as integers (or both null to decline)"
    if start < 0 or end < 0:
        return f"turn numbers must be non-negative, got start_turn={start}, end_turn={end}"
    if end < start:
        return f"end_turn {end} is before start_turn {start}"
    segment = Segment(trajectory_id=success.id, start=start, end=end)
    reason = rules.violation(segment, success)
    if reason is not None:
        return reason
    for t in range(start, end + 1):
        error = check(success.turns[t])
        if error is not None:
            return f"turn {t} holds an invalid or error-producing action ({clip(error, 120)}); choose valid turns only"
    rationale = f"{answer.failure_mode.strip()} | {answer.rationale.strip()}".strip(" |")
    return Proposal(segment=segment, rationale=rationale)
