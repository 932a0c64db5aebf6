"""Executors: local (inline and threads) and Ray (real, local, 2 CPUs) give the bonus of the plain path;
failures (dying worker, raising env, never-ending continuation) are counted and nothing hangs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from prover_core import DivergenceJudge, ProverConfig, SnapshotEnv, Trajectory, compute_bonus
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.errors import ContinuationTimeoutError
from prover_core.executors import LocalExecutor
from tests.verify_support import BATCH, Forever, make_restorable_env, plain, same_bonus

MDP = VaultMDP()


class Exploding:
    """An environment that raises mid-continuation."""

    def __init__(self) -> None:
        self.inner = MDPEnv(MDP)

    def reset(self, spec: Any) -> Any:
        return self.inner.reset(spec)

    def reseed(self, seed: int) -> None:
        self.inner.reseed(seed)

    def step(self, action: str) -> Any:
        if self.inner.turn >= 6:  # past every recorded boundary we restore to below
            raise RuntimeError("simulator segfault (simulated)")
        return self.inner.step(action)


@pytest.mark.parametrize("threads", [0, 2])
@pytest.mark.parametrize(("sampling", "delta_of"), [("fixed", "states"), ("adaptive", "states"), ("fixed", "choices")])
def test_local_executor_gives_the_plain_bonus(threads: int, sampling: str, delta_of: str) -> None:
    config = ProverConfig(sampling=sampling, delta_of=delta_of)  # type: ignore[arg-type]
    executor = LocalExecutor(make_restorable_env(), vault_policy(), threads=threads)
    try:
        same_bonus(plain(config), compute_bonus(BATCH, judge=DivergenceJudge(), executor=executor, config=config))
    finally:
        executor.shutdown()


def test_local_wall_time_limit_on_a_continuation_that_never_returns() -> None:
    async def hang(trajectory: Trajectory, turn: int, seed: int) -> bool:
        await asyncio.sleep(3600)
        return True

    config = ProverConfig(curtail=False, k=4, continuation_timeout_s=0.2)
    start = time.monotonic()
    result = compute_bonus(BATCH, judge=DivergenceJudge(), continue_from=hang, config=config)
    assert time.monotonic() - start < 30  # nothing hangs
    m = result.report.metrics(prefix="")
    verified = m["groups_verified"]
    assert verified >= 1 and m["groups_accepted"] == 0 and m["groups_skipped"] == verified
    assert m["continuations_failed/timeout"] == m["continuations"] == 8 * verified
    assert all("ContinuationTimeoutError" in g.reason for g in result.report.skips)


def test_local_threads_abandon_a_blocking_continuation() -> None:
    executor = LocalExecutor(continue_from=lambda t, turn, seed: time.sleep(0.5) or True, threads=2, timeout_s=0.05)

    async def go() -> list[Any]:
        return await asyncio.gather(*(executor(BATCH[0], 0, s) for s in range(3)), return_exceptions=True)

    try:
        assert all(isinstance(r, ContinuationTimeoutError) for r in asyncio.run(go()))
    finally:
        executor.shutdown()


def test_turn_limit_and_raising_env_are_counted() -> None:
    forever = LocalExecutor(SnapshotEnv(lambda: MDPEnv(VaultMDP(horizon=10_000))), Forever(), max_turns=30)
    result = compute_bonus(BATCH, judge=DivergenceJudge(), executor=forever, config=ProverConfig(k=2))
    m = result.report.metrics(prefix="")
    assert m["continuations_failed/turn_limit"] == m["continuations"] > 0 and m["groups_accepted"] == 0
    exploding = LocalExecutor(SnapshotEnv(Exploding), vault_policy())
    result = compute_bonus(BATCH, judge=DivergenceJudge(), executor=exploding, config=ProverConfig(k=2))
    m = result.report.metrics(prefix="")
    assert m["continuations_failed/error"] > 0 and m["groups_accepted"] == 0
    assert any("simulator segfault" in g.reason for g in result.report.skips)


def test_executor_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        LocalExecutor(make_restorable_env())
    with pytest.raises(ValueError):
        LocalExecutor(make_restorable_env(), vault_policy(), continue_from=lambda t, turn, s: True)
    with pytest.raises(ValueError):
        compute_bonus(
            BATCH,
            judge=DivergenceJudge(),
            executor=LocalExecutor(continue_from=lambda t, n, s: True),
            env=make_restorable_env(),
        )


def test_ray_executor_needs_its_factories() -> None:
    from prover_core.executors import RayExecutor

    with pytest.raises(ValueError, match="make_restorable_env and make_policy"):
        RayExecutor(make_policy=vault_policy)
