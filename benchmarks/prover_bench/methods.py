"""The credit each method puts on each turn of a batch, and what it spent to get it.

All methods return a :class:`Credit`: ``per_turn[i, t]`` is the advantage that multiplies
``grad log pi(a_t | o_t)`` for turn ``t`` of episode ``i``.

* GRPO: ``R_i - mean_group(R)`` on every turn.
* ProVer (:func:`prover`): ``A_GRPO + lam * Delta`` on the accepted segment, through :func:`compute_bonus`.
* VinePPO: ``V^(s_{t+1}) - V^(s_t)`` with ``V^`` the mean of ``K`` continuations (``V^(s_T) = R``).
* SPO-chain: cut points every ``N`` turns; every turn of segment ``[b_j, b_{j+1})`` gets
  ``V^(s_{b_{j+1}}) - V^(s_{b_j})``.
* GiGPO: ``A^E_i + omega * A^S_{i,t}``; ``A^S`` centres the discounted return ``gamma^{T_i-1-t} R_i`` over
  all turns of the group that saw the same observation (the anchor state). No extra rollouts.

VinePPO and SPO-chain may be restricted to some episodes (``only``); the others keep GRPO credit.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prover_bench.batch import Batch
from prover_bench.tabular import FloatArray, IntArray, Sampler, Trace
from prover_core.bonus import BonusResult, Hooks, acompute_bonus, compute_bonus, run_pipeline
from prover_core.chance import LiftWindow
from prover_core.config import ProverConfig
from prover_core.data import Outcome, Trajectory
from prover_core.grpo import group_advantages
from prover_core.protocols import Judge

Estimator = Callable[[IntArray, IntArray], tuple[FloatArray, int, int]]
"""``(states, turns_left) -> (estimated V per request, continuations run, policy turns spent)``."""


@dataclass
class Credit:
    """One method's per-turn credit on a batch, its cost, and the turns it singled out."""

    name: str
    per_turn: FloatArray
    continuations: int = 0
    policy_turns: int = 0
    focus: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Episode -> inclusive turn range the method singled out (accepted segment, or top credit)."""
    verified: int = 0
    accepted: int = 0
    deltas: list[tuple[float, float]] = field(default_factory=list)
    """``(Delta, exact V(s_post) - V(s_pre))`` of every accepted segment."""


def mc_estimator(sampler: Sampler, k: int, rng: np.random.Generator) -> Estimator:
    """``V^(s, h)``: the success rate of ``k`` fresh continuations from ``s`` with ``h`` turns left."""

    def estimate(states: IntArray, turns_left: IntArray) -> tuple[FloatArray, int, int]:
        if states.size == 0:
            return np.zeros(0), 0, 0
        ep = sampler.many(np.repeat(states, k), np.repeat(turns_left, k), rng)
        means: FloatArray = ep.success.reshape(-1, k).mean(axis=1)
        return means, int(states.size * k), int(ep.length.sum())

    return estimate


def exact_estimator(batch: Batch) -> Estimator:
    """The oracle: ``V^ = V`` exactly, at no cost (for tests and as a ceiling)."""

    def estimate(states: IntArray, turns_left: IntArray) -> tuple[FloatArray, int, int]:
        return batch.values[np.clip(turns_left, 0, batch.c.horizon), states], 0, 0

    return estimate


def grpo(batch: Batch) -> Credit:
    """``A_i = R_i - mean(R)`` of its group, on every turn."""
    adv = np.concatenate(
        [group_advantages(batch.reward[g * batch.group_size : (g + 1) * batch.group_size]) for g in range(batch.groups)]
    )
    return Credit("GRPO", np.where(batch.mask, adv[:, None], 0.0))


def _episodes(batch: Batch, only: Iterable[int] | None) -> list[int]:
    return list(range(batch.n)) if only is None else sorted(set(only))


def _boundary_values(
    batch: Batch, rows: list[int], cuts: list[list[int]], estimator: Estimator
) -> tuple[list[FloatArray], int, int]:
    """``V^`` at the cut points ``cuts[j]`` (turn indices ``< T``) of episode ``rows[j]``, plus ``R`` at ``T``."""
    ep, h = batch.episodes, batch.c.horizon
    states = np.array([ep.states[i, t] for i, ts in zip(rows, cuts, strict=True) for t in ts], dtype=np.int64)
    left = np.array([h - t for ts in cuts for t in ts], dtype=np.int64)
    est, runs, turns = estimator(states, left)
    out, at = [], 0
    for i, ts in zip(rows, cuts, strict=True):
        out.append(np.append(est[at : at + len(ts)], batch.reward[i]))
        at += len(ts)
    return out, runs, turns


def _top(credit: FloatArray, length: int, width: int = 1) -> tuple[int, int]:
    """The segment (or turn) with the largest credit among nonterminal turns; ties to the earliest."""
    last = max(length - 2, 0)
    t = int(np.argmax(credit[: last + 1]))
    start = (t // width) * width
    return start, min(start + width - 1, last)


def vineppo(batch: Batch, estimator: Estimator, only: Iterable[int] | None = None, name: str = "VinePPO") -> Credit:
    """``A_t = V^(s_{t+1}) - V^(s_t)``, ``V^`` from ``estimator`` at every turn of the chosen episodes."""
    out = grpo(batch)
    rows = _episodes(batch, only)
    cuts = [list(range(int(batch.episodes.length[i]))) for i in rows]
    values, runs, turns = _boundary_values(batch, rows, cuts, estimator)
    for i, v in zip(rows, values, strict=True):
        out.per_turn[i, : len(v) - 1] = np.diff(v)
    credit = Credit(name, out.per_turn, runs, turns)
    credit.focus = _focus(batch, credit.per_turn, rows)
    return credit


def spo_chain(
    batch: Batch, estimator: Estimator, every: int = 4, only: Iterable[int] | None = None, name: str = "SPO-chain"
) -> Credit:
    """Cut points ``0, N, 2N, ... < T``; each turn gets its segment's ``V^(end) - V^(start)``."""
    if every < 1:
        raise ValueError("segments need at least one turn")
    out = grpo(batch)
    rows = _episodes(batch, only)
    cuts = [list(range(0, int(batch.episodes.length[i]), every)) for i in rows]
    values, runs, turns = _boundary_values(batch, rows, cuts, estimator)
    for i, ts, v in zip(rows, cuts, values, strict=True):
        length = int(batch.episodes.length[i])
        bounds = [*ts, length]
        for j in range(len(ts)):
            out.per_turn[i, bounds[j] : bounds[j + 1]] = v[j + 1] - v[j]
    credit = Credit(name, out.per_turn, runs, turns)
    credit.focus = _focus(batch, credit.per_turn, rows, every)
    return credit


