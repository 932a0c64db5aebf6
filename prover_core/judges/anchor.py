"""A rule judge from the group's own statistics at anchor states (identical observations across runs).

The group is the successful run ``S`` and the failed runs ``F``; an *anchor* is an observation key.
For a nonterminal turn ``t`` of ``S`` with anchor ``o_t``, action ``a_t`` and next anchor ``o_{t+1}``:

* ``m_t``: the failed runs that visited ``o_t`` (at any turn);
* ``k_t``: those of them that took ``a_t`` at ``o_t`` (at any visit);
* ``n_t``: those of them that also visited ``o_{t+1}`` after ``o_t``.

Among the ``m_t + 1`` runs through ``o_t`` the success rate is ``1 / (m_t + 1)``; among those that took
``a_t`` there it is ``1 / (k_t + 1)``, and among those that went on to ``o_{t+1}`` it is ``1 / (n_t + 1)``.
If the outcome did not depend on the decision (runs through ``o_t`` exchangeable), the one success would
be among the ``k_t + 1`` runs that took ``a_t`` with probability

    p_t = (k_t + 1) / (m_t + 1)        (the exact one-sided Fisher test of the 2x2 table [[1, k_t], [0, m_t - k_t]])

and among the runs that reached ``o_{t+1}`` with probability ``q_t = (n_t + 1) / (m_t + 1)``, the ratio
of the success rates before and after the turn: ``1 / q_t`` is how much the rate jumps across it. A turn
is *evidence* when ``p_t <= alpha`` and ``m_t >= min_failures``: enough failed runs stood where the
successful run stood, and few of them made its decision. The judge ranks evidence turns by
``score_t = -log p_t - log q_t`` (a decision that failures at the anchor did not make, after which they
were left behind; ties to the earliest turn), nominates the shortest segment of at most
``rules.max_turns`` turns around the best turn that covers the evidence turns within reach, and
*declines* when no turn is evidence (e.g. the failed runs made the same decisions and lost by luck,
or never reached the successful run's states).

One success carries one sample of ``P(success | decision)``: a harmless action rare under the
policy is as unlikely under exchangeability as a needed one, so the rule also needs the jump
``q_t`` (or more failed runs) to tell them apart; hidden pivots (no trace in the next observation)
get no help from ``q_t``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from prover_core.data import Decline, Proposal, Segment, SegmentRules, Trajectory

__all__ = ["AnchorJudge", "TurnEvidence"]


def _default_key(value: Any) -> Hashable:
    return value if isinstance(value, Hashable) else repr(value)


@dataclass(frozen=True)
class TurnEvidence:
    """The statistics of turn ``t`` of the successful run (see the module docstring)."""

    turn: int
    visited: int  # m_t
    took: int  # k_t
    went_on: int  # n_t

    @property
    def p(self) -> float:
        """``(k_t + 1) / (m_t + 1)``: the chance the success took ``a_t`` if the decision did not matter."""
        return (self.took + 1) / (self.visited + 1)

    @property
    def q(self) -> float:
        """``(n_t + 1) / (m_t + 1)``: the success rate before the turn over the rate after it."""
        return (self.went_on + 1) / (self.visited + 1)


class AnchorJudge:
    """Nominates the turn where the successful run left the failed runs that stood at the same anchor.

    ``alpha`` is the largest ``p_t`` that counts as evidence, ``min_failures`` the fewest failed runs
    that must have visited the anchor; ``key`` maps an observation or action to something hashable
    (default: the value, or its ``repr``).
    """

    def __init__(
        self,
        alpha: float = 0.25,
        jump: float = 1.0,
        min_failures: int = 2,
        key: Callable[[Any], Hashable] = _default_key,
    ) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if min_failures < 1:
            raise ValueError(f"min_failures must be at least 1, got {min_failures}")
        self.alpha, self.jump, self.min_failures, self.key = alpha, jump, min_failures, key

    def __repr__(self) -> str:
        return f"AnchorJudge(alpha={self.alpha}, min_failures={self.min_failures})"

    def evidence(self, success: Trajectory, failures: Sequence[Trajectory], last: int) -> list[TurnEvidence]:
        """:class:`TurnEvidence` for turns ``0..last`` of ``success``."""
        runs = []  # per failed run: anchor -> actions taken there, anchor -> first and last turn seen
        for run in failures:
            taken: dict[Hashable, set[Hashable]] = {}
            first: dict[Hashable, int] = {}
            latest: dict[Hashable, int] = {}
            for i, turn in enumerate(run.turns):
                o = self.key(turn.observation)
                taken.setdefault(o, set()).add(self.key(turn.action))
                first.setdefault(o, i)
                latest[o] = i
            runs.append((taken, first, latest))
        out = []
        for t in range(last + 1):
            o, a = self.key(success.turns[t].observation), self.key(success.turns[t].action)
            nxt = self.key(success.turns[t + 1].observation) if t + 1 < success.num_turns else None
            m = k = n = 0
            for taken, first, latest in runs:
                if o not in taken:
                    continue
                m += 1
                k += a in taken[o]
                n += nxt is not None and nxt in latest and latest[nxt] >= first[o]
            out.append(TurnEvidence(t, m, k, n))
        return out

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        declined = rules.no_segment(success)
        if declined is not None:
            return declined
        last = rules.last_end(success.num_turns)
        stats = self.evidence(success, failures, last)
        strong = [e for e in stats if e.visited >= self.min_failures and (e.q < self.jump or e.p <= self.alpha)]
        if not strong:
            best = min(stats, key=lambda e: e.p)
            return Decline(
                reason=f"no anchor evidence: the smallest p = (k+1)/(m+1) is {best.p:.2f} at turn {best.turn} "
                f"(m={best.visited} failed runs there, k={best.took} made the same decision); alpha={self.alpha}"
            )
        top = min(strong, key=lambda e: (e.q, e.p, e.turn))
        start = end = top.turn
        for e in sorted(strong, key=lambda e: (abs(e.turn - top.turn), e.turn)):
            lo, hi = min(start, e.turn), max(end, e.turn)
            if hi - lo + 1 <= rules.max_turns:
                start, end = lo, hi
        action = success.turns[top.turn].action
        went_on = (  # counts, not a ratio: 1/q from n = 0 runs would read as a measured jump
            "none of them reached the next observation"
            if top.went_on == 0
            else f"{top.went_on} of them reached the next observation "
            f"(success rate 1/{top.visited + 1} there, 1/{top.went_on + 1} after)"
        )
        return Proposal(
            segment=Segment(trajectory_id=success.id, start=start, end=end),
            rationale=(
                f"turn {top.turn}: {top.visited} failed run(s) stood at the same observation, {top.took} chose "
                f"{action!r} (p={top.p:.2f}); {went_on}"
            ),
        )
