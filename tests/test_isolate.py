"""IsolatedEnv (issue 54): an environment in killable worker processes, so that one that hangs costs a continuation
and never switches verification off for the rest of a run."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prover_core import DivergenceJudge, ProverConfig, compute_bonus
from prover_core._aio import blocked_threads
from prover_core.bonus import BonusResult
from prover_core.demo import vault_policy
from prover_core.errors import ContinuationTimeoutError, ProtocolError, UsageError, WorkerLostError
from prover_core.isolate import IsolatedEnv
from tests.isolated_envs import FaultyVault, failing_factory, vault_env
from tests.verify_support import BATCH, plain, same_bonus

ROOT = Path(__file__).resolve().parents[1]
TRAJECTORY = next(t for t in BATCH if t.num_turns >= 3)


def isolated(env: IsolatedEnv, config: ProverConfig) -> BonusResult:
    return compute_bonus(BATCH, judge=DivergenceJudge(), env=env, policy=vault_policy(), config=config)


def children() -> int:
    """This process's child processes still running (from /proc: no helper library needed)."""
    me = str(os.getpid())
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            count += fields[1] == me and fields[0] != "Z"
    return count


def test_an_isolated_env_verifies_exactly_as_the_environment_in_process() -> None:
    """Same restores, same seeds, same steps: the bonuses, the report and the continuations counted are identical."""
    config = ProverConfig()
    with IsolatedEnv(vault_env, processes=2) as env:
        same_bonus(plain(config), isolated(env, config))
        assert env.stats() == {"started": 2, "killed": 0, "live": 2}


def test_a_step_past_its_time_limit_kills_its_worker_and_the_next_episode_runs(tmp_path: Path) -> None:
    flag = tmp_path / "fault"
    with IsolatedEnv(functools.partial(FaultyVault, str(flag)), processes=1, timeout_s=0.5) as env:

        async def go() -> None:
            first = await env.restore(TRAJECTORY, 1, seed=7)
            flag.write_text("hang")
            with pytest.raises(ContinuationTimeoutError, match=r"longer than 0\.5 s"):
                await first.step(TRAJECTORY.turns[1].action)
            assert env.stats() == {"started": 2, "killed": 1, "live": 1}  # replaced at once, one process at a time
            assert children() <= 1
            flag.unlink()
            second = await env.restore(TRAJECTORY, 1, seed=7)
            step = await second.step(TRAJECTORY.turns[1].action)
            assert step.observation == TRAJECTORY.turns[2].observation  # the recorded transition, replayed
            assert env.stats() == {"started": 2, "killed": 1, "live": 1}

        asyncio.run(go())


def test_a_worker_that_dies_is_a_lost_worker_and_is_replaced(tmp_path: Path) -> None:
    flag = tmp_path / "fault"
    with IsolatedEnv(functools.partial(FaultyVault, str(flag)), processes=1) as env:

        async def go() -> None:
            episode = await env.restore(TRAJECTORY, 0, seed=1)
            flag.write_text("die")
            with pytest.raises(WorkerLostError, match="exit code 3"):
                await episode.step(TRAJECTORY.turns[0].action)
            flag.unlink()
            again = await env.restore(TRAJECTORY, 0, seed=1)
            await again.step(TRAJECTORY.turns[0].action)
            assert env.stats() == {"started": 2, "killed": 1, "live": 1}

        asyncio.run(go())


def test_an_error_the_environment_raises_reaches_the_caller_and_keeps_the_worker(tmp_path: Path) -> None:
    flag = tmp_path / "fault"
    flag.write_text("raise")
    with IsolatedEnv(functools.partial(FaultyVault, str(flag)), processes=1) as env:

        async def go() -> None:
            episode = await env.restore(TRAJECTORY, 0, seed=1)
            with pytest.raises(ValueError, match="refused the action"):
                await episode.step(TRAJECTORY.turns[0].action)
            with pytest.raises(UsageError, match="has ended"):
                await episode.step(TRAJECTORY.turns[0].action)
            await env.restore(TRAJECTORY, 0, seed=1)

        asyncio.run(go())
        assert env.stats() == {"started": 1, "killed": 0, "live": 1}