def gigpo(batch: Batch, gamma: float = 0.95, omega: float = 1.0, normalize_std: bool = False) -> Credit:
    """Episode advantage plus ``omega`` times the step advantage within anchor-state groups."""
    out = grpo(batch)
    ep, c = batch.episodes, batch.c
    for g in range(batch.groups):
        members = range(g * batch.group_size, (g + 1) * batch.group_size)
        steps = [(i, t) for i in members for t in range(int(ep.length[i]))]
        keys = [int(c.obs_of[ep.states[i, t]]) for i, t in steps]
        returns = [gamma ** (int(ep.length[i]) - 1 - t) * batch.reward[i] for i, t in steps]
        for (i, t), a in zip(steps, step_advantages(keys, returns, normalize_std).tolist(), strict=True):
            out.per_turn[i, t] += omega * a
    credit = Credit(f"GiGPO (gamma={gamma:g})", out.per_turn)
    credit.focus = _focus(batch, credit.per_turn, list(batch.representatives().values()))
    return credit


def step_advantages(anchors: Sequence[Hashable], returns: Sequence[float], normalize_std: bool = False) -> FloatArray:
    """GiGPO's step advantage ``A^S``: each step's return minus the mean return of the group's steps that
    share its anchor state (divided by their std, ``ddof=1``, plus 1e-6 when ``normalize_std`` and more than one)."""
    if len(anchors) != len(returns):
        raise ValueError("one return per anchor")
    ret = np.asarray(returns, dtype=np.float64)
    out = np.zeros_like(ret)
    where: dict[Hashable, list[int]] = {}
    for j, key in enumerate(anchors):
        where.setdefault(key, []).append(j)
    for idx in where.values():
        r = ret[idx]
        centred = r - r.mean()
        if normalize_std and len(idx) > 1:
            centred = centred / (r.std(ddof=1) + 1e-6)
        out[idx] = centred
    return out


def _focus(batch: Batch, per_turn: FloatArray, rows: list[int], width: int = 1) -> dict[int, tuple[int, int]]:
    """The top-credit turn (or segment) of each eligible group's representative success among ``rows``."""
    chosen = set(rows)
    return {
        i: _top(per_turn[i], int(batch.episodes.length[i]), width)
        for i in batch.representatives().values()
        if i in chosen
    }


def tabular_hook(batch: Batch, sampler: Sampler, kept: Continuations | None = None) -> Callable[..., Outcome]:
    """``continue_from(trajectory, turn, seed, replay=0)`` over the batch's recorded episodes: ``sampler`` from
    the recorded state ``s_turn``; with ``replay = n`` first the recorded actions of turns ``turn ..
    turn+n-1`` again while on the recorded states (:meth:`Sampler.replay`, ``delta_of="choices"``). Each
    continuation's policy turns are kept in ``kept`` when given."""
    index = {batch.trajectory_id(i): i for i in range(batch.n)}
    ep, h = batch.episodes, batch.c.horizon

    def continue_from(trajectory: Trajectory, turn: int, seed: int, replay: int = 0) -> Outcome:
        i, rng = index[trajectory.id], np.random.default_rng(seed)
        trace: Trace | None = [] if kept is not None else None
        if replay:
            path, acts = ep.states[i, turn : turn + replay].tolist(), ep.actions[i, turn : turn + replay].tolist()
            success, turns = sampler.replay(path, acts, h - turn, rng, trace)
        else:
            success, turns = sampler.one(int(ep.states[i, turn]), h - turn, rng, trace)
        if kept is not None and trace is not None:
            kept.records.append(((trajectory.id, turn, replay), seed, success, trace))
        return Outcome(success=success, turns=turns)

    return continue_from


