"""The text tasks of the LLM-shaped benchmark: a corridor of rooms, one goal key among look-alikes.

A task (from its id) is a corridor of 12-18 halls, 4 key rooms (4 distinct colours of 6) and a door.
The prefix ``<bos> goal <colour>`` names the goal colour; each turn's observation is the 3 tokens
``[room index, held, item]``; an action is 2-4 tokens ending in ``.``. Transitions (see
docs/benchmarks.md, "LLM-shaped benchmark: design"):

* hall, ``go ahead .``: advance with probability ``1 - SLIP`` (a uniform draw ``u >= SLIP``), else stay;
* key room of colour ``c``, ``take the key .``: hold key ``c`` (replacing the held one) and advance;
  ``skip .`` or ``go ahead .``: advance;
* door, ``open door .``: the episode ends, a success iff the held key has the goal colour;
* anything else (``wait .``, an invalid action): stay. A turn is spent either way; the episode fails
  when the turn limit ``T = rooms + ceil(halls / 2) + 2`` is reached.

A task's *variant* (:data:`VARIANTS`) changes only how the observation shows the goal, never the rooms, the
transitions or the tokens of the prefix and the actions (``benchmarks/llm_regime.py`` uses them):

* ``default`` (the benchmark's): ``[room index, held, item]``; the goal colour is said once, in the prefix;
* ``local``: ``[goal colour, held, item]``, the goal colour in place of the room index on every turn, so a key
  room's decision needs only the current observation (is the item's colour the one 2 tokens back?);
* ``marked``: ``[room index, held, item]`` with the word ``goal`` as the item of the goal key's room (the other
  key rooms show their colour), so the decision is read off one token.

One variant changes the goal as well: ``last`` (``benchmarks/llm_ceiling.py``) shows the goal as ``marked`` does and
makes the goal key the *last* key room's (the same rooms and colours as every other variant of the id; only the goal
differs). A key taken earlier is replaced by the goal key, so the earlier key rooms are harmless distractors: taking
the goal key is the one decision that matters, and there is no second decision (no keep, :func:`is_keep`).

Only numpy: this module is imported without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

SLIP = 0.2
"""Probability that ``go ahead .`` in a hall leaves the agent in place."""
COLOURS = ("red", "blue", "green", "yellow", "white", "black")
KEY_ROOMS = 4
HALLS = (12, 18)
MAX_ROOMS = HALLS[1] + KEY_ROOMS + 1
HALL, DOOR = -1, -2
NONE = -1
MAX_ACTION_TOKENS = 4
EXPERT_NOISE = 0.1
"""The noisy expert's chance of ``wait .`` in a hall or at the door."""
TASK_STREAM = 0x7A5C
VARIANTS = ("default", "local", "marked", "last")
"""How the observation shows the goal, and for ``last`` where the goal key lies (module docstring); ``default`` is the
LLM-shaped benchmark's."""

WORDS = (
    "<pad>",
    "<bos>",
    "goal",
    ".",
    "hall",
    "door",
    "none",
    "go",
    "ahead",
    "take",
    "the",
    "key",
    "skip",
    "open",
    "wait",
)
VOCAB: tuple[str, ...] = WORDS + COLOURS + tuple(f"r{i}" for i in range(MAX_ROOMS))
TOKEN = {w: i for i, w in enumerate(VOCAB)}
END = TOKEN["."]

Action = tuple[str, int]
"""``(verb, -1)``: ``go``, ``take``, ``skip``, ``open``, ``wait`` or ``invalid`` (the second field is kept for
actions with an argument; none has one now)."""


@dataclass(frozen=True)
class Task:
    """One generated task: its id, goal colour, rooms (``HALL``, ``DOOR`` or a key colour), turn limit, and how
    its observations show the goal (:data:`VARIANTS`)."""

    id: int
    goal: int
    rooms: tuple[int, ...]
    limit: int
    variant: str = "default"

    @property
    def goal_room(self) -> int:
        return self.rooms.index(self.goal)

    @property
    def halls(self) -> int:
        return sum(r == HALL for r in self.rooms)


