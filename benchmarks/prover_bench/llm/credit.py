"""Per-turn credit of the LLM-shaped benchmark's arms, its judges, and the budget matching (numpy only).

* GRPO: ``R_i - mean_group(R)`` on every turn (:func:`prover_core.grpo.group_advantages`).
* GiGPO: ``A^E_i + omega * A^S_{i,t}``, ``A^S`` from :func:`prover_bench.methods.step_advantages` over the
  group's turns keyed by observation ``(room, item, held)``, returns ``gamma^(T_i - 1 - t) R_i``.
* ProVer: ``BonusResult.turn_advantages`` (the library), with :class:`OracleJudge`, ``AnchorJudge`` or
  :class:`SameLengthRandomJudge`.
* Continuations as training data: :func:`continuation_turns`.
* Budget matching: :func:`matched_group_size`.
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Sequence

import numpy as np
from numpy.typing import NDArray

from prover_bench.llm.tasks import Record, action_text, is_keep, is_mistake, is_pivot, observation
from prover_bench.methods import continuation_advantages, step_advantages
from prover_core.data import Decline, Proposal, Segment, SegmentRules, Trajectory, Turn
from prover_core.grpo import group_advantages
from prover_core.protocols import Judge

FloatArray = NDArray[np.float64]
Groups = Sequence[Sequence[Record]]


def grpo_turns(groups: Groups) -> list[FloatArray]:
    """GRPO's per-turn advantage of every episode, groups in order."""
    out = []
    for group in groups:
        adv = group_advantages(np.array([float(r.success) for r in group]))
        out += [np.full(r.turns, float(a)) for r, a in zip(group, adv, strict=True)]
    return out


def gigpo_turns(groups: Groups, gamma: float = 0.95, omega: float = 1.0) -> list[FloatArray]:
    """GiGPO: the episode advantage plus ``omega`` times the step advantage within anchor states."""
    episode = grpo_turns(groups)
    out, at = [], 0
    for group in groups:
        steps = [(j, t) for j, r in enumerate(group) for t in range(r.turns)]
        keys = [observation(group[j].task, group[j].states[t]) for j, t in steps]
        returns = [gamma ** (group[j].turns - 1 - t) * float(group[j].success) for j, t in steps]
        a_s = step_advantages(keys, returns)
        rows = [episode[at + j].copy() for j in range(len(group))]
        for (j, t), a in zip(steps, a_s.tolist(), strict=True):
            rows[j][t] += omega * a
        out += rows
        at += len(group)
    return out


def continuation_turns(boundaries: Sequence[Hashable], records: Sequence[Record]) -> list[FloatArray]:
    """Each continuation's advantage on every turn it played: ``A_c = R_c - mean of the other continuations from
    the same boundary state`` (leave-one-out; 0 when alone). The baseline does not depend on continuation ``c``,
    so ``E[A_c sum_t grad log pi(a_t | s_t)] = grad V(s_b)``: REINFORCE from its boundary state ``s_b``.

    ``records[c]`` is continuation ``c`` (a restored record: the history's tokens, then its own turns),
    ``boundaries[c]`` any key naming its boundary state (continuations with equal keys share a baseline).
    """
    keys = {b: i for i, b in enumerate(dict.fromkeys(boundaries))}
    adv = continuation_advantages(
        np.array([float(r.success) for r in records]), np.array([keys[b] for b in boundaries], dtype=np.int64)
    )
    return [np.full(r.turns, float(a)) for r, a in zip(records, adv, strict=True)]


def trajectory(record: Record, tid: str, gid: str) -> Trajectory:
    """``record`` as the library's :class:`Trajectory`: observations ``(room, item, held)``, the action's text,
    its token span, the exact state in ``info`` (what ``continue_from`` restores) and whether the turn is the
    pivot, the keeping of the goal key (``tasks.is_keep``) or a mistake."""
    turns = tuple(
        Turn(
            observation=observation(record.task, s),
            action=action_text(record.tokens[a:b]),
            token_span=(a, b),
            info={
                "state": (s.room, s.held, s.turn),
                "pivot": is_pivot(record.task, s, action),
                "keep": is_keep(record.task, s, action),
                "mistake": is_mistake(record.task, s, action),
            },
        )
        for s, (a, b), action in zip(record.states, record.spans, record.actions, strict=True)
    )
    return Trajectory(id=tid, group_id=gid, reset={"task": record.task.id}, turns=turns, success=record.success)


class OracleJudge:
    """Knows the pivot: proposes the turn where the successful run took the goal key."""

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        turns = [t for t, turn in enumerate(success.turns) if turn.info.get("pivot")]
        last = rules.last_end(success.num_turns)
        if not turns or turns[-1] > last:
            return Decline(reason="no pivot turn in an admissible position")
        t = turns[-1]  # the goal key taken last is the one kept
        return Proposal(segment=Segment(trajectory_id=success.id, start=t, end=t), rationale="the pivot (oracle)")


class ContrastiveOracleJudge(OracleJudge):
    """Both signs of credit on the decision (negative credit on, ``ProverConfig(negative_credit=True)``): on a
    successful run the pivot, as :class:`OracleJudge`; on a failed run (the roles swapped) its first mistake, the
    turn that made success impossible (``tasks.is_mistake``: leaving the goal room without its key, or swapping the
    goal key away); declines a failed run without one (it ran out of turns)."""

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        if success.success:
            return super().propose(success, failures, rules)
        turns = [t for t, turn in enumerate(success.turns) if turn.info.get("mistake")]
        if not turns or turns[0] > rules.last_end(success.num_turns):
            return Decline(reason="no mistake turn in an admissible position")
        t = turns[0]
        return Proposal(segment=Segment(trajectory_id=success.id, start=t, end=t), rationale="the mistake (oracle)")


class SameLengthRandomJudge:
    """A uniformly random admissible segment of the same length as ``reference``'s proposal (declines with it)."""

    def __init__(self, reference: Judge, seed: int = 0) -> None:
        self.reference, self.seed = reference, seed
        self.lengths: list[int] = []

    async def propose(
        self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules
    ) -> Proposal | Decline:
        ref = self.reference.propose(success, failures, rules)
        if not isinstance(ref, Proposal | Decline):
            ref = await ref
        if isinstance(ref, Decline):
            return ref
        width = ref.segment.num_turns
        last = rules.last_end(success.num_turns)
        rng = np.random.default_rng([self.seed, zlib.crc32(success.id.encode())])
        start = int(rng.integers(0, last - width + 2))
        self.lengths.append(width)
        return Proposal(
            segment=Segment(trajectory_id=success.id, start=start, end=start + width - 1),
            rationale=f"uniformly random segment of {width} turn(s)",
        )


def matched_group_size(group_size: int, rollout_turns: float, extra_turns: float) -> int:
    """Group size whose rollouts cost what ProVer's rollouts plus continuations cost:
    ``round(G (1 + extra / rollout))``, at least ``G``."""
    if group_size < 1 or rollout_turns <= 0 or extra_turns < 0:
        raise ValueError("need G >= 1, rollout turns > 0 and extra turns >= 0")
    return max(group_size, round(group_size * (1.0 + extra_turns / rollout_turns)))
