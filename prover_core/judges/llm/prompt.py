"""The judge's prompt: the successful run in full, compact previews of the failed runs, the rules.

Truncation rule (keeps every turn number intact):

1. Every observation and action is rendered as text (strings as they are, anything else as JSON, or
   ``repr`` when not JSON-serialisable) and *clipped* to ``max_field_chars``: a longer field keeps its
   first ``ceil(n/2)`` and last ``floor(n/2)`` characters around a ``[... N chars cut ...]`` mark.
2. If the successful run's turn blocks still exceed ``max_trajectory_chars`` in total, observations
   are replaced by ``[observation omitted]`` *middle-out*: the turn farthest from both ends first
   (order key ``(-min(t, T-1-t), t)``), so the task statement (turn 0) and the ending go last.
   Actions, turn numbers and invalid-action marks stay, so every turn can still be named.
3. If even that does not fit, whole turns are dropped in the same middle-out order and each run of
   dropped turns is shown as one line ``[turns a..b omitted]`` (in agentic mode the judge can read
   them with ``get_segment``).

Failed runs are previewed: their first ``preview_head_turns`` and last ``preview_tail_turns`` turns,
fields clipped to ``preview_field_chars``, the rest as ``[turns a..b omitted]``.

Action validity convention: a turn whose ``info["valid"] is False`` or whose ``info["error"]`` is
truthy holds a malformed or error-producing action. Such turns are marked in the prompt, named in
the rules, and an answer that includes one is sent back for repair.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from prover_core.data import SegmentRules, Trajectory, Turn
from prover_core.judges.llm.config import LLMJudgeConfig

__all__ = [
    "ActionCheck",
    "as_text",
    "clip",
    "default_action_error",
    "evidence_summary",
    "middle_out",
    "render_preview",
    "render_trajectory",
    "system_prompt",
    "user_prompt",
]

ActionCheck = Callable[[Turn], "str | None"]
"""Returns why a turn's action is malformed or error-producing, or ``None`` when it is valid."""


def default_action_error(turn: Turn) -> str | None:
    """The library convention: ``info["valid"] is False`` or a truthy ``info["error"]`` marks a bad action."""
    error = turn.info.get("error")
    if error:
        return error if isinstance(error, str) else "the action produced an error"
    if turn.info.get("valid") is False:
        return "the action was invalid"
    return None


def as_text(value: Any) -> str:
    """Strings as they are; anything else as JSON (``repr`` when it is not JSON-serialisable)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def clip(text: str, limit: int) -> str:
    """``text`` if at most ``limit`` characters, else its head and tail around a cut mark."""
    if len(text) <= limit:
        return text
    head = (limit + 1) // 2
    tail = limit // 2
    cut = len(text) - head - tail
    return f"{text[:head]}[... {cut} chars cut ...]{text[len(text) - tail :] if tail else ''}"


def middle_out(n: int) -> list[int]:
    """Turn indices ``0..n-1``, the one farthest from both ends first (ties: the earlier)."""
    return sorted(range(n), key=lambda t: (-min(t, n - 1 - t), t))


def _turn_block(t: int, turn: Turn, field_chars: int, check: ActionCheck, observation: bool = True) -> str:
    obs = clip(as_text(turn.observation), field_chars) if observation else "[observation omitted]"
    lines = [f"--- turn {t} ---", f"observation: {obs}", f"action: {clip(as_text(turn.action), field_chars)}"]
    error = check(turn)
    if error is not None:
        lines.append(f"!! INVALID ACTION (must not be selected): {clip(error, field_chars)}")
    return "\n".join(lines)


def _omitted(a: int, b: int) -> str:
    return f"[turn {a} omitted]" if a == b else f"[turns {a}..{b} omitted]"


def _join(blocks: Sequence[str | None]) -> str:
    """Join turn blocks, collapsing each run of ``None`` (dropped turns) into one omitted line."""
    out: list[str] = []
    t = 0
    while t < len(blocks):
        block = blocks[t]
        if block is not None:
            out.append(block)
            t += 1
            continue
        start = t
        while t < len(blocks) and blocks[t] is None:
            t += 1
        out.append(_omitted(start, t - 1))
    return "\n".join(out)


def render_trajectory(trajectory: Trajectory, config: LLMJudgeConfig, check: ActionCheck) -> str:
    """The successful run's turns under the truncation rule of this module."""
    n = trajectory.num_turns
    full = [_turn_block(t, turn, config.max_field_chars, check) for t, turn in enumerate(trajectory.turns)]
    blocks: list[str | None] = list(full)
    total = sum(len(b) for b in full)
    order = middle_out(n)
    for t in order:
        if total <= config.max_trajectory_chars:
            break
        short = _turn_block(t, trajectory.turns[t], config.max_field_chars, check, observation=False)
        total += len(short) - len(full[t])
        blocks[t] = short
    for t in order:
        if total <= config.max_trajectory_chars:
            break
        total -= len(blocks[t] or "")
        blocks[t] = None
    return _join(blocks)


