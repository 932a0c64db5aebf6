"""A family of small exact MDPs with pivots, and a linear-softmax policy shared across them.

Task ``n`` is a one-way corridor of ``L_n`` rooms (5-8) walked in ``H_n`` turns at most. One or two
rooms hold an *item* (pivotal: the exit door opens only when every item is carried, so walking past
one dooms the episode); one room holds a *decoy* that looks like an item (taking it costs a turn and
changes nothing else). ``go east`` slips (stays) with probability ``slip_n``; ``wait`` and ``look around``
change nothing but the clock.

A state is ``(room, carried)`` with index ``8 * room + carried`` (bits 0-1: the items, bit 2: the decoy);
the policy sees only the features

    phi(s) = [1, something lies here, at the exit, carrying every item, room / (L_n - 1)]

(items and decoys look alike), and acts by ``pi(a | s) = softmax_a(W phi(s))`` over the admissible
actions, with one weight matrix ``W`` (actions x features) shared by every task. Success
probabilities are exact by dynamic programming (:func:`values`):

    V_0 = 0,   V_h(s) = sum_a pi(a | s) sum_k P_k(s, a) (win_k if done_k else V_{h-1}(s'_k)).

Random numbers come from :func:`uniforms`, a counter-based generator: the draw of stream ``c`` at
index ``j`` for seed ``z`` is a hash of ``(z, j, c)``, so "the same randomness at the same turn" is a
matter of passing the same ``(z, j)`` (see :mod:`prover_core.pairing`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

ACTIONS = ("go east", "wait", "look around", "take it", "open the door")
GO, WAIT, LOOK, TAKE, OPEN = range(5)
FEATURES = ("bias", "something here", "at exit", "carry all", "progress")
MAX_ROOMS, MASKS = 8, 8
DECOY_BIT = 4
STATES = MAX_ROOMS * MASKS
INITIAL_WEIGHTS = (4.0, 1.0, 1.0, 1.5, 4.0)
"""``pi(a | s) ∝ INITIAL_WEIGHTS[a]`` at the start of training (the bias column of ``W``)."""

Keying = Literal["turn", "sequential"]


@dataclass
class Family:
    """``n`` tasks laid out as padded arrays over ``STATES`` states and 5 actions (2 outcomes each)."""

    rooms: IntArray  # (n,)
    horizon: IntArray  # (n,)
    items: IntArray  # (n, 2): item rooms, -1 if absent
    decoy: IntArray  # (n,)
    phi: FloatArray  # (n, S, F)
    allowed: BoolArray  # (n, S, A)
    prob: FloatArray  # (n, S, A, 2)
    nxt: IntArray  # (n, S, A, 2)
    done: BoolArray  # (n, S, A, 2)
    win: BoolArray  # (n, S, A, 2)
    obs: IntArray  # (n, S): observation id (equal features <=> equal id within a task)

    @property
    def n(self) -> int:
        return int(self.rooms.shape[0])

    @property
    def max_horizon(self) -> int:
        return int(self.horizon.max())

    def subset(self, tasks: IntArray) -> Family:
        return Family(*(getattr(self, f)[tasks] for f in self.__dataclass_fields__))


def make_family(n: int, rng: np.random.Generator) -> Family:
    """``n`` random tasks: 5-8 rooms, 1-2 items, one decoy, slip in [0.1, 0.3], horizon ``L + 4 + items``."""
    rooms = rng.integers(5, MAX_ROOMS + 1, n)
    n_items = rng.integers(1, 3, n)
    items = np.full((n, 2), -1, dtype=np.int64)
    decoy = np.zeros(n, dtype=np.int64)
    for t in range(n):
        inner = rng.permutation(np.arange(1, rooms[t] - 1))
        items[t, : n_items[t]] = np.sort(inner[: n_items[t]])
        decoy[t] = inner[n_items[t]]
    slip = rng.uniform(0.1, 0.3, n)
    horizon = rooms + 4 + n_items
    return build(rooms, items, decoy, slip, horizon)


def build(rooms: IntArray, items: IntArray, decoy: IntArray, slip: FloatArray, horizon: IntArray) -> Family:
    """The arrays of the tasks described by their layout (see the module docstring)."""
    n = int(rooms.shape[0])
    a_n = len(ACTIONS)
    phi = np.zeros((n, STATES, len(FEATURES)))
    allowed = np.zeros((n, STATES, a_n), dtype=bool)
    prob = np.zeros((n, STATES, a_n, 2))
    nxt = np.zeros((n, STATES, a_n, 2), dtype=np.int64)
    done = np.zeros((n, STATES, a_n, 2), dtype=bool)
    win = np.zeros((n, STATES, a_n, 2), dtype=bool)
    obs = np.zeros((n, STATES), dtype=np.int64)
    for t in range(n):
        full = sum(1 << i for i in range(2) if items[t, i] >= 0)
        for s in range(STATES):
            room, carried = divmod(s, MASKS)
            prob[t, s, :, 0], nxt[t, s, :, :] = 1.0, s
            if room >= rooms[t] or carried & ~(full | DECOY_BIT):  # unreachable padding: a self-loop on wait
                allowed[t, s, WAIT] = True
                continue
            item = next((i for i in range(2) if items[t, i] == room and not carried >> i & 1), None)
            lure = decoy[t] == room and not carried & DECOY_BIT
            here = item is not None or lure
            exit_ = room == rooms[t] - 1
            has_all = carried & full == full
            phi[t, s] = (1.0, float(here), float(exit_), float(has_all), room / (rooms[t] - 1))
            obs[t, s] = 8 * room + 4 * here + 2 * exit_ + has_all
            allowed[t, s, [WAIT, LOOK]] = True
            if exit_:
                allowed[t, s, OPEN] = True
                done[t, s, OPEN, 0], win[t, s, OPEN, 0] = True, has_all
                continue
            allowed[t, s, GO] = True
            prob[t, s, GO] = (1.0 - slip[t], slip[t])
            nxt[t, s, GO, 0] = s + MASKS
            if here:
                allowed[t, s, TAKE] = True
                nxt[t, s, TAKE, 0] = s | (1 << item if item is not None else DECOY_BIT)
    return Family(rooms, horizon, items, decoy, phi, allowed, prob, nxt, done, win, obs)


def initial_weights() -> FloatArray:
    """``W`` with ``pi(a | s) ∝ INITIAL_WEIGHTS[a]`` everywhere."""
    w = np.zeros((len(ACTIONS), len(FEATURES)))
    w[:, 0] = np.log(INITIAL_WEIGHTS)
    return w


def policy(fam: Family, w: FloatArray) -> FloatArray:
    """``pi[n, s, a]``: softmax of ``phi W^T`` over the admissible actions."""
    z = np.where(fam.allowed, fam.phi @ w.T, -np.inf)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    out: FloatArray = z / z.sum(axis=-1, keepdims=True)
    return out


def values(fam: Family, pi: FloatArray) -> FloatArray:
    """``V[h, n, s]`` for ``h = 0..max_horizon`` (the recursion of the module docstring).

    The policy's transition matrix ``M[n, s, s'] = sum_{a,k: not done} pi(a | s) P_k(s, a) 1[s'_k = s']`` and
    win probability ``w[n, s]`` are built once; then ``V_h = w + M V_{h-1}``.
    """
    n = fam.n
    weight = pi[..., None] * fam.prob
    win = (weight * (fam.done & fam.win)).sum(axis=(-1, -2))
    src = (np.arange(n)[:, None] * STATES + np.arange(STATES)[None, :])[:, :, None, None] * STATES
    flat = np.bincount((src + fam.nxt).ravel(), weights=(weight * ~fam.done).ravel(), minlength=n * STATES * STATES)
    move = flat.reshape(n, STATES, STATES)
    v = np.zeros((fam.max_horizon + 1, n, STATES))
    for h in range(1, fam.max_horizon + 1):
        v[h] = win + np.einsum("nst,nt->ns", move, v[h - 1])
    return v


def success(fam: Family, w: FloatArray) -> FloatArray:
    """The exact success probability of ``W`` on every task, from room 0 with nothing carried."""
    v = values(fam, policy(fam, w))
    out: FloatArray = v[fam.horizon, np.arange(fam.n), 0]
    return out


def uniforms(seeds: NDArray[np.uint64], index: IntArray, stream: int) -> FloatArray:
    """A uniform in [0, 1) per entry, a function of ``(seed, index, stream)`` only (splitmix64 of a mix)."""
    with np.errstate(over="ignore"):
        x = (
            seeds.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            + index.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
            + np.uint64(stream) * np.uint64(0x94D049BB133111EB)
        )
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    out: FloatArray = (x >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return out


ACTION_STREAM, ENV_STREAM = 1, 2


@dataclass
class Rollouts:
    """Episodes run in lockstep: ``states[i, j]``/``actions[i, j]`` of their ``j``-th own turn."""

    tasks: IntArray
    start_turn: IntArray
    states: IntArray  # (m, J), -1 after the end
    actions: IntArray
    length: IntArray
    success: BoolArray


def rollout(
    fam: Family,
    pi: FloatArray,
    tasks: IntArray,
    states: IntArray,
    turns: IntArray,
    seeds: NDArray[np.uint64],
    keying: Keying = "turn",
) -> Rollouts:
    """Run the policy from ``states`` at absolute ``turns`` until done or the task's horizon.

    Own turn ``j`` draws its action with ``uniforms(seed, key, ACTION_STREAM)`` and its transition with
    ``ENV_STREAM``, where ``key`` is the absolute turn ``turns + j`` (``keying="turn"``) or ``j``
    (``"sequential"``). The action is the inverse CDF of ``pi`` at the draw, the outcome the first of
    the two outcomes unless the draw is at least its probability.
    """
    m = int(tasks.shape[0])
    span = int((fam.horizon[tasks] - turns).max()) if m else 0
    cum = np.cumsum(pi, axis=-1)
    last = fam.allowed.shape[-1] - 1 - np.argmax(fam.allowed[..., ::-1], axis=-1)
    s = states.astype(np.int64).copy()
    alive = turns < fam.horizon[tasks]
    rec_s = np.full((m, max(span, 0)), -1, dtype=np.int64)
    rec_a = np.full((m, max(span, 0)), -1, dtype=np.int64)
    length = np.zeros(m, dtype=np.int64)
    won = np.zeros(m, dtype=bool)
    for j in range(span):
        alive &= turns + j < fam.horizon[tasks]
        if not alive.any():
            break
        key = turns + j if keying == "turn" else np.full(m, j)
        ua, ue = uniforms(seeds, key, ACTION_STREAM), uniforms(seeds, key, ENV_STREAM)
        a = np.minimum((ua[:, None] >= cum[tasks, s]).sum(axis=1), last[tasks, s])
        p0 = fam.prob[tasks, s, a, 0]
        k = (ue >= p0).astype(np.int64)
        rec_s[alive, j], rec_a[alive, j] = s[alive], a[alive]
        length += alive
        fin = fam.done[tasks, s, a, k] & alive
        won |= fin & fam.win[tasks, s, a, k]
        alive &= ~fin
        s = np.where(alive, fam.nxt[tasks, s, a, k], s)
    return Rollouts(tasks, turns, rec_s, rec_a, length, won)
