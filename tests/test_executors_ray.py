"""The Ray executor on a real local Ray (2 CPUs, started once per module): the same bonus as the local
path for the same seeds; a dying worker, a raising environment and a never-ending continuation are
counted, workers are replaced, nothing hangs. Skipped when Ray is not installed (extra ``prover-core[ray]``)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from prover_core import DivergenceJudge, ProverConfig, SnapshotEnv, Trajectory, compute_bonus
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.errors import ContinuationTimeoutError, WorkerLostError
from prover_core.executors import RayExecutor
from tests.conftest import importorskip
from tests.verify_support import BATCH, Forever, make_restorable_env, plain, same_bonus

ray = importorskip("ray")


@pytest.mark.parametrize(("sampling", "delta_of"), [("fixed", "states"), ("adaptive", "states"), ("fixed", "choices")])
def test_ray_executor_gives_the_local_bonus(ray_cluster: None, sampling: str, delta_of: str) -> None:
    config = ProverConfig(sampling=sampling, delta_of=delta_of)  # type: ignore[arg-type]
    executor = RayExecutor(make_restorable_env, vault_policy, num_workers=2)
    try:
        executor.ready()
        remote = compute_bonus(BATCH, judge=DivergenceJudge(), executor=executor, config=config)
    finally:
        executor.shutdown()
    same_bonus(plain(config), remote)


def test_ray_failures_are_counted_and_workers_replaced(ray_cluster: None) -> None:
    def make_hook() -> Any:
        def go(trajectory: Trajectory, turn: int, seed: int) -> bool:
            if seed % 4 == 0:
                os._exit(1)  # the worker process dies
            if seed % 4 == 1:
                time.sleep(3600)  # never ends: the wall-time limit kills the worker
            if seed % 4 == 2:
                raise RuntimeError("environment raised")
            return True

        return go

    executor = RayExecutor(make_continue_from=make_hook, num_workers=2, timeout_s=1.0)

    async def go() -> list[Any]:
        return await asyncio.gather(*(executor(BATCH[0], 0, s) for s in range(8)), return_exceptions=True)

    try:
        start = time.monotonic()
        results = asyncio.run(go())
        assert time.monotonic() - start < 120
        for seed, r in enumerate(results):
            expected = [WorkerLostError, ContinuationTimeoutError, Exception, type(None)][seed % 4]
            if expected is type(None):
                assert r.success is True
            else:
                assert isinstance(r, expected), (seed, r)
        assert "environment raised" in str(results[2])
        assert executor.stats() == {"workers": 2, "workers_lost": 2, "workers_killed": 2}
        # and the pipeline counts them by kind and credits nothing
        group = next(g for g in plain(ProverConfig()).report.groups if g.verification is not None).group_id
        members = [t for t in BATCH if t.group_id == group]
        result = compute_bonus(members, judge=DivergenceJudge(), executor=executor, config=ProverConfig(k=4))
        m = result.report.metrics(prefix="")
        assert m["groups_verified"] == 1 and m["groups_accepted"] == 0 and m["groups_skipped"] == 1
        assert m["continuations_failed"] >= 1 and m["continuations_failed"] == sum(
            m[f"continuations_failed/{k}"] for k in ("worker_lost", "timeout", "error", "turn_limit", "restore")
        )
        # the pool still works after losing workers
        assert asyncio.run(executor(BATCH[0], 0, 3)).success is True
    finally:
        executor.shutdown()


def test_ray_turn_limit_travels_back_typed(ray_cluster: None) -> None:
    def make_restorable_env_forever() -> SnapshotEnv:
        return SnapshotEnv(lambda: MDPEnv(VaultMDP(horizon=10_000)))

    executor = RayExecutor(make_restorable_env_forever, Forever, num_workers=1, max_turns=20)
    try:
        result = compute_bonus(BATCH, judge=DivergenceJudge(), executor=executor, config=ProverConfig(k=2))
    finally:
        executor.shutdown()
    m = result.report.metrics(prefix="")
    assert m["continuations_failed/turn_limit"] == m["continuations"] > 0 and m["groups_accepted"] == 0


@pytest.mark.parametrize("delta_of", ["states", "choices"])
def test_ray_pickled_snapshots_give_the_local_bonus(ray_cluster: None, delta_of: str) -> None:
    """Restore state sent as a pickled snapshot (replayed once on the driver) instead of a replay spec."""
    config = ProverConfig(delta_of=delta_of)  # type: ignore[arg-type]
    executor = RayExecutor(make_policy=vault_policy, snapshots=make_restorable_env(), num_workers=2)
    try:
        remote = compute_bonus(BATCH, judge=DivergenceJudge(), executor=executor, config=config)
    finally:
        executor.shutdown()
    same_bonus(plain(config), remote)
    with pytest.raises(ValueError, match="snapshots need make_policy"):
        RayExecutor(make_continue_from=lambda: lambda t, turn, s: True, snapshots=make_restorable_env())