@dataclass
class Continuations:
    """The continuations one :func:`prover` call ran, kept as training samples ("continuations as data").

    Each is an on-policy sample from its boundary (the restored state, after any replayed turns); its policy
    turns enter the gradient with :func:`continuation_advantages`, ``R_c`` minus the mean of the other
    continuations from the same boundary, an unbiased baseline since it does not depend on ``c``'s actions.
    """

    records: list[tuple[tuple[str, int, int], int, bool, Trace]] = field(default_factory=list)
    """``((trajectory id, turn, replay), seed, success, trace)`` per continuation."""

    def samples(self) -> tuple[IntArray, IntArray, FloatArray, int]:
        """``(states, actions, advantages, continuations)``: each kept policy turn, its continuation's advantage."""
        ordered = sorted(self.records, key=lambda r: (r[0], r[1]))
        boundary_id: dict[tuple[str, int, int], int] = {}
        boundary = np.array([boundary_id.setdefault(r[0], len(boundary_id)) for r in ordered], dtype=np.int64)
        adv = continuation_advantages(np.array([float(r[2]) for r in ordered]), boundary)
        turns = [len(r[3]) for r in ordered]
        pairs = np.array([p for r in ordered for p in r[3]], dtype=np.int64).reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1], np.repeat(adv, turns), len(ordered)


def continuation_advantages(success: FloatArray, boundary: IntArray) -> FloatArray:
    """``A_c = R_c - mean of the other continuations from the same boundary`` (leave-one-out; 0 if alone)."""
    total = np.bincount(boundary, weights=success)[boundary]
    count = np.bincount(boundary)[boundary]
    out: FloatArray = np.where(count > 1, success - (total - success) / np.maximum(count - 1, 1), 0.0)
    return out


def run_bonus(
    trajectories: list[Trajectory],
    judge: Judge,
    continue_from: Callable[..., Outcome],
    config: ProverConfig,
) -> BonusResult:
    """:func:`run_bonus_with` continuations from ``continue_from``."""
    return run_bonus_with(trajectories, judge, config, continue_from=continue_from)


def run_bonus_with(
    trajectories: list[Trajectory],
    judge: Judge,
    config: ProverConfig,
    window: LiftWindow | None = None,
    **continuations: Any,
) -> BonusResult:
    """:func:`acompute_bonus` on a private event loop (:func:`compute_bonus` inside a running loop).

    ``continuations`` are ``continue_from=...`` or ``env=..., policy=...``. ``compute_bonus`` goes
    through ``asyncio.run``, which on CPython 3.11 formats the repr of the whole result when it
    restores the SIGINT handler; a plain loop avoids that fixed cost. ``window``: the judge against chance of
    earlier steps, kept by the caller (a run whose judge changes every step, which a ``ProverRun`` cannot be): the
    pipeline reads it (``lift_throttle``) and the report adds this step to it.
    """
    if window is None:
        call = acompute_bonus(trajectories, judge=judge, config=config, **continuations)
    else:
        call = run_pipeline(trajectories, judge, config, Hooks(**continuations), prior=window.total)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        try:
            result = loop.run_until_complete(call)
        finally:
            loop.close()
    else:
        call.close()
        if window is not None:
            raise RuntimeError("run_bonus_with(window=...) runs its own event loop: call it outside one")
        result = compute_bonus(trajectories, judge=judge, config=config, **continuations)
    return result if window is None else dataclasses.replace(result, report=result.report.windowed(window))


def prover(
    batch: Batch,
    judge: Judge,
    sampler: Sampler,
    config: ProverConfig,
    name: str = "ProVer",
    kept: Continuations | None = None,
) -> Credit:
    """:func:`compute_bonus` on the batch; continuations restore the recorded state and run ``sampler`` (and are
    kept in ``kept`` when given)."""
    trajectories = batch.trajectories()
    index = {batch.trajectory_id(i): i for i in range(batch.n)}
    result = run_bonus(trajectories, judge, tabular_hook(batch, sampler, kept), config)
    per_turn = np.zeros_like(batch.mask, dtype=np.float64)
    for i in range(batch.n):
        adv = result.turn_advantages(batch.trajectory_id(i))
        per_turn[i, : adv.shape[0]] = adv
    m = result.report.metrics(prefix="")
    credit = Credit(name, per_turn, int(m["continuations"]), int(m["policy_turns"]))
    v = batch.value_along()
    for g in result.report.groups:
        if g.verification is not None:
            credit.verified += 1
        if g.status == "accepted" and g.proposal is not None and g.verification is not None and g.trajectory_id:
            i, seg = index[g.trajectory_id], g.proposal.segment
            credit.accepted += 1
            credit.focus[i] = (seg.start, seg.end)
            credit.deltas.append((g.verification.delta, float(v[i, seg.end + 1] - v[i, seg.start])))
    return credit
