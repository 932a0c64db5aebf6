"""Combining judges: the first one with a proposal wins.

``FirstOf(ChoiceJudge(), llm)`` asks the rule judge first and the LLM only when the rule judge declines
(no evidence in the group's statistics); when every judge declines, the decline lists each reason.
Each answer is checked against the segment rules as ``compute_bonus`` would check it, so an invalid
segment from an earlier judge raises rather than being passed over; ``others`` (the group's other
successful runs) reach the judges that take them.
"""

from __future__ import annotations

from collections.abc import Sequence

from prover_core.data import Decline, Proposal, SegmentRules, Trajectory
from prover_core.protocols import Judge, PerStepJudge

__all__ = ["FirstOf"]


class FirstOf:
    """The first judge in order whose answer is a :class:`Proposal`; a :class:`Decline` with all reasons
    when every judge declines."""

    def __init__(self, *judges: Judge) -> None:
        if not judges:
            raise ValueError("FirstOf needs at least one judge")
        self.judges = judges

    def __repr__(self) -> str:
        return f"FirstOf({', '.join(repr(j) for j in self.judges)})"

    def new_step(self) -> None:
        """Forwarded to judges that keep per-step state (the LLM judge's budget)."""
        for judge in self.judges:
            if isinstance(judge, PerStepJudge):
                judge.new_step()

    async def propose(
        self,
        success: Trajectory,
        failures: Sequence[Trajectory],
        rules: SegmentRules,
        *,
        others: Sequence[Trajectory] = (),
    ) -> Proposal | Decline:
        from prover_core.propose import propose

        reasons = []
        for judge in self.judges:
            answer = await propose(judge, success, failures, rules, others)
            if isinstance(answer, Proposal):
                return answer
            reasons.append(f"{type(judge).__name__}: {answer.reason}")
        return Decline(reason="; ".join(reasons))
