"""Free samples: group members that reached a verification boundary, as on-policy samples of its value.

Under a replayable environment (the state is a function of the reset spec and the recorded
actions and observations), a member ``j`` of the representative's group with the same reset spec,
the same turns ``0..b-1`` and the same observation at turn ``b`` was in state ``s_b`` at turn ``b``,
and its outcome ``R_j`` is a draw of ``V(s_b)`` under the policy that produced the batch. Pooling
``m`` such outcomes with ``n`` continuations, ``V^ = (sum of continuation outcomes + sum R_j) / (n + m)``,
would save ``m`` continuations.

**They are biased, so this is off by default.** The group was selected *because of its outcomes*:
the trigger needs ``0 < W / G < 1/2`` successes (``W`` of ``G``), and the representative is a success.
The other members then hold exactly ``W - 1`` of the successes, so at ``s_0`` (every member is there)

    E[free-sample mean | trigger] = E[(W - 1) / (G - 1) | 1 <= W < G / 2],   W ~ Bin(G, p),

which is far below ``p`` (:func:`start_bias`: ``-0.092`` at ``p = 0.2``, ``G = 8``; ``-0.283`` at
``p = 0.5``). At later boundaries the bias is diluted but of the same sign: it lowers ``V^(s_pre)``
more often than ``V^(s_post)`` (fewer members share the longer prefix), inflating ``Delta``. The
benchmark measures it against exact values (docs/verification.md). We found no unbiased variant
that uses the same group: any function of the members' outcomes inherits the conditioning on the
trigger.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from prover_core.data import Trajectory


def reached(representative: Trajectory, member: Trajectory, turn: int) -> bool:
    """True if ``member`` has the representative's reset spec, turns ``0..turn-1`` and observation at ``turn``."""
    if member.id == representative.id or member.reset != representative.reset:
        return False
    if turn >= representative.num_turns or turn >= member.num_turns:
        return False
    same = all(
        a.observation == b.observation and a.action == b.action
        for a, b in zip(representative.turns[:turn], member.turns[:turn], strict=True)
    )
    return same and representative.turns[turn].observation == member.turns[turn].observation


def free_samples(representative: Trajectory, members: Sequence[Trajectory], turn: int) -> list[Trajectory]:
    """The members (the representative excluded) that reached the representative's state at ``turn``."""
    return [m for m in members if reached(representative, m, turn)]


def pooled_rate(continuation_successes: int, continuations: int, free: Sequence[Trajectory]) -> float:
    """``(continuation successes + free successes) / (continuations + len(free))``."""
    total = continuations + len(free)
    if total == 0:
        raise ValueError("no continuation and no free sample")
    return (continuation_successes + sum(m.success for m in free)) / total


def matching_members(
    states: NDArray[np.int64],
    actions: NDArray[np.int64],
    length: NDArray[np.int64],
    rep: int,
    others: Sequence[int],
    turn: int,
) -> list[int]:
    """Array form of :func:`reached` where ``states`` identify states: rows equal to ``rep`` up to ``turn``."""
    if turn >= length[rep]:
        return []
    return [
        j
        for j in others
        if length[j] > turn
        and np.array_equal(states[j, : turn + 1], states[rep, : turn + 1])
        and np.array_equal(actions[j, :turn], actions[rep, :turn])
    ]


def start_bias(p: float, group_size: int) -> float:
    """``E[(W - 1) / (G - 1) | 1 <= W < G/2] - p`` for ``W ~ Bin(G, p)``: the free samples' bias at ``s_0``."""
    g = group_size
    ws = [w for w in range(1, g) if w / g < 0.5]
    probs = [math.comb(g, w) * p**w * (1 - p) ** (g - w) for w in ws]
    total = sum(probs)
    if total == 0:
        raise ValueError(f"no group of {g} with success rate in (0, 1/2) at p = {p}")
    return sum(q * (w - 1) / (g - 1) for q, w in zip(probs, ws, strict=True)) / total - p
