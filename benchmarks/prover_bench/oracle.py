"""The ceiling of a one-turn judge: the admissible turn with the largest exact decision value.

:class:`BestTurn` reads the truth the harness knows (tabular environments), so it is no judge a user could
run; beside the real judges it shows what there was to find. For the successful run ``S`` it nominates

    t* = argmax_t  Q_h(s_t, a_t) - V_h(s_t)      over the admissible one-turn segments [t, t] of S

(ties to the earliest). Where even ``t*`` has no effect (``|Q - V| < NO_EFFECT``) in every group of an
environment, every turn a judge could nominate there is without effect or harmful, so its credit lands on no
choice that helped, and a one-turn judge's decision value is at most ``t*``'s (a random turn's is the bracket
beside it): a criterion measured on such an environment says nothing about localisation
(:func:`nothing_to_find`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prover_core.data import Decline, Proposal, SegmentRules, Trajectory

ORACLE = "best turn (oracle)"
"""The harness's name for :class:`BestTurn`."""


class BestTurn:
    """Nominates the admissible turn of the successful run with the largest exact decision value."""

    def __init__(self, decision: Mapping[str, Sequence[float]]) -> None:
        self.decision = decision

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        values = self.decision.get(success.id)
        turns = [c for c in rules.candidates(success) if c.num_turns == 1]
        if values is None or not turns:
            return Decline(reason="no exact decision values" if values is None else "no admissible turn")
        best = max(turns, key=lambda c: (values[c.start], -c.start))
        return Proposal(segment=best, rationale=f"the largest exact decision value Q - V: {values[best.start]:+.3f}")


def nothing_to_find(results: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[str]:
    """The environments of ``results[env][judge]`` where every turn :class:`BestTurn` nominated had no effect
    (its ``no_effect`` share is 1): not even the best turn of any eligible run moved success by ``NO_EFFECT``."""
    return [env for env, rows in results.items() if ORACLE in rows and rows[ORACLE].get("no_effect") == 1.0]
