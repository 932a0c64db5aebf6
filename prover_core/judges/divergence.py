"""A rule judge: the decision the successful run made where the failed runs, in the same state, never did.

For each nonterminal turn ``t`` of the successful run with observation ``o_t`` and action ``a_t``,
let ``F_t`` be the failed runs that also saw ``o_t`` (at any turn). Turn ``t`` is a *divergence* if
``F_t`` is non-empty and none of them took ``a_t`` at ``o_t``. The judge nominates the single turn
with the largest ``|F_t|`` (the failure mode shared by the most failed runs; ties: the earliest).
It declines when no turn qualifies.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from prover_core.data import Decline, Proposal, Segment, SegmentRules, Trajectory


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

        last = success.num_turns - (2 if rules.nonterminal_end else 1)
        best: tuple[int, int] | None = None  # (shared, turn)
        for t in range(last + 1):
            turn = success.turns[t]
            runs = seen.get(self.key(turn.observation), [])
            action = self.key(turn.action)
            if runs and all(action not in actions for actions in runs) and (best is None or len(runs) > best[0]):
                best = (len(runs), t)
        if best is None:
            return Decline(reason="no turn where failed runs saw the same observation and all acted differently")
        shared, t = best
        return Proposal(
            segment=Segment(trajectory_id=success.id, start=t, end=t),
            rationale=(
                f"at turn {t} the successful run chose {success.turns[t].action!r}; "
                f"{shared} failed run(s) saw the same observation and never did"
            ),
        )
