"""From TRL rows to ProVer trajectories, and which process credits which group.

TRL lays a generation batch out as consecutive groups of ``num_generations`` rows in the global
(all-process) order, process ``p`` holding rows ``p * B .. (p + 1) * B - 1`` (``B`` rows per process);
GRPO groups are ``rewards.view(-1, num_generations)`` of that order. The same layout is used here:
global row ``r`` belongs to group ``r // num_generations``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from prover_core.hosts import (
    ProverConfig,
    Report,
    Trajectory,
    Turn,
    is_eligible,
    mask_runs,
    representative,
    spans_off_mask,
    success_rate,
)
from prover_core.hosts import merge_reports as core_merge_reports
from prover_engine.parity import merge_metrics
from prover_trl.errors import ProverTRLError
from prover_trl.spans import check_spans

#: Extra keys a ``rollout_func`` may return per completion (all optional).
TURNS_KEY = "prover_turns"
"""A list of ``{"observation": ..., "action": ...}`` per turn: the exact objects seen and sent to the env."""
SPANS_KEY = "prover_turn_spans"
"""A list of half-open ``[start, end)`` completion positions per turn (default: runs of the trainable mask)."""
RESET_KEY = "prover_reset"
"""The dict that re-creates the episode (``Trajectory.reset``); default: the dataset row without its prompt."""
SUCCESS_KEY = "prover_success"
"""The binary outcome; default: the trainer's weighted reward, which must then be 0 or 1."""
PROVER_KEYS = (TURNS_KEY, SPANS_KEY, RESET_KEY, SUCCESS_KEY)


@dataclass(frozen=True)
class Row:
    """One completion on this process: its tokens, its trainable mask, its reward and its ``prover_*`` extras."""

    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    trainable: Sequence[int]
    """1 on model tokens, 0 on tool/env tokens (TRL's ``tool_mask``; all 1 for single-turn completions)."""
    reward: float
    reset: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, Any] = field(default_factory=dict)


def group_layout(global_rows: int, num_generations: int) -> int:
    """The number of groups; raises :class:`ProverTRLError` unless rows split into whole groups."""
    if num_generations < 1 or global_rows % num_generations:
        raise ProverTRLError(f"{global_rows} rows do not split into groups of num_generations={num_generations}")
    return global_rows // num_generations


def _turn_record(value: Any, t: int) -> tuple[Any, Any, dict[str, Any]]:
    if isinstance(value, Mapping) and "observation" in value and "action" in value:
        return value["observation"], value["action"], dict(value.get("info", {}))
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        return value[0], value[1], {}
    raise ProverTRLError(f"{TURNS_KEY}[{t}] must be {{'observation': ..., 'action': ...}}, got {value!r}")


def build_trajectory(
    row: Row, *, trajectory_id: str, group_id: str, decode: Callable[[Sequence[int]], str]
) -> Trajectory:
    """The :class:`Trajectory` of one row.

    Turn ``t`` covers span ``t`` of the completion (explicit ``prover_turn_spans`` or the runs of
    ``row.trainable``). Observations and actions come from ``prover_turns`` when given; otherwise they
    are decoded text: the prompt (turn 0) or the tokens between the previous span and this one, and
    the span's own tokens. Raises :class:`ProverTRLError` on any inconsistency.
    """
    n = len(row.completion_ids)
    if len(row.trainable) != n:
        raise ProverTRLError(f"row {trajectory_id}: trainable mask has {len(row.trainable)} entries for {n} tokens")
    explicit = row.extras.get(SPANS_KEY) is not None
    spans = check_spans(row.extras[SPANS_KEY], n) if explicit else mask_runs(row.trainable)
    problem = spans_off_mask(spans, row.trainable) if explicit else None
    if problem is not None:
        raise ProverTRLError(f"row {trajectory_id}: {SPANS_KEY} disagree with the trainable mask: {problem}")
    if not spans:
        raise ProverTRLError(f"row {trajectory_id}: the completion has no trainable tokens, hence no turns")
    records = row.extras.get(TURNS_KEY)
    if records is not None:
        if len(records) != len(spans):
            raise ProverTRLError(
                f"row {trajectory_id}: {len(records)} turns in {TURNS_KEY} but {len(spans)} token spans "
                f"({'given' if row.extras.get(SPANS_KEY) is not None else 'runs of the trainable mask'}); "
                "every action needs its own span, separated by at least one environment token"
            )
        triples = [_turn_record(v, t) for t, v in enumerate(records)]
    else:
        triples = []
        for t, (start, end) in enumerate(spans):
            before = row.prompt_ids if t == 0 else row.completion_ids[spans[t - 1][1] : start]
            triples.append((decode(before), decode(row.completion_ids[start:end]), {}))
    success = row.extras.get(SUCCESS_KEY, row.reward)
    try:
        return Trajectory(
            id=trajectory_id,
            group_id=group_id,
            reset=dict(row.reset),
            turns=tuple(
                Turn(observation=obs, action=act, token_span=span, info=info)
                for (obs, act, info), span in zip(triples, spans, strict=True)
            ),
            success=success,
        )
    except ValidationError as exc:
        raise ProverTRLError(f"row {trajectory_id}: {exc}") from exc


def owners(trajectories: Sequence[Trajectory | None], rows_per_process: int, config: ProverConfig) -> dict[str, int]:
    """The process that credits each group: the one holding its representative successful run.

    ``trajectories`` are in global row order (``None`` for a row left out, e.g. of a skipped group).
    The bonus only ever lands on the representative's row, which that process holds. Groups that are
    not eligible go to the process of their first row.
    """
    where = {t.id: i // rows_per_process for i, t in enumerate(trajectories) if t is not None}
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        if t is not None:
            groups.setdefault(t.group_id, []).append(t)
    out: dict[str, int] = {}
    for gid, members in groups.items():
        if is_eligible(success_rate(members), config.trigger_low, config.trigger_high):
            out[gid] = where[representative(members).id]
        else:
            out[gid] = where[members[0].id]
    return out


def merge_reports(reports: Sequence[Report]) -> Report:
    """One report from the per-process reports: the core's :func:`~prover_core.merge_reports` (groups concatenated,
    counts and judge stats summed, stage times the longest, turn caps added), with the continuation policy's parity
    figures merged as :func:`~prover_engine.parity.merge_metrics` does (means weighted, not summed)."""
    merged = core_merge_reports(reports)
    return merged.model_copy(update={"engine_stats": merge_metrics([r.engine_stats for r in reports])})
