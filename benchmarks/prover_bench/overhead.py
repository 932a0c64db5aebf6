"""Overhead: wall time of :func:`compute_bonus` without continuations, against GRPO in the same run.

Continuations go through a ``continue_from`` hook that answers at once (``seed`` parity), so only the
library's own work is timed: validation, grouping, GRPO, trigger, the judge, scheduling 2K hook calls
per eligible group, and credit. Every group holds ``successes`` successes of ``group_size`` (2 of 8 by
default: every group is eligible, the worst case). Each time is the minimum over ``repeats`` runs
with the garbage collector off (as ``timeit`` advises: higher values come from other processes).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from prover_core.bonus import acompute_bonus, compute_bonus, group_batch
from prover_core.config import ProverConfig
from prover_core.data import Trajectory
from prover_core.grpo import grpo_advantages
from prover_core.judges import DivergenceJudge
from prover_core.protocols import Judge

ACTIONS = ("go east", "wait", "look around", "take the brass key")


def synthetic_batch(
    batch_size: int, turns: int, group_size: int = 8, successes: int = 2, seed: int = 0
) -> list[dict[str, object]]:
    """Plain-data trajectories (what a host hands over) of exactly ``turns`` turns each."""
    if batch_size % group_size:
        raise ValueError(f"batch_size {batch_size} is not a multiple of group_size {group_size}")
    rng = np.random.default_rng(seed)
    out: list[dict[str, object]] = []
    for i in range(batch_size):
        room = np.cumsum(rng.random(turns) < 0.6)
        acts = rng.integers(len(ACTIONS), size=turns)
        out.append(
            {
                "id": f"g{i // group_size:04d}-{i % group_size:02d}",
                "group_id": f"g{i // group_size:04d}",
                "reset": {"seed": i},
                "turns": [
                    {
                        "observation": f"Section {int(room[t]) + 1} of {turns}. You carry nothing.",
                        "action": ACTIONS[int(acts[t])],
                        "token_span": (12 * t + 8, 12 * t + 11),
                    }
                    for t in range(turns)
                ],
                "success": i % group_size < successes,
            }
        )
    return out


def instant(trajectory: Trajectory, turn: int, seed: int) -> bool:
    """A continuation hook that costs nothing: success iff ``seed`` is odd."""
    return bool(seed & 1)


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """The least wall time of ``fn()`` over ``repeats`` calls after one warm-up call, garbage collector off
    (as in ``timeit``)."""
    fn()
    gc.collect()
    gc.disable()
    try:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return min(times)


@dataclass
class Timing:
    """Seconds (best of the repeats) for one batch shape."""

    batch_size: int
    turns: int
    build: float
    """Validating the plain-data batch into :class:`Trajectory` objects."""
    grpo: float
    """The library's GRPO: ``grpo_advantages(group_batch(batch))`` on the same objects."""
    grpo_numpy: float
    """Bare numpy GRPO on a ``(B,)`` reward vector: the floor."""
    bonus: float
    """``compute_bonus`` (synchronous entry point), continuations excluded."""
    bonus_async: float
    """``acompute_bonus`` awaited on an existing event loop."""
    token_matrix: float
    """``bonus_matrix`` of the whole batch (what an adapter adds to its advantages)."""
    hook_calls: int

    @property
    def ratio(self) -> float:
        return self.bonus / self.grpo

    @property
    def per_turn_us(self) -> float:
        return 1e6 * self.bonus_async / (self.batch_size * self.turns)


def time_batch(
    batch_size: int, turns: int, repeats: int = 5, judge: Judge | None = None, config: ProverConfig | None = None
) -> Timing:
    """Time every stage above on one synthetic batch of ``batch_size`` trajectories of ``turns`` turns."""
    judge = judge or DivergenceJudge()
    config = config or ProverConfig(k=8, curtail=False)  # the paper's K, one round: as the figures in docs/
    raw = synthetic_batch(batch_size, turns)
    batch = [Trajectory.model_validate(t) for t in raw]
    rewards = np.array([t.success for t in batch], dtype=np.float64).reshape(-1, 8)
    loop = asyncio.new_event_loop()
    try:
        result = compute_bonus(batch, judge=judge, continue_from=instant, config=config)
        ids = [t.id for t in batch]
        length = 12 * turns
        timing = Timing(
            batch_size=batch_size,
            turns=turns,
            build=best_time(lambda: [Trajectory.model_validate(t) for t in raw], repeats),
            grpo=best_time(lambda: grpo_advantages(group_batch(batch)), repeats),
            grpo_numpy=best_time(lambda: rewards - rewards.mean(axis=1, keepdims=True), repeats),
            bonus=best_time(lambda: compute_bonus(batch, judge=judge, continue_from=instant, config=config), repeats),
            bonus_async=best_time(
                lambda: loop.run_until_complete(
                    acompute_bonus(batch, judge=judge, continue_from=instant, config=config)
                ),
                repeats,
            ),
            token_matrix=best_time(lambda: result.bonus_matrix(ids, length), repeats),
            hook_calls=int(result.report.metrics(prefix="")["continuations"]),
        )
    finally:
        loop.close()
    return timing


def run_overhead(
    batch_sizes: Sequence[int] = (16, 32, 64, 128, 256, 512),
    lengths: Sequence[int] = (10, 25, 50, 100, 200),
    repeats: int = 5,
    show_progress: bool = True,
) -> dict[str, list[Timing]]:
    """Scaling in batch size (50 turns) and in length (128 runs); ``headline`` is the 128 x 50 case."""
    from prover_bench.progress import progress

    shapes = sorted({(128, 50), *((b, 50) for b in batch_sizes), *((128, t) for t in lengths)})
    timed = {(b, t): time_batch(b, t, repeats) for b, t in progress(shapes, len(shapes), "overhead", show_progress)}
    return {
        "headline": [timed[128, 50]],
        "batch": [timed[b, 50] for b in sorted({*batch_sizes, 128})],
        "length": [timed[128, t] for t in sorted({*lengths, 50})],
    }


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least squares ``y = a + b x``: ``(a, b, R^2)``."""
    x, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    b, a = np.polyfit(x, y, 1)
    resid = y - (a + b * x)
    total = float(((y - y.mean()) ** 2).sum())
    return float(a), float(b), 1.0 - float((resid**2).sum()) / total if total > 0 else 1.0
