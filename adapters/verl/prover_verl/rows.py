"""Rows of a verl batch to trajectories and turns, and the per-token bonus matrix (numpy only).

A verl row is one response sequence. Its turns are either the runs of 1s in ``response_mask``
(verl's agent loop sets 1 on model tokens and 0 on tool/user/template/padding tokens), matched in
order to the row's turns, or, for a row holding a whole trajectory whose every turn carries a
``token_span``, those explicit spans. A bonus that cannot be placed raises; it is never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from prover_core.hosts import BonusResult, Trajectory, mask_runs, spans_off_mask
from prover_verl.errors import RowAlignmentError, TurnAlignmentError
from prover_verl.hook import RowTurns

REWARD_TOL = 1e-6

turn_runs = mask_runs
"""Turns of a verl ``response_mask`` row: the runs of 1s (:func:`prover_core.credit.mask_runs`)."""


def resolve_rows(
    rows: Sequence[str | RowTurns | None] | None, trajectories: Mapping[str, Trajectory], batch_size: int
) -> list[RowTurns | None]:
    """One :class:`RowTurns` per batch row, with explicit turn indices; checks ids and coverage.

    Every turn of every trajectory must lie in exactly one row, so each turn's bonus lands once. A
    ``None`` row holds no trajectory (verl's synthetic padding rows): it gets no bonus and no check.
    """
    if rows is None:
        rows = list(trajectories)
    if len(rows) != batch_size:
        raise RowAlignmentError(f"the batch has {batch_size} rows but the prover step describes {len(rows)}")
    out: list[RowTurns | None] = []
    seen: dict[str, list[int]] = {tid: [] for tid in trajectories}
    for i, row in enumerate(rows):
        if row is None:
            out.append(None)
            continue
        spec = row if isinstance(row, RowTurns) else RowTurns(str(row))
        trajectory = trajectories.get(spec.trajectory_id)
        if trajectory is None:
            raise RowAlignmentError(f"row {i} names trajectory {spec.trajectory_id!r}, which the step does not hold")
        turns: tuple[int, ...] = tuple(range(trajectory.num_turns)) if spec.turns is None else tuple(spec.turns)
        bad = [t for t in turns if not 0 <= t < trajectory.num_turns]
        if bad:
            raise RowAlignmentError(
                f"row {i} names turns {bad} of trajectory {spec.trajectory_id!r}, which has turns "
                f"0..{trajectory.num_turns - 1}"
            )
        seen[spec.trajectory_id].extend(turns)
        out.append(RowTurns(spec.trajectory_id, turns))
    for tid, held in seen.items():
        if sorted(held) != list(range(trajectories[tid].num_turns)):
            raise RowAlignmentError(
                f"the rows hold turns {sorted(held)} of trajectory {tid!r}; every turn "
                f"0..{trajectories[tid].num_turns - 1} must lie in exactly one row"
            )
    return out


def check_rows(
    rows: Sequence[RowTurns | None],
    trajectories: Mapping[str, Trajectory],
    index: Sequence[Any] | NDArray[Any],
    scores: NDArray[Any] | None,
) -> None:
    """Row ``i``'s ``uid`` must equal its trajectory's ``group_id``; with ``scores`` (summed rewards),
    a row holding the terminal turn must score its trajectory's ``success`` (0 or 1)."""
    if len(index) != len(rows):
        raise RowAlignmentError(f"index (uid) has {len(index)} entries for {len(rows)} rows")
    for i, row in enumerate(rows):
        if row is None:
            continue
        trajectory = trajectories[row.trajectory_id]
        if str(index[i]) != trajectory.group_id:
            raise RowAlignmentError(
                f"row {i} has uid {index[i]!r} but its trajectory {trajectory.id!r} is in group "
                f"{trajectory.group_id!r}: the rows and the step's trajectories are out of order"
            )
        turns = row.turns or ()
        if scores is not None and trajectory.num_turns - 1 in turns:
            score = float(scores[i])
            if abs(score - float(trajectory.success)) > REWARD_TOL:
                raise RowAlignmentError(
                    f"row {i} scores {score:g} but its trajectory {trajectory.id!r} has success="
                    f"{trajectory.success}: rows out of order, or non-binary rewards (KL in reward: "
                    "set check_rewards=False)"
                )


def _row_spans(row: RowTurns, trajectory: Trajectory, mask_row: NDArray[Any], i: int) -> list[tuple[int, int]]:
    whole = row.turns == tuple(range(trajectory.num_turns))
    explicit = [turn.token_span for turn in trajectory.turns]
    if whole and all(span is not None for span in explicit):
        spans = [span for span in explicit if span is not None]
        for t, (_, end) in enumerate(spans):
            if end > mask_row.shape[0]:
                raise TurnAlignmentError(
                    f"row {i}: token span {spans[t]} of turn {t} of {trajectory.id!r} does not fit in "
                    f"{mask_row.shape[0]} response positions"
                )
        problem = spans_off_mask(spans, mask_row)
        if problem is not None:
            raise TurnAlignmentError(
                f"row {i}: the token spans of {trajectory.id!r} disagree with response_mask: {problem}"
            )
        return spans
    if whole and any(span is not None for span in explicit):
        raise TurnAlignmentError(
            f"trajectory {trajectory.id!r}: some turns carry token_span and some do not; give all or none"
        )
    runs = turn_runs(mask_row)
    if len(runs) != len(row.turns or ()):
        raise TurnAlignmentError(
            f"row {i} ({trajectory.id!r}) holds {len(row.turns or ())} turns but its response_mask has "
            f"{len(runs)} runs of 1s; record each turn's token_span (or the row's turns) explicitly"
        )
    return runs


def bonus_matrix(
    result: BonusResult, rows: Sequence[RowTurns | None], response_mask: NDArray[Any]
) -> NDArray[np.float64]:
    """``(B, T)`` bonus: row ``i`` gets ``turn_bonus[t]`` on the tokens of each of its turns ``t``.

    The caller multiplies by ``response_mask``; a non-zero bonus on a turn whose tokens are all
    masked out raises :class:`TurnAlignmentError`.
    """
    mask = np.asarray(response_mask)
    out = np.zeros(mask.shape, dtype=np.float64)
    for i, row in enumerate(rows):
        if row is None:
            continue
        trajectory = result.trajectories[row.trajectory_id]
        per_turn = result.turn_bonus[row.trajectory_id]
        if not np.any(per_turn[list(row.turns or ())]):
            continue
        spans = _row_spans(row, trajectory, mask[i], i)
        for (start, end), t in zip(spans, row.turns or (), strict=True):
            value = float(per_turn[t])
            if value == 0.0:
                continue
            if not np.any(mask[i, start:end]):
                raise TurnAlignmentError(
                    f"row {i}: turn {t} of {trajectory.id!r} earns a bonus but its tokens [{start}, {end}) are "
                    "all masked out of response_mask"
                )
            out[i, start:end] = value
    return out
