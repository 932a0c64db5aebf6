"""The benchmark environments: long corridors with one or two pivotal decisions hidden among harmless turns.

A :class:`Corridor` is a :class:`~prover_core.demo.FiniteMDP` with ``sections`` rooms walked
west to east (``go east`` slips with probability ``slip``), a time limit of ``horizon`` turns, and:

* **items** (pivotal): ``take the <item>`` in its room; the exit door opens only if every item is
  carried, and the corridor is one-way, so leaving an item behind dooms the episode;
* **fords** (pivotal, stochastic): ``wade the ford`` advances but sweeps the agent away (failure)
  with probability ``ford_risk``; ``cross the bridge`` advances like ``go east``;
* **forks** (distractors): ``take the left passage`` and ``take the right passage`` lead to the same
  next room, so successful and failed runs differ there without it mattering;
* harmless turns everywhere: ``wait`` and ``look around`` change nothing but the clock.

With ``hidden=True`` items are invisible: every ordinary room offers ``search the room``, which picks
up the item in an item room and does nothing elsewhere, and the observation never says what is
carried. The pivotal search then leaves no trace in what the agent (or a judge) sees next.

A state is ``(room, carried)``, ``carried`` a bitmask over items; the observation names both, so
success probabilities are exact by dynamic programming (:mod:`prover_bench.tabular`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prover_core.demo import Transition

ITEMS = ("brass key", "silver amulet", "rope")
TAKE = "take the {}"
GO, WAIT, LOOK = "go east", "wait", "look around"
LEFT, RIGHT = "take the left passage", "take the right passage"
BRIDGE, FORD = "cross the bridge", "wade the ford"
OPEN = "open the door"
SEARCH = "search the room"

BASE_WEIGHTS: Mapping[str, float] = {
    GO: 4.0,
    WAIT: 1.0,
    LOOK: 1.0,
    LEFT: 2.0,
    RIGHT: 2.0,
    BRIDGE: 1.5,
    FORD: 2.5,
    OPEN: 4.0,
    SEARCH: 1.5,
    **{TAKE.format(item): 1.5 for item in ITEMS},
}
"""The initial policy of every benchmark: ``pi(a | o) ∝ BASE_WEIGHTS[a]`` over the admissible actions."""


@dataclass(frozen=True)
class Corridor:
    """A one-way corridor; see the module docstring. Positions are 0-based rooms."""

    name: str
    sections: int = 16
    items: tuple[int, ...] = ()
    fords: tuple[int, ...] = ()
    forks: tuple[int, ...] = ()
    slip: float = 0.2
    ford_risk: float = 0.6
    horizon: int = 50
    hidden: bool = False

    def __post_init__(self) -> None:
        special = [*self.items, *self.fords, *self.forks]
        if len(set(special)) != len(special) or any(not 0 <= p < self.sections - 1 for p in special):
            raise ValueError(f"{self.name}: item, ford and fork rooms must be distinct and before the exit")
        if len(self.items) > len(ITEMS):
            raise ValueError(f"{self.name}: at most {len(ITEMS)} items")
        if not 0.0 <= self.slip < 1.0 or not 0.0 <= self.ford_risk <= 1.0 or self.horizon < 1:
            raise ValueError(f"{self.name}: slip in [0, 1), ford_risk in [0, 1], horizon >= 1")

    @property
    def all_items(self) -> int:
        return (1 << len(self.items)) - 1

    def initial(self, spec: Mapping[str, Any]) -> Hashable:
        return (0, 0)

    def _item_here(self, room: int, carried: int) -> int | None:
        for i, pos in enumerate(self.items):
            if pos == room and not carried >> i & 1:
                return i
        return None

    def observe(self, state: Hashable) -> str:
        room, carried = unpack(state)
        parts = [f"Section {room + 1} of {self.sections}."]
        item = self._item_here(room, carried)
        if item is not None and not self.hidden:
            parts.append(f"A {ITEMS[item]} lies on the floor.")
        if room in self.forks:
            parts.append("The passage forks left and right.")
        if room in self.fords:
            parts.append("A river: a narrow bridge upstream, a shallow ford here.")
        if room == self.sections - 1:
            parts.append("The exit door is here.")
        if self.hidden:
            return " ".join(parts)
        held = [ITEMS[i] for i in range(len(self.items)) if carried >> i & 1]
        parts.append(f"You carry {', '.join(held) if held else 'nothing'}.")
        return " ".join(parts)

    def actions(self, state: Hashable) -> tuple[str, ...]:
        room, carried = unpack(state)
        if room == self.sections - 1:
            return (OPEN, WAIT, LOOK)
        if room in self.forks:
            return (LEFT, RIGHT, WAIT, LOOK)
        if room in self.fords:
            return (BRIDGE, FORD, WAIT, LOOK)
        if self.hidden:
            return (GO, WAIT, LOOK, SEARCH)
        item = self._item_here(room, carried)
        return (GO, WAIT, LOOK) if item is None else (GO, WAIT, LOOK, TAKE.format(ITEMS[item]))

    def transitions(self, state: Hashable, action: str) -> Sequence[Transition]:
        room, carried = unpack(state)
        if action in (GO, LEFT, RIGHT, BRIDGE):
            return [(1.0 - self.slip, (room + 1, carried), False, False), (self.slip, (room, carried), False, False)]
        if action == FORD:
            return [(1.0 - self.ford_risk, (room + 1, carried), False, False), (self.ford_risk, state, True, False)]
        if action == OPEN:
            return [(1.0, state, True, carried == self.all_items)]
        item = self._item_here(room, carried)
        if item is not None and action == (SEARCH if self.hidden else TAKE.format(ITEMS[item])):
            return [(1.0, (room, carried | 1 << item), False, False)]
        return [(1.0, state, False, False)]

    def is_pivotal(self, state: Hashable, action: str) -> bool:
        """True for the decisions that matter: taking (or finding) an item, and choosing bridge or ford."""
        room, carried = unpack(state)
        if room in self.fords:
            return action in (BRIDGE, FORD)
        item = self._item_here(room, carried)
        return item is not None and action == (SEARCH if self.hidden else TAKE.format(ITEMS[item]))


def unpack(state: Hashable) -> tuple[int, int]:
    if not (isinstance(state, tuple) and len(state) == 2):
        raise TypeError(f"not a corridor state: {state!r}")
    return int(state[0]), int(state[1])


SUITE: tuple[Corridor, ...] = (
    Corridor("key", sections=16, items=(5,), forks=(2, 9, 12)),
    Corridor("two-keys", sections=18, items=(4, 12), forks=(2, 7, 9, 15)),
    Corridor("key+ford", sections=18, items=(6,), fords=(12,), forks=(3, 9, 15)),
    Corridor("late-key", sections=22, items=(17,), forks=(3, 6, 10, 13, 19), slip=0.1, horizon=60),
    Corridor("hidden-key", sections=16, items=(5,), forks=(2, 9, 12), hidden=True),
)
"""The environment suite (20-50 turn episodes; 1-2 pivotal decisions; 3-5 distractor forks)."""


def by_name(name: str) -> Corridor:
    """The suite's environment called ``name``; ``KeyError`` naming the known ones otherwise."""
    for env in SUITE:
        if env.name == name:
            return env
    raise KeyError(f"no benchmark environment {name!r}; known: {[e.name for e in SUITE]}")