@dataclass(frozen=True)
class State:
    """Where an episode stands before a turn: room, held key (``NONE`` or a colour), turns spent."""

    room: int = 0
    held: int = NONE
    turn: int = 0
    done: bool = False
    success: bool = False


@lru_cache(maxsize=4096)
def make_task(task_id: int, variant: str = "default") -> Task:
    """The task with this id (deterministic: a pure function of ``task_id``; the variant changes only the
    observation tokens, so every variant of an id has the same rooms and limit, and every variant but ``last`` the
    same goal)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown task variant {variant!r}; choose from {', '.join(VARIANTS)}")
    rng = np.random.default_rng([TASK_STREAM, task_id])
    halls = int(rng.integers(HALLS[0], HALLS[1] + 1))
    n = halls + KEY_ROOMS + 1
    colours = [int(c) for c in rng.choice(len(COLOURS), size=KEY_ROOMS, replace=False)]
    places = sorted(int(p) for p in rng.choice(np.arange(1, n - 1), size=KEY_ROOMS, replace=False))
    rooms = [HALL] * n
    rooms[-1] = DOOR
    for p, c in zip(places, colours, strict=True):
        rooms[p] = c
    goal = colours[int(rng.integers(KEY_ROOMS))]  # drawn for every variant, so the draws stay the same
    if variant == "last":
        goal = colours[-1]  # ``places`` are sorted: the last key room's colour
    return Task(task_id, goal, tuple(rooms), n + math.ceil(halls / 2) + 2, variant)


def step(task: Task, state: State, action: Action, u: float) -> State:
    """The state after ``action`` with the uniform draw ``u`` (used only by a hall's ``go ahead .``)."""
    if state.done:
        raise ValueError("the episode is over")
    verb = action[0]
    item = task.rooms[state.room]
    room, held = state.room, state.held
    if item == HALL and verb == "go":
        room += u >= SLIP
    elif item >= 0 and verb == "take":
        room, held = room + 1, item
    elif item >= 0 and verb in ("skip", "go"):
        room += 1
    elif item == DOOR and verb == "open":
        return State(room, held, state.turn + 1, done=True, success=held == task.goal)
    turn = state.turn + 1
    return State(room, held, turn, done=turn >= task.limit, success=False)


def observation(task: Task, state: State) -> tuple[int, int, int]:
    """``(room, item, held)``: what the agent sees before a turn (also the anchor key of GiGPO and the judge)."""
    return state.room, task.rooms[state.room], state.held


def _colour_or(value: int, other: str) -> int:
    return TOKEN[COLOURS[value]] if value >= 0 else TOKEN[other]


def prefix_tokens(task: Task) -> list[int]:
    return [TOKEN["<bos>"], TOKEN["goal"], TOKEN[COLOURS[task.goal]]]


def observation_tokens(task: Task, state: State) -> list[int]:
    """``[room index, held, item]``; ``local``: the goal colour first; ``marked``: ``goal`` as the goal key's item."""
    room, item, held = observation(task, state)  # the item last: the action follows it
    first = TOKEN[COLOURS[task.goal]] if task.variant == "local" else TOKEN[f"r{room}"]
    last = (
        TOKEN["goal"]
        if task.variant in ("marked", "last") and item == task.goal
        else _colour_or(item, "hall" if item == HALL else "door")
    )
    return [first, _colour_or(held, "none"), last]


def action_tokens(action: Action) -> list[int]:
    verb, colour = action
    words = {
        "go": ["go", "ahead"],
        "skip": ["skip"],
        "open": ["open", "door"],
        "wait": ["wait"],
        "take": ["take", "the", "key"],
    }.get(verb)
    if words is None or colour != NONE:
        raise ValueError(f"no tokens for {action}")
    return [TOKEN[w] for w in words] + [END]


def parse(tokens: list[int]) -> Action:
    """The action a sampled token sequence names; ``("invalid", -1)`` for anything else."""
    return _ACTIONS.get(tuple(tokens), ("invalid", NONE))


_ACTIONS: dict[tuple[int, ...], Action] = {
    tuple(action_tokens(a)): a for a in [("go", NONE), ("skip", NONE), ("open", NONE), ("wait", NONE), ("take", NONE)]
}


def action_text(tokens: list[int]) -> str:
    return " ".join(VOCAB[t] for t in tokens)


def expert(task: Task, state: State, rng: np.random.Generator, skill: float = 0.5) -> Action:
    """The noisy expert: ``go``/``open`` with probability 0.9 (else ``wait``), take or skip a key at 1/2
    whatever its colour. With ``skill`` other than 1/2 it takes the goal key with probability ``skill`` and any
    other key with probability ``1 - skill`` (the same single draw: at 1/2 it is the expert above)."""
    item = task.rooms[state.room]
    if item >= 0:
        take = skill if item == task.goal else 1.0 - skill
        return ("take", NONE) if rng.random() < take else ("skip", NONE)
    if rng.random() < EXPERT_NOISE:
        return "wait", NONE
    return ("go", NONE) if item == HALL else ("open", NONE)


def solved(task: Task, state: State) -> Action:
    """The optimal action (take exactly the goal key)."""
    item = task.rooms[state.room]
    if item >= 0:
        return ("take", NONE) if item == task.goal and state.held != task.goal else ("skip", NONE)
    return ("go", NONE) if item == HALL else ("open", NONE)


def is_pivot(task: Task, state: State, action: Action) -> bool:
    """The pivotal decision: taking the goal key in its room."""
    return task.rooms[state.room] == task.goal and action == ("take", NONE)


def is_keep(task: Task, state: State, action: Action) -> bool:
    """The second decision of an episode whose goal key room is not the last: holding the goal key in a later
    key room and not taking that room's key (taking it would replace the goal key)."""
    item = task.rooms[state.room]
    return item >= 0 and item != task.goal and state.held == task.goal and action[0] != "take"


def is_mistake(task: Task, state: State, action: Action) -> bool:
    """A decision that makes success impossible: leaving the goal room without its key (``skip``/``go`` while
    not holding it), or swapping the goal key for another (``take`` in another key room while holding it)."""
    item = task.rooms[state.room]
    if item < 0:
        return False
    if item == task.goal:
        return state.held != task.goal and action[0] in ("skip", "go")
    return state.held == task.goal and action[0] == "take"


@dataclass
class Record:
    """One episode as tokens: the full sequence, each turn's state, observation start and action span."""

    task: Task
    tokens: list[int]
    states: list[State]
    obs_start: list[int]
    spans: list[tuple[int, int]]
    actions: list[Action]
    draws: list[float]
    final: State

    @property
    def turns(self) -> int:
        return len(self.states)

    @property
    def success(self) -> bool:
        return self.final.success

    @property
    def action_tokens(self) -> int:
        return sum(b - a for a, b in self.spans)


def start_record(task: Task, state: State | None = None, prefix: list[int] | None = None) -> Record:
    """An empty record at the task's start, or at a restored ``state`` after the token ``prefix``."""
    return Record(task, list(prefix_tokens(task) if prefix is None else prefix), [], [], [], [], [], state or State())


def play(record: Record, action_toks: list[int], u: float) -> Record:
    """Append one turn: the observation of ``record.final``, the action tokens, the transition."""
    state = record.final
    record.states.append(state)
    record.obs_start.append(len(record.tokens))
    record.tokens += observation_tokens(record.task, state)
    start = len(record.tokens)
    record.tokens += action_toks
    record.spans.append((start, len(record.tokens)))
    action = parse(action_toks)
    record.actions.append(action)
    record.draws.append(u)
    record.final = step(record.task, state, action, u)
    return record


def simulate(task: Task, chooser: str, rng: np.random.Generator, skill: float = 0.5) -> Record:
    """An episode of the noisy ``"expert"`` (with its ``skill`` at key rooms) or the ``"solved"`` policy."""
    record = start_record(task)
    while not record.final.done:
        s = record.final
        action = expert(task, s, rng, skill) if chooser == "expert" else solved(task, s)
        play(record, action_tokens(action), float(rng.random()))
    return record


def restored(record: Record, turn: int) -> Record:
    """A new record positioned exactly before ``turn`` of ``record``: same state, same token history."""
    if not 0 <= turn < record.turns:
        raise ValueError(f"turn {turn} is outside 0..{record.turns - 1}")
    return start_record(record.task, replace(record.states[turn]), record.tokens[: record.obs_start[turn]])
