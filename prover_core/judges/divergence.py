"""A rule judge: the decision the successful run made where the failed runs, in the same state, never did.

For each nonterminal turn ``t`` of the successful run with observation ``o_t`` and action ``a_t``,
let ``F_t`` be the failed runs that also saw ``o_t`` (at any turn). Turn ``t`` is a *divergence* if
``F_t`` is non-empty and none of them took ``a_t`` at ``o_t``. Among divergences the judge prefers,
in order: one whose next observation ``o_{t+1}`` no failed run ever saw (the decision took the
successful run where the failures never went), the largest ``|F_t|`` (the failure mode shared by
the most failed runs), the earliest turn. It nominates that single turn, and declines when no turn
qualifies.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from prover_core.data import Decline, Proposal, Segment, SegmentRules, Trajectory

__all__ = ["DivergenceJudge"]


def _default_key(value: Any) -> Hashable:
    return value if isinstance(value, Hashable) else repr(value)


class DivergenceJudge:
    """Nominates the one-turn segment where the successful run diverged from the failed runs.

    ``key`` maps an observation (or action) to something hashable that identifies the state; the
    default uses the value itself or its ``repr``.
    """

    def __init__(self, key: Callable[[Any], Hashable] = _default_key) -> None:
        self.key = key

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        seen: dict[Hashable, list[set[Hashable]]] = {}  # observation -> per failed run: actions taken there
        for run in failures:
            taken: dict[Hashable, set[Hashable]] = {}
            for turn in run.turns:
                taken.setdefault(self.key(turn.observation), set()).add(self.key(turn.action))
            for obs, actions in taken.items():
                seen.setdefault(obs, []).append(actions)

        last = rules.last_end(success.num_turns)
        ranked: list[tuple[bool, int, int]] = []  # (next observation new to the failures, |F_t|, -t)
        for t in range(last + 1):
            turn = success.turns[t]
            runs = seen.get(self.key(turn.observation), [])
            action = self.key(turn.action)
            if runs and all(action not in actions for actions in runs):
                new_ground = t + 1 < success.num_turns and self.key(success.turns[t + 1].observation) not in seen
                ranked.append((new_ground, len(runs), -t))
        if not ranked:
            return Decline(reason="no turn where failed runs saw the same observation and all acted differently")
        _, shared, minus_t = max(ranked)
        t = -minus_t
        return Proposal(
            segment=Segment(trajectory_id=success.id, start=t, end=t),
            rationale=(
                f"at turn {t} the successful run chose {success.turns[t].action!r}; "
                f"{shared} failed run(s) saw the same observation and never did"
            ),
        )