def test_one_worker_serves_episodes_one_after_another() -> None:
    """With one process, a second restore waits until the first episode ends, then reuses the same worker."""
    with IsolatedEnv(vault_env, processes=1) as env:

        async def run(seed: int) -> Any:
            episode = await env.restore(TRAJECTORY, 0, seed=seed)
            await asyncio.sleep(0.05)  # the others are waiting for the worker meanwhile
            step = await episode.step(TRAJECTORY.turns[0].action)  # admissible in the restored state
            episode.close()
            return step.observation

        async def together() -> list[Any]:
            return await asyncio.wait_for(asyncio.gather(run(1), run(2), run(3)), 60)

        finals = asyncio.run(together())
        assert len(finals) == 3 and env.stats() == {"started": 1, "killed": 0, "live": 1}


def test_setup_errors_are_raised_not_counted() -> None:
    with pytest.raises(ProtocolError, match="must pickle"):
        IsolatedEnv(lambda: vault_env())
    with pytest.raises(UsageError, match="positive integer"):
        IsolatedEnv(vault_env, processes=0)
    with (
        IsolatedEnv(failing_factory, processes=1) as env,
        pytest.raises(UsageError, match="factory failed in its worker process: OSError: no such simulator"),
    ):
        isolated(env, ProverConfig())


HEALTHY = ProverConfig(continuation_timeout_s=60.0)
"""The healthy call's settings: a time limit (so that synchronous code is under one) that nothing reaches."""


def healthy_result(flag: str) -> dict[str, Any]:
    """The healthy call, as JSON: the report's summary and metrics (times left out) and every bonus."""
    with IsolatedEnv(functools.partial(FaultyVault, flag), processes=2) as env:
        return _as_json(isolated(env, HEALTHY))


def _as_json(result: BonusResult) -> dict[str, Any]:
    metrics = {k: v for k, v in result.report.metrics().items() if "/time/" not in k}
    bonus = {tid: np.asarray(b).tolist() for tid, b in sorted(result.turn_bonus.items())}
    return json.loads(json.dumps({"summary": result.report.summary(), "metrics": metrics, "bonus": bonus}))


def test_ten_calls_with_a_hanging_environment_then_a_healthy_call_verifies_as_in_a_fresh_process(
    tmp_path: Path,
) -> None:
    """Issue 54's measure: ten ``compute_bonus`` calls whose environment hangs in every step (each continuation
    timed out, its worker killed), then the same environment healthy again in the same process: the call verifies
    exactly as in a fresh interpreter, no thread is left blocked, and at most ``processes`` workers ever run."""
    flag = tmp_path / "fault"
    threads = threading.active_count()
    hanging = ProverConfig(continuation_timeout_s=1.0)
    with IsolatedEnv(functools.partial(FaultyVault, str(flag)), processes=2) as env:
        isolated(env, HEALTHY)  # both workers started and ready: the first hanging call reaches their steps
        flag.write_text("hang")
        for _ in range(10):
            result = isolated(env, hanging)
            assert result.report.summary()["accepted"] == 0
            assert sum(g.verify_stats.failures.get("timeout", 0) for g in result.report.groups if g.verify_stats)
            assert children() <= 2
        killed = env.stats()["killed"]
        assert killed >= 2 and blocked_threads() == 0 and threading.active_count() <= threads
        flag.unlink()
        after = _as_json(isolated(env, HEALTHY))
        assert env.stats()["killed"] == killed  # nothing hangs any more
    fresh = subprocess.run(
        [sys.executable, "-c", f"import json; from tests.test_isolate import healthy_result; "
         f"print(json.dumps(healthy_result({str(flag)!r})))"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert after == json.loads(fresh.stdout.strip().splitlines()[-1])
    assert after["summary"]["accepted"] >= 1
