"""A rule judge that credits choices, not chance: actions compared from the same anchor state.

The group is the successful run ``S``, the failed runs ``F`` and the group's other successful runs ``O``
(``others``; empty when the caller passes none); an *anchor* is an observation key
(:func:`~prover_core.judges.keys.repeating_key` by default: the tokens that repeat in the group, so a
nonce on some observations does not hide the state). For a nonterminal turn ``t`` of ``S`` at anchor
``o_t`` choosing ``a_t``:

* ``m_t``: the failed runs that stood at ``o_t`` (at any turn); ``k_t``: those of them that chose ``a_t``
  there (at any visit);
* ``i_t``: the other successful runs that stood at ``o_t``; ``j_t``: those of them that chose ``a_t``.

Over the ``n = m_t + i_t + 1`` runs that stood at ``o_t``, ``w = i_t + 1`` succeeded and ``c = k_t + j_t + 1``
chose ``a_t``, ``j_t + 1`` of them successes. If the choice did not matter (runs through ``o_t``
exchangeable), the successes among the choosers are hypergeometric, and the chance of ``j_t + 1`` or more is

    p_t = sum_{x >= j_t + 1} C(w, x) C(n - w, c - x) / C(n, c)     (exact one-sided Fisher test)

With no other success at ``o_t`` (``i_t = 0``) this is ``(k_t + 1) / (m_t + 1)``: the chance that the one
success is among the choosers. A second success that made the same choice there is strong evidence
(``i_t = j_t = 1``, ``n = 8``, ``c = 2``: ``p = 1/28``); one that stood there and chose otherwise
*contradicts* the choice (the state was won without it) and the turn is no candidate at any level.

Both rates are measured *at the same state*, so what happened after the choice (a lucky slip, a
survived gamble) does not enter: failed runs that made the same choice and were unlucky count
against it (they raise ``k_t``). This is the difference from the rate jump between consecutive anchors
(:class:`~prover_core.judges.anchor.AnchorJudge`'s ``q_t``), which luck produces as well as choices.

The rule, in order (the first level with a candidate wins; one turn is nominated):

1. **led away**: turns with choice evidence (below) or divergence (below) whose choice took the run to
   an anchor ``o_{t+1}`` no failed run ever stood at, by a transition the environment did not report as
   stochastic (``turn.info["stochastic"] is True`` marks a transition with several possible outcomes: a
   new state reached by it may be luck); the smallest ``p_t`` wins, then the ties below;
2. **choice evidence**: turns with ``m_t >= min_failures`` and ``p_t <= alpha``; the smallest ``p_t``
   first, ties to a turn whose action changed the anchor (``o_{t+1} != o_t``; a choice after which the run
   stood where it stood is a no-op as far as the observation tells), then to one whose transition was not
   reported stochastic, then to the earliest;
3. **divergence** (weaker): turns where at least one failed run stood at ``o_t`` and none chose ``a_t``
   (``k_t = 0``, ``m_t >= 1``): the same ties, then the most such runs, then the earliest;
4. otherwise it *declines*, with the smallest ``p_t`` in the reason.

The segment is the single turn ``[t, t]``: the statistic is about one decision at one state, and no
other turn's evidence says a longer segment is needed; the rationale says so. An LLM judge can be
added behind it with :class:`~prover_core.judges.combine.FirstOf` (it is asked only when this one
declines).

One success carries one sample of ``P(success | choice)``: where the group has a single success, a
harmless (or harmful) action that is rare under the policy gets the same ``p_t`` as a needed one; where
the policy is already good and failures are bad luck (slippery grid worlds), such a rare choice is
usually an exploratory move the success survived. Other successes are what tells them apart; a
hidden pivot (an action with no trace in the observation) competes with every rare no-op.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from prover_core.data import Decline, Proposal, Segment, SegmentRules, Trajectory
from prover_core.judges.keys import Key, repeating_key, value_key

__all__ = ["ChoiceEvidence", "ChoiceJudge", "choice_evidence", "fisher_p"]


@dataclass(frozen=True)
class ChoiceEvidence:
    """Turn ``t`` of the successful run: ``m_t``, ``k_t`` and what the turn did (module docstring)."""

    turn: int
    visited: int  # m_t
    took: int  # k_t
    changed: bool  # o_{t+1} != o_t
    stochastic: bool  # the environment reported the transition as stochastic
    new_ground: bool = False  # no failed run ever stood at o_{t+1}
    others_visited: int = 0  # i_t
    others_took: int = 0  # j_t

    @property
    def p(self) -> float:
        """The one-sided Fisher ``p_t`` (module docstring); ``(k_t + 1) / (m_t + 1)`` when ``i_t = 0``."""
        return fisher_p(
            runs=self.visited + self.others_visited + 1,
            successes=self.others_visited + 1,
            choosers=self.took + self.others_took + 1,
            successful_choosers=self.others_took + 1,
        )

    @property
    def contradicted(self) -> bool:
        """Another successful run stood at ``o_t`` and none chose ``a_t``: the state was won without it."""
        return self.others_visited > 0 and self.others_took == 0

    @property
    def led_away(self) -> bool:
        """The choice took the run where no failed run went, by a transition not reported stochastic."""
        return self.new_ground and not self.stochastic

    @property
    def tie(self) -> tuple[int, int]:
        """Ties prefer a changed anchor, then a transition not reported stochastic."""
        return (0 if self.changed else 1, 1 if self.stochastic else 0)


def fisher_p(runs: int, successes: int, choosers: int, successful_choosers: int) -> float:
    """``P(X >= successful_choosers)`` for ``X ~ Hypergeometric(runs, successes, choosers)``: the chance that
    so many of the choosers succeed if choosing did not matter (exact one-sided Fisher test)."""
    top = min(successes, choosers)
    tail = sum(
        math.comb(successes, x) * math.comb(runs - successes, choosers - x) for x in range(successful_choosers, top + 1)
    )
    return tail / math.comb(runs, choosers)


def _choices(runs: Sequence[Trajectory], key: Key) -> list[dict[Hashable, set[Hashable]]]:
    """Per run: anchor -> the actions it chose there (at any visit)."""
    out = []
    for run in runs:
        taken: dict[Hashable, set[Hashable]] = {}
        for turn in run.turns:
            taken.setdefault(key(turn.observation), set()).add(value_key(turn.action))
        out.append(taken)
    return out


def _stood_and_chose(choices: Sequence[dict[Hashable, set[Hashable]]], o: Hashable, a: Hashable) -> tuple[int, int]:
    """How many of the runs (:func:`_choices`) stood at anchor ``o``, and how many of them chose ``a`` there."""
    return sum(o in taken for taken in choices), sum(a in taken.get(o, ()) for taken in choices)


def choice_evidence(
    success: Trajectory, failures: Sequence[Trajectory], last: int, key: Key, others: Sequence[Trajectory] = ()
) -> list[ChoiceEvidence]:
    """:class:`ChoiceEvidence` for turns ``0..last`` of ``success`` under the anchor ``key``; ``others``: the
    group's other successful runs."""
    taken_by_run, taken_by_other = _choices(failures, key), _choices(others, key)
    seen = set().union(*taken_by_run) if taken_by_run else set()
    out = []
    for t in range(last + 1):
        turn = success.turns[t]
        o, a = key(turn.observation), value_key(turn.action)
        nxt = key(success.turns[t + 1].observation) if t + 1 < success.num_turns else None
        (m, k), (i, j) = _stood_and_chose(taken_by_run, o, a), _stood_and_chose(taken_by_other, o, a)
        stochastic = turn.info.get("stochastic") is True
        changed, new_ground = nxt is not None and nxt != o, nxt is not None and nxt not in seen
        out.append(ChoiceEvidence(t, m, k, changed, stochastic, new_ground, i, j))
    return out


