"""Batch shapes and token spans that cannot be meant: the silent mistakes of a first integration.

Each check returns a :class:`BatchWarning` (a kind, how many cases, and a message naming the likely
cause and the fix); ``compute_bonus`` logs each once per call on the ``prover_core`` logger and keeps
them in ``Report.batch_warnings`` (metric ``batch_warnings/<kind>``). Nothing is changed: the bonus
is computed as given.

* ``token_spans``: turns whose advantage cannot land where it should. :class:`~prover_core.data.Turn`
  spans are half-open ``[start, end)``; inclusive ends ``(start, last)`` (natural, since segments are
  inclusive) drop each action's last token and leave a one-token action an empty span. Counted: turns
  whose span is empty although the turn took an action; turns whose advantage (GRPO plus bonus) is
  nonzero and whose span is empty; gaps between consecutive action spans where the observation in
  between is empty (nothing to fill the gap).
* ``groups_of_one``: groups holding one trajectory (``group_id=trajectory.id``): their GRPO advantage
  is 0 and a single run is never eligible, so they earn nothing.
* ``one_group``: the whole batch is one group whose trajectories start from different tasks
  (``reset`` specs that differ outside ``ProverConfig.episode_keys``, by default ``seed`` and ``member``, or
  different first observations): GRPO would centre rewards across tasks.

Not detected: inclusive ends when every action has several tokens and every observation has tokens
(the spans are then merely one token short); one group per batch of rollouts that share a task.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from itertools import pairwise
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from prover_core.data import Trajectory, json_plain

WarningKind = Literal["token_spans", "groups_of_one", "one_group"]
"""What a :class:`BatchWarning` is about (see the module docstring)."""
WARNING_KINDS: tuple[WarningKind, ...] = ("token_spans", "groups_of_one", "one_group")
"""Every kind of :class:`BatchWarning`; ``Report.metrics()`` has ``batch_warnings/<kind>`` for each (0 if none)."""


class BatchWarning(BaseModel):
    """A batch-level mistake: ``count`` cases of ``kind``, and what to do (``message``)."""

    model_config = ConfigDict(frozen=True)

    kind: WarningKind
    count: int
    message: str


def _empty(value: Any) -> bool:
    """Known to render as nothing: ``None`` or an empty string, sequence or mapping."""
    if value is None:
        return True
    if isinstance(value, _SIZED):
        return len(value) == 0
    return isinstance(value, np.ndarray) and value.size == 0


_SIZED = (str, bytes, list, tuple, dict)


def check_token_spans(
    trajectories: Sequence[Trajectory],
    advantages: Mapping[str, float],
    turn_bonus: Mapping[str, NDArray[np.float64]],
) -> BatchWarning | None:
    """Turns whose advantage reaches fewer tokens than it should (see the module docstring)."""
    suspect = empty_actions = lost = gaps = 0
    for t in trajectories:
        turns = t.turns
        spans = [turn.token_span for turn in turns]
        if any(span is None for span in spans):  # rare: check only the turns that have spans, one by one
            has = [i for i, span in enumerate(spans) if span is not None]
        else:
            has = list(range(len(spans)))
        if not has:
            continue
        bounds = np.array([spans[i] for i in has]).reshape(-1, 2)
        per_turn = (advantages[t.id] + turn_bonus[t.id])[has]
        empty = bounds[:, 0] == bounds[:, 1]
        acted = np.zeros(len(has), dtype=bool)
        for j in np.flatnonzero(empty).tolist():
            acted[j] = not _empty(turns[has[j]].action)
        nonzero = empty & (per_turn != 0.0)
        # a gap before the next turn's span that nothing fills: the observation between them is empty
        unfilled = [b == a + 1 and _empty(turns[b].observation) for a, b in pairwise(has)]
        gap = np.append((bounds[1:, 0] > bounds[:-1, 1]) & np.array(unfilled, dtype=bool), False)
        empty_actions += int(acted.sum())
        lost += int(nonzero.sum())
        gaps += int(gap.sum())
        suspect += int((acted | nonzero | gap).sum())
    if not suspect:
        return None
    return BatchWarning(
        kind="token_spans",
        count=suspect,
        message=(
            f"{suspect} turns have token spans that look wrong ({empty_actions} actions with an empty span, "
            f"{lost} turns with a nonzero advantage and an empty span, {gaps} gaps between consecutive action "
            "spans around an empty observation): their advantage reaches no token, or not all of them. "
            "Turn.token_span is half-open [start, end); if you passed inclusive ends (start, last), pass "
            "(start, last + 1)"
        ),
    )


def _key(value: Any) -> str:
    """A comparable text of ``value`` (its JSON form, else its repr)."""
    try:
        return json.dumps(json_plain(value), sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


EPISODE_KEYS = ("seed", "member")
"""The default ``ProverConfig.episode_keys``: reset-spec keys that differ between the runs of one task (``seed``:
the episode's randomness; ``member``: the run's index in its group, as ``prover_trl.member_reset`` writes it)."""


def _task_key(reset: Any, episode_keys: Collection[str]) -> str:
    """:func:`_key` of a reset spec without its per-episode keys."""
    if isinstance(reset, Mapping):
        reset = {k: v for k, v in reset.items() if k not in episode_keys}
    return _key(reset)


def check_groups(
    groups: Mapping[str, Sequence[Trajectory]], episode_keys: Collection[str] = EPISODE_KEYS
) -> list[BatchWarning]:
    """Groups of one, and one group holding the whole batch of different tasks (reset specs that differ outside
    ``episode_keys``, or different first observations)."""
    out: list[BatchWarning] = []
    singles = sum(len(members) == 1 for members in groups.values())
    if singles:
        out.append(
            BatchWarning(
                kind="groups_of_one",
                count=singles,
                message=(
                    f"{singles} of {len(groups)} groups hold a single trajectory: their GRPO advantage is 0 and "
                    "they are never eligible for a bonus. group_id must name the prompt or task that a group's "
                    "rollouts share (not the trajectory: group_id=trajectory.id makes groups of one)"
                ),
            )
        )
    if len(groups) == 1:
        (gid, members), *_ = groups.items()
        tasks = {_task_key(t.reset, episode_keys) for t in members} if any(t.reset for t in members) else set()
        starts = {_key(t.turns[0].observation) for t in members}
        distinct = max(len(tasks), len(starts))
        if len(members) > 1 and distinct > 1:
            out.append(
                BatchWarning(
                    kind="one_group",
                    count=len(members),
                    message=(
                        f"the whole batch of {len(members)} trajectories is one group ({gid!r}) although they start "
                        f"from {distinct} different tasks (reset specs or first observations): GRPO centres rewards "
                        "across tasks and ProVer compares runs of different tasks. Give each prompt's rollouts "
                        "their own group_id; if the reset specs differ only in keys that vary per run of one task, "
                        f"name them: ProverConfig(episode_keys=({', '.join(map(repr, episode_keys))}, ...))"
                    ),
                )
            )
    return out


__all__ = ["EPISODE_KEYS", "WARNING_KINDS", "BatchWarning", "WarningKind", "check_groups", "check_token_spans"]
