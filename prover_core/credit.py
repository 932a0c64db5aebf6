"""Stage 4, Credit: turn an accepted verification into a per-turn and a per-token bonus.

For an accepted segment ``[l, r]`` of the successful trajectory with measured ``Delta``,

    bonus_t = lam * Delta   for l <= t <= r,   0 otherwise,

and every other trajectory gets 0. The advantage of a trainable token of turn ``t`` is then
``A_GRPO + bonus_t``; tokens outside every action span (environment or tool tokens) get nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from prover_core.data import Segment, Trajectory

__all__ = [
    "action_mask",
    "credit_masses",
    "mask_runs",
    "segment_bonus",
    "spans_off_mask",
    "spread_to_tokens",
    "turn_weights",
]


def segment_bonus(num_turns: int, segment: Segment, delta: float, lam: float = 1.0) -> NDArray[np.float64]:
    """Per-turn bonus: ``lam * delta`` on turns ``segment.start..segment.end``, 0 elsewhere."""
    if segment.end >= num_turns:
        raise ValueError(f"segment ends at turn {segment.end} but there are only {num_turns} turns")
    bonus = np.zeros(num_turns)
    bonus[segment.start : segment.end + 1] = lam * delta
    return bonus


def spread_to_tokens(trajectory: Trajectory, per_turn: NDArray[np.float64], length: int) -> NDArray[np.float64]:
    """Per-token values: ``per_turn[t]`` on the token span of turn ``t``, 0 on every other position.

    Raises ``ValueError`` if a turn with a non-zero value has no token span, or a span does not fit
    in ``length`` positions: a bonus that cannot be placed is an error, never dropped silently.
    """
    if per_turn.shape != (trajectory.num_turns,):
        raise ValueError(f"expected {trajectory.num_turns} per-turn values, got shape {per_turn.shape}")
    out = np.zeros(length)
    for t, (turn, value) in enumerate(zip(trajectory.turns, per_turn.tolist(), strict=True)):
        span = turn.token_span
        if span is None:
            if value != 0.0:
                raise ValueError(f"turn {t} of trajectory {trajectory.id!r} carries credit but has no token_span")
            continue
        if span[1] > length:
            raise ValueError(
                f"token span {span} of turn {t} of trajectory {trajectory.id!r} does not fit in {length} positions"
            )
        out[span[0] : span[1]] = value
    return out


def turn_weights(trajectory: Trajectory) -> NDArray[np.float64]:
    """The trainable tokens of each turn: its token span's length, or 1 for a turn without a span (turn-level
    credit counts each turn once)."""
    spans = [turn.token_span for turn in trajectory.turns]
    return np.array([1.0 if span is None else float(span[1] - span[0]) for span in spans])


def credit_masses(bonus: ArrayLike, base: ArrayLike, mask: ArrayLike) -> tuple[float, float]:
    """``(sum |bonus|, sum |base|)`` over the trainable positions (``mask`` true): the two sums of the credit share

        credit_share = sum_i |bonus_i| / sum_i |A_i|,   i over the batch's trainable tokens,

    where ``A`` is the GRPO advantage the update would use without ProVer (the host's own, in a host). Arrays of
    one shape (any), e.g. a host's ``(B, T)`` bonus, advantage and response mask."""
    b, a, m = np.asarray(bonus, dtype=np.float64), np.asarray(base, dtype=np.float64), np.asarray(mask) != 0
    if not b.shape == a.shape == m.shape:
        raise ValueError(f"bonus, base and mask must have one shape; got {b.shape}, {a.shape}, {m.shape}")
    return float(np.abs(b[m]).sum()), float(np.abs(a[m]).sum())


def action_mask(trajectory: Trajectory, length: int) -> NDArray[np.bool_]:
    """True on the positions covered by some turn's token span (the trainable action tokens)."""
    has_span = np.array([turn.token_span is not None for turn in trajectory.turns], dtype=np.float64)
    mask: NDArray[np.bool_] = spread_to_tokens(trajectory, has_span, length) != 0.0
    return mask


def mask_runs(mask: ArrayLike) -> list[tuple[int, int]]:
    """Half-open ``[start, end)`` of every maximal run of non-zero entries of a 1-D ``mask``, in order.

    In a multi-turn response whose action tokens are 1 and environment/tool tokens 0 (verl's
    ``response_mask``, OpenRLHF's ``action_mask``, TRL's ``completion_mask * tool_mask``), run ``t``
    is the token span of turn ``t``: the inverse of :func:`action_mask`.
    """
    m = np.asarray(mask) != 0
    if m.ndim != 1:
        raise ValueError(f"expected a 1-D mask, got shape {m.shape}")
    edges = np.diff(np.concatenate(([False], m, [False])).astype(np.int8))
    starts, ends = np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()
    return list(zip(starts, ends, strict=True))


def spans_off_mask(spans: Sequence[tuple[int, int]], mask: ArrayLike) -> str | None:
    """Why the half-open action ``spans`` leave some trainable tokens of a 1-D ``mask`` outside every turn; ``None``
    when every trainable token lies in a span.

    A host's trainable mask (1 on the tokens the policy generated) is the truth the spans must cover: a trainable
    token in no span gets no turn's credit. Inclusive ends ``(start, last)`` leave the last token of each action out
    that way, the mistake :mod:`prover_core.batch_checks` cannot see from the spans alone when every action has
    several tokens. (A masked token inside a span is fine: the mask keeps credit off it, e.g. a tool-call delimiter
    inside an action.) A mask of all ones says nothing about where actions end: ``None``.
    """
    m = np.asarray(mask) != 0
    if m.all():
        return None
    covered = np.zeros(m.shape[0], dtype=bool)
    for start, end in spans:
        covered[start:end] = True
    uncovered = np.flatnonzero(m & ~covered)
    if not uncovered.size:
        return None
    first = int(uncovered[0])
    hint = (
        " right after a span ends: spans look inclusive (start, last); they are half-open [start, end), so pass "
        "(start, last + 1)"
        if first in {end for _, end in spans}
        else ""
    )
    return f"{uncovered.size} trainable tokens lie in no turn's span (the first at position {first}{hint})"
