"""From OpenRLHF experiences to prover-core trajectories, and the bonus back onto the advantages.

Row ``i`` of an ``Experience`` is sample ``experience.index[i]`` of the rollout batch; OpenRLHF's
group estimators group samples ``g * n .. g * n + n - 1`` (``n = rollout.n_samples_per_prompt``), so
the sample's group is ``index // n``. Its turns are the runs of 1s in ``action_mask``; what the
restorable environment needs (reset spec, observation and action text of every turn) comes from the
:class:`~prover_openrlhf.records.EpisodeRecord` that the recording executor stored under the key of
the row's token sequence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from prover_core.hosts import GroupRecord, Trajectory, Turn, mask_runs
from prover_openrlhf.errors import ExperienceBatchError
from prover_openrlhf.records import EpisodeRecord, record_key
from prover_openrlhf.spans import ranges_to_mask_spans


@dataclass(frozen=True)
class Row:
    """One sample of the batch: where it sits, its group, its binary outcome, its turn spans and record key."""

    experience: int
    row: int
    index: int
    group: int
    success: bool
    spans: tuple[tuple[int, int], ...]
    length: int
    key: str

    @property
    def trajectory_id(self) -> str:
        return str(self.index)

    @property
    def group_id(self) -> str:
        return str(self.group)


def _binary(value: float, index: int) -> bool:
    if value not in (0.0, 1.0):
        raise ExperienceBatchError(
            f"sample {index} has reward {value!r}; ProVer needs a binary terminal reward (0 or 1) from the agent"
        )
    return value == 1.0


def batch_rows(experiences: Sequence[Any], rewards: Sequence[Any], n_samples_per_prompt: int) -> list[Row]:
    """Every row of ``experiences`` as a :class:`Row`; ``rewards[j]`` are experience ``j``'s raw rewards.

    Raises :class:`ExperienceBatchError` on a missing or duplicate index, a non-binary reward or an
    incomplete group.
    """
    n = int(n_samples_per_prompt)
    if n < 2:
        raise ExperienceBatchError(f"ProVer needs groups: rollout.n_samples_per_prompt is {n}")
    rows: list[Row] = []
    for j, (exp, reward) in enumerate(zip(experiences, rewards, strict=True)):
        mask = exp.action_mask
        batch = len(mask)
        index = exp.index
        if index is None or len(index) != batch:
            raise ExperienceBatchError(f"experience {j} has index {index!r} for {batch} rows")
        values = [float(v) for v in reward.reshape(-1).tolist()]
        if len(values) != batch:
            raise ExperienceBatchError(f"experience {j} has {len(values)} rewards for {batch} rows")
        for i in range(batch):
            length = int(exp.attention_mask[i].sum().item())
            rows.append(
                Row(
                    experience=j,
                    row=i,
                    index=int(index[i]),
                    group=int(index[i]) // n,
                    success=_binary(values[i], int(index[i])),
                    spans=tuple(mask_runs(mask[i].tolist())),
                    length=int(mask.shape[1]),
                    key=record_key(exp.sequences[i][:length]),
                )
            )
    seen: dict[int, int] = {}
    for r in rows:
        if r.index in seen:
            raise ExperienceBatchError(f"sample index {r.index} appears twice in the batch")
        seen[r.index] = 1
    sizes: dict[int, int] = {}
    for r in rows:
        sizes[r.group] = sizes.get(r.group, 0) + 1
    for group, size in sizes.items():
        if size != n:
            raise ExperienceBatchError(f"group {group} has {size} samples, expected n_samples_per_prompt={n}")
    return rows


def build_trajectory(row: Row, record: Mapping[str, Any] | None) -> Trajectory | str:
    """The row as a :class:`Trajectory`, or the reason it cannot be one."""
    if record is None:
        return (
            f"sample {row.index}: no episode record (is the agent executor a RecordingAgentExecutor "
            "writing to the same store?)"
        )
    try:
        rec = EpisodeRecord.model_validate(record)
    except ValidationError as exc:
        return f"sample {row.index}: malformed episode record: {exc.errors()[0]['msg']}"
    if not rec.actions:
        return f"sample {row.index}: the episode has no turn"
    if len(row.spans) != len(rec.actions):
        return (
            f"sample {row.index}: action_mask has {len(row.spans)} runs of 1s but the episode recorded "
            f"{len(rec.actions)} turns (truncated by max_len, an empty action, or turns not separated by feedback)"
        )
    if rec.action_ranges:
        expected = ranges_to_mask_spans(rec.action_ranges, row.length)
        if list(row.spans) != expected:
            return f"sample {row.index}: action_mask runs {list(row.spans)} differ from the recorded ranges {expected}"
    turns = tuple(
        Turn(observation=obs, action=act, token_span=span)
        for obs, act, span in zip(rec.observations, rec.actions, row.spans, strict=True)
    )
    return Trajectory(id=row.trajectory_id, group_id=row.group_id, reset=rec.reset, turns=turns, success=row.success)


@dataclass(frozen=True)
class Plan:
    """The trajectories to hand to ``compute_bonus`` and the groups the adapter had to leave out."""

    trajectories: list[Trajectory]
    left_out: list[GroupRecord]


def plan_batch(rows: Sequence[Row], records: Sequence[Mapping[str, Any] | None]) -> Plan:
    """Pair rows with records; a group with any unusable row is left out (it keeps stock advantages).

    A group whose members all succeeded or all failed needs no record (nothing can be credited there);
    a mixed group with an unusable row is recorded as ``skipped`` with the reason.
    """
    by_group: dict[int, list[tuple[Row, Trajectory | str]]] = {}
    for row, record in zip(rows, records, strict=True):
        by_group.setdefault(row.group, []).append((row, build_trajectory(row, record)))
    trajectories: list[Trajectory] = []
    left_out: list[GroupRecord] = []
    for group, members in sorted(by_group.items()):
        successes = sum(r.success for r, _ in members)
        problems = [t for _, t in members if isinstance(t, str)]
        if not problems:
            trajectories.extend(t for _, t in members if isinstance(t, Trajectory))
            continue
        mixed = 0 < successes < len(members)
        left_out.append(
            GroupRecord(
                group_id=str(group),
                size=len(members),
                successes=successes,
                status="skipped" if mixed else "not_eligible",
                stage="trigger",
                reason=problems[0] if mixed else f"success rate {successes}/{len(members)}: nothing to credit",
            )
        )
    return Plan(trajectories=trajectories, left_out=left_out)
