"""Shared helpers for the verification tests: Bernoulli continuers with known rates."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from prover_core import DivergenceJudge, ProverConfig, Segment, SnapshotEnv, Verification, compute_bonus
from prover_core.bonus import BonusResult
from prover_core.continuations import Continuer, hook_continuer
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.demo.run import rollout_batch
from prover_core.report import VerifyStats
from prover_core.verify import verify_segment_detailed
from tests.conftest import make_trajectory

TRAJ = make_trajectory("a", "g", True, list("abcdef"))
SEG = Segment(trajectory_id="a", start=1, end=2)  # pre boundary: turn 1, post boundary: turn 3


def bernoulli(p_pre: float, p_post: float) -> Continuer:
    """``R = 1{u < p(turn)}`` with ``u = seed / 2^32``: seeds are uniform 32-bit words, so continuation
    ``i`` is Bernoulli(p) and paired seeds share ``u`` (perfect common random numbers)."""
    rates = {SEG.start: p_pre, SEG.end + 1: p_post}
    return hook_continuer(lambda t, turn, seed: seed / 2**32 < rates[turn])


def run_many(
    config: ProverConfig, continuer: Continuer, runs: int, direction: str = "gain"
) -> list[tuple[Verification, VerifyStats]]:
    """``runs`` verifications of SEG on TRAJ with seeds 0..runs-1."""

    async def go() -> list[tuple[Verification, VerifyStats]]:
        return await asyncio.gather(
            *(
                verify_segment_detailed(
                    TRAJ, SEG, continuer, config.model_copy(update={"seed": s}).stages.verify, None, direction
                )  # type: ignore[arg-type]
                for s in range(runs)
            )
        )

    return asyncio.run(go())


BATCH = rollout_batch(VaultMDP(), 6, 8, seed=0)
"""6 groups of 8 vault runs (several eligible groups, some accepted with the demo policy)."""


def make_restorable_env() -> SnapshotEnv:
    return SnapshotEnv(lambda: MDPEnv(VaultMDP()))


def plain(config: ProverConfig) -> BonusResult:
    return compute_bonus(
        BATCH, judge=DivergenceJudge(), env=make_restorable_env(), policy=vault_policy(), config=config
    )


def same_bonus(a: BonusResult, b: BonusResult) -> None:
    assert a.report.summary() == b.report.summary()
    assert a.report.summary()["accepted"] >= 1
    for tid in a.turn_bonus:
        np.testing.assert_array_equal(a.turn_bonus[tid], b.turn_bonus[tid])
    assert a.report.metrics()["prover/continuations"] == b.report.metrics()["prover/continuations"]


class Forever:
    """A policy that never ends the vault episode (no time limit): only the turn limit stops it."""

    def act(self, context: Any) -> str:
        return "wait"