class ChoiceJudge:
    """Nominates the one turn whose choice, compared with the other runs' choices at the same state,
    best separates the successes from the failures (module docstring). ``compute_bonus`` passes the group's
    other successful runs as ``others``.

    ``alpha``: the largest ``p_t`` that is choice evidence; ``min_failures``: the fewest failed runs at
    the anchor for it; ``divergence``: whether the weaker divergence level is used; ``key``: maps an
    observation to its anchor (default: the repeating tokens of the group, :func:`repeating_key`).
    """

    def __init__(
        self,
        alpha: float = 0.25,
        min_failures: int = 2,
        divergence: bool = True,
        key: Key | None = None,
    ) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if min_failures < 1:
            raise ValueError(f"min_failures must be at least 1, got {min_failures}")
        self.alpha, self.min_failures, self.divergence, self.key = alpha, min_failures, divergence, key

    def __repr__(self) -> str:
        return f"ChoiceJudge(alpha={self.alpha}, min_failures={self.min_failures}, divergence={self.divergence})"

    def evidence(
        self, success: Trajectory, failures: Sequence[Trajectory], last: int, others: Sequence[Trajectory] = ()
    ) -> list[ChoiceEvidence]:
        key = self.key if self.key is not None else repeating_key([success, *failures, *others])
        return choice_evidence(success, failures, last, key, others)

    def propose(
        self,
        success: Trajectory,
        failures: Sequence[Trajectory],
        rules: SegmentRules,
        *,
        others: Sequence[Trajectory] = (),
    ) -> Proposal | Decline:
        declined = rules.no_segment(success)
        if declined is not None:
            return declined
        last = rules.last_end(success.num_turns)
        stats = self.evidence(success, failures, last, others)
        # under negative credit the roles are swapped: "success" is a failed run, "failures" the successes
        unlike = "failed" if success.success else "successful"
        alike = f"other {'successful' if success.success else 'failed'} run(s)"
        open_ = [e for e in stats if not e.contradicted]
        strong = [e for e in open_ if e.visited >= self.min_failures and e.p <= self.alpha]
        weak = [e for e in open_ if e.visited >= 1 and e.took == 0] if self.divergence else []
        led = [e for e in (*strong, *weak) if e.led_away]
        if led:
            top = min(led, key=lambda e: (e.p, e.tie, e.turn))
            level = (
                f"a choice that led where no {unlike} run went (p <= alpha, or no {unlike} run at the state chose it)"
            )
        elif strong:
            top = min(strong, key=lambda e: (e.p, e.tie, e.turn))
            level = f"choice evidence (p <= alpha = {self.alpha})"
        elif weak:
            top = min(weak, key=lambda e: (e.tie, -e.visited, e.turn))
            level = f"divergence (weaker: too few {unlike} runs at the state for p <= alpha)"
        else:
            best = min(open_ or stats, key=lambda e: (e.p, e.turn))
            contradicted = len(stats) - len(open_)
            return Decline(
                reason=f"no choice evidence: the smallest p is {best.p:.2f} at turn {best.turn} "
                f"(m={best.visited} {unlike} runs at that state, k={best.took} made the same choice"
                + (
                    f"; {best.others_took} of {best.others_visited} {alike} there did too"
                    if best.others_visited
                    else ""
                )
                + f"); alpha={self.alpha}, and no turn where {unlike} runs at the state all chose otherwise"
                + (f"; {contradicted} turn(s) where {alike} at the state chose otherwise" if contradicted else "")
            )
        action = success.turns[top.turn].action
        return Proposal(
            segment=Segment(trajectory_id=success.id, start=top.turn, end=top.turn),
            rationale=(
                f"turn {top.turn}, by {level}: {top.visited} {unlike} run(s) stood at the same state, {top.took} "
                f"chose {action!r}"
                + (f"; {top.others_took} of {top.others_visited} {alike} there did too" if top.others_visited else "")
                + f" (p={top.p:.2f}"
                + (", transition reported stochastic" if top.stochastic else "")
                + "); 1 turn: the evidence is about this one decision and no other turn's supports a longer segment"
            ),
        )
