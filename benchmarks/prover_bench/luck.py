"""Corridors where luck decides success: rockfalls that end the episode whatever the agent chooses.

A :class:`PitCorridor` is a :class:`~prover_bench.suite.Corridor` with ``pits``: rooms under loose
rock where every move east (``go east``, a passage, the bridge) ends the episode as a failure with
probability ``pit_risk`` (after the usual ``slip``), and ``wait``/``look around`` only spend time.
Every run must pass the pits, so whether a run survives them is a lucky transition, not a choice:
the decision value ``Q_h(s, a) - V_h(s)`` of the move through a pit is about 0 (the alternatives only
delay it), while the run's outcome swings by ``pit_risk``. The pivots stay the items (and fords)
of :meth:`Corridor.is_pivotal`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from prover_bench.suite import BRIDGE, GO, LEFT, RIGHT, Corridor, unpack
from prover_core.demo import Transition


@dataclass(frozen=True)
class PitCorridor(Corridor):
    """A corridor with rockfall rooms (module docstring)."""

    pits: tuple[int, ...] = ()
    pit_risk: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(not 0 <= p < self.sections - 1 for p in self.pits) or set(self.pits) & {*self.items, *self.fords}:
            raise ValueError(f"{self.name}: pits must be before the exit and not in item or ford rooms")
        if not 0.0 <= self.pit_risk <= 1.0:
            raise ValueError(f"{self.name}: pit_risk in [0, 1]")

    def observe(self, state: Hashable) -> str:
        text = super().observe(state)
        room, _ = unpack(state)
        return f"{text} Loose rocks hang overhead." if room in self.pits else text

    def transitions(self, state: Hashable, action: str) -> Sequence[Transition]:
        room, carried = unpack(state)
        if room not in self.pits or action not in (GO, LEFT, RIGHT, BRIDGE):
            return super().transitions(state, action)
        ahead = 1.0 - self.slip
        return [
            (ahead * (1.0 - self.pit_risk), (room + 1, carried), False, False),
            (self.slip, (room, carried), False, False),
            (ahead * self.pit_risk, state, True, False),
        ]