def render_preview(trajectory: Trajectory, config: LLMJudgeConfig, check: ActionCheck) -> str:
    """A compared (usually failed) run in brief: its first and last turns, short fields, the middle omitted."""
    n = trajectory.num_turns
    keep = set(range(min(config.preview_head_turns, n))) | set(range(max(0, n - config.preview_tail_turns), n))
    blocks = [
        _turn_block(t, turn, config.preview_field_chars, check) if t in keep else None
        for t, turn in enumerate(trajectory.turns)
    ]
    kind, outcome = ("successful", "succeeded") if trajectory.success else ("failed", "failed")
    return f"### {kind} run {trajectory.id!r} ({n} turns, {outcome})\n{_join(blocks)}"


_SYSTEM_PROMPT = """\
You are the judge of a credit-assignment method for reinforcement learning of agents.
You are shown one {examined} run of a task and several {others} runs of the same task.
1. Diagnose ONE {diagnosis}.
2. Find the SHORTEST segment of consecutive turns [start_turn, end_turn] of the {EXAMINED} run in which \
the agent {did_what}.
Rules for the segment: turn numbers are the ones shown; it has at most {max_turns} turns; {end_rule}; \
it must not include any turn marked INVALID ACTION.
{tools}Answer with a single JSON object and nothing else:
{answer_line}
{decline}"""

_SEGMENT_LINE = (
    '{"failure_mode": "<one sentence>", "start_turn": <int>, "end_turn": <int>, "rationale": "<one sentence>"}'
)
_SPAN_LINE = (
    '{{"failure_mode": "<one sentence>", "start_turn": <int>, "turns": <int from 1 to {max_turns}: how many turns '
    'from start_turn>, "rationale": "<one sentence>"}}'
)

_TOOLS_TEXT = """\
Before answering you may call the tools search_trajectory(query, k) (finds turns of the other runs, the {others} \
ones first) and \
get_segment(trajectory_id, start_turn, end_turn) (reads turns of any run in full), for at most {rounds} rounds.
"""

_DECLINE_TEXT = (
    'If no segment of the {examined} run fits, answer {{"failure_mode": "<why>", "start_turn": null, '
    '"{second}": null, "rationale": "<why>"}}.'
)

# The paper's direction: examine the successful run against the failed ones. ``compute_bonus`` may also
# call the judge with the roles swapped (negative credit): a failed run examined against successful ones.
_ROLES = {
    True: dict(
        examined="successful",
        others="failed",
        diagnosis="failure mode that the failed runs share",
        did_what="did what solves or avoids that failure mode",
    ),
    False: dict(
        examined="failed",
        others="successful",
        diagnosis="mistake of the failed run that the successful runs avoided",
        did_what="made that mistake, doing what the successful runs did not",
    ),
}


def _last_end(success: Trajectory, rules: SegmentRules) -> int:
    """The last turn a segment may end on."""
    return rules.last_end(success.num_turns)


def system_prompt(success: Trajectory, rules: SegmentRules, config: LLMJudgeConfig) -> str:
    """The instructions; ``success`` is the examined run (the failed one when roles are swapped)."""
    roles = _ROLES[success.success]
    end = _last_end(success, rules)
    final = " (the final turn cannot be chosen)" if end < success.num_turns - 1 else ""
    end_rule = f"end_turn must be at most {end}{final}"
    tools = _TOOLS_TEXT.format(rounds=config.max_tool_rounds, **roles) if config.mode == "agentic" else ""
    span = config.answer_form == "span"
    second = "turns" if span else "end_turn"
    decline = _DECLINE_TEXT.format(second=second, **roles) if config.allow_decline else ""
    answer_line = _SPAN_LINE.format(max_turns=rules.max_turns) if span else _SEGMENT_LINE
    return _SYSTEM_PROMPT.format(
        answer_line=answer_line,
        max_turns=rules.max_turns,
        end_rule=end_rule,
        tools=tools,
        decline=decline,
        EXAMINED=roles["examined"].upper(),
        **roles,
    )


def user_prompt(
    success: Trajectory,
    failures: Sequence[Trajectory],
    rules: SegmentRules,
    config: LLMJudgeConfig,
    check: ActionCheck,
    alike: Sequence[Trajectory] = (),
) -> str:
    """The task for one group: the examined run in full, the others' previews, and the admissible range;
    ``alike``: the group's other runs with the examined run's outcome (they enter the evidence summary only)."""
    roles = _ROLES[success.success]
    shown = failures[: config.max_failures_shown]
    outcome = "succeeded" if success.success else "failed"
    parts = [
        f"## {roles['examined'].capitalize()} run {success.id!r} ({success.num_turns} turns, {outcome})",
        render_trajectory(success, config, check),
        f"## {roles['others'].capitalize()} runs ({len(failures)})",
        *(render_preview(f, config, check) for f in shown),
    ]
    if len(failures) > len(shown):
        parts.append(f"({len(failures) - len(shown)} more {roles['others']} runs not shown)")
    if config.evidence_summary:
        parts.append(evidence_summary(success, failures, rules, roles["others"], alike=alike))
    invalid = [t for t, turn in enumerate(success.turns) if check(turn) is not None]
    if config.answer_form == "span":
        parts.append(
            f"## Your answer\nChoose start_turn within 0..{_last_end(success, rules)} of the {roles['examined']} "
            f"run and turns from 1 to {rules.max_turns} (1 if one decision did it)"
            + (f"; the invalid turns {invalid} are never included" if invalid else "")
            + "."
        )
        return "\n\n".join(parts)
    parts.append(
        f"## Your answer\nChoose start_turn <= end_turn within 0..{_last_end(success, rules)} of the "
        f"{roles['examined']} run, at most {rules.max_turns} turns long"
        + (f", not including the invalid turns {invalid}" if invalid else "")
        + "."
    )
    return "\n\n".join(parts)


def evidence_summary(
    success: Trajectory,
    failures: Sequence[Trajectory],
    rules: SegmentRules,
    others: str = "failed",
    limit: int = 5,
    *,
    alike: Sequence[Trajectory] = (),
) -> str:
    """The group's choice statistics in a few lines, as :class:`~prover_core.judges.choice.ChoiceJudge` weighs
    them (its :meth:`~prover_core.judges.choice.ChoiceJudge.evidence`): the turns where the ``others`` runs,
    standing where the examined run stood, least often made its choice (smallest one-sided Fisher ``p`` first, at
    most ``limit``; ``p = (k+1)/(m+1)`` without ``alike`` runs), so that a small model need not compare runs.
    ``alike``: the group's other runs with the examined run's outcome; a turn where one of them stood and chose
    otherwise is *contradicted*: left out of the list and named after it."""
    from prover_core.judges.choice import ChoiceJudge

    stats = ChoiceJudge().evidence(success, failures, _last_end(success, rules), alike)
    outcome = _ROLES[success.success]["examined"]
    shown = sorted((e for e in stats if e.visited > 0 and not e.contradicted), key=lambda e: (e.p, e.turn))[:limit]
    contradicted = [e.turn for e in stats if e.contradicted]
    if not shown and not contradicted:
        return f"## Evidence\nNo {others} run ever stood where this run stood: no comparison is possible."
    lines = [f"## Evidence (the turns where the {others} runs, in the same situation, most rarely did the same)"]
    for e in shown:
        action = clip(as_text(success.turns[e.turn].action), 80)
        lines.append(
            f"- turn {e.turn} ({action}): {e.visited} {others} run(s) were in the same situation, "
            f"{e.took} of them did the same"
            + (
                f"; {e.others_took} of {e.others_visited} other {outcome} run(s) there did too"
                if e.others_visited
                else ""
            )
        )
    if contradicted:
        lines.append(
            f"- not decisive: turn(s) {', '.join(map(str, contradicted))}, where another {outcome} run in the same "
            f"situation did otherwise"
        )
    return "\n".join(lines)
