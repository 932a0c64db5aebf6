"""The restorers close every environment they make, once, whatever ends its continuation, and never one they did not
make; a ``close()`` that raises is counted and logged once, and the outcomes stand."""

from __future__ import annotations

import asyncio
import copy
import gc
import logging
import pickle
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from prover_core import ChoiceJudge, ProverConfig, ReplayEnv, SnapshotEnv, compute_bonus
from prover_core._aio import blocked_threads
from prover_core.bonus import BonusResult
from prover_core.continuations import env_continuer
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.demo.run import rollout_batch
from prover_core.errors import MissingReseedError, RestoreError
from prover_core.protocols import Closable, PolicyContext, Step, policy_rng
from prover_core.restore import LiveEpisode

MDP = VaultMDP()
BATCH = rollout_batch(MDP, groups=4, group_size=8, seed=0)
TRAJ = max(BATCH, key=lambda t: t.num_turns)
CONFIG = ProverConfig(k=4)


class Ledger:
    """Every environment made (``make``, and copies through ``copy``) and how often each was closed."""

    def __init__(self, close_error: Exception | None = None, gate: threading.Event | None = None) -> None:
        self.made: list[Tracked] = []
        self.closed: Counter[int] = Counter()
        self.close_error, self.gate = close_error, gate
        self.lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> Ledger:
        return self  # a copied environment reports to the same ledger

    def __reduce__(self) -> tuple[type[Ledger], tuple[()]]:
        return (Ledger, ())  # an unpickled environment reports to a ledger of its own

    def make(self) -> Tracked:
        return Tracked(self)

    def copy(self, env: Any) -> Tracked:
        twin: Tracked = copy.deepcopy(env)
        with self.lock:
            self.made.append(twin)
        return twin

    def still_open(self) -> list[Tracked]:
        return [e for e in self.made if self.closed[id(e)] == 0]

    def assert_each_closed_once(self) -> None:
        assert self.made, "no environment was made: the test exercises nothing"
        assert [self.closed[id(e)] for e in self.made] == [1] * len(self.made)
        assert sum(self.closed.values()) == len(self.made)


class Tracked(MDPEnv):
    """The vault environment, reporting its close to the ledger; with a gate, continuation steps wait on it."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(MDP)
        self.ledger, self.continuing = ledger, False
        with ledger.lock:
            ledger.made.append(self)

    def reseed(self, seed: int) -> None:
        super().reseed(seed)
        self.continuing = True  # restored: the steps from here are a continuation's

    def step(self, action: str) -> Step:
        if self.continuing and self.ledger.gate is not None:
            self.ledger.gate.wait(30)
        return super().step(action)

    def close(self) -> None:
        with self.ledger.lock:
            self.ledger.closed[id(self)] += 1
        if self.ledger.close_error is not None:
            raise self.ledger.close_error


def bonus(env: Any, config: ProverConfig = CONFIG, policy: Any = None) -> BonusResult:
    return compute_bonus(BATCH, judge=ChoiceJudge(), env=env, policy=policy or vault_policy(), config=config)


def continuations(result: BonusResult) -> float:
    return result.report.metrics(prefix="")["continuations"]


def test_the_environment_has_an_optional_close_hook() -> None:
    assert isinstance(Tracked(Ledger()), Closable) and not isinstance(MDPEnv(MDP), Closable)


def test_replay_closes_every_environment_of_a_compute_bonus_call_once() -> None:
    ledger = Ledger()
    result = bonus(ReplayEnv(ledger.make))
    assert continuations(result) > 0
    gc.collect()  # the continuations verification stopped early end with their episode
    ledger.assert_each_closed_once()


def test_snapshot_closes_its_copies_and_on_close_its_snapshots_once() -> None:
    ledger = Ledger()
    with SnapshotEnv(ledger.make, copy_env=ledger.copy) as restorer:
        result = bonus(restorer)
        gc.collect()
        assert continuations(result) > 0
        cached = {id(e.env) for e in restorer._snapshots.values()}
        assert cached and {id(e) for e in ledger.still_open()} == cached  # only the cached snapshots are open
    ledger.assert_each_closed_once()


def test_a_snapshot_dropped_from_the_cache_is_closed() -> None:
    ledger = Ledger()
    restorer = SnapshotEnv(ledger.make, copy_env=ledger.copy, max_snapshots=1)
    first = restorer.restore(TRAJ, 1, seed=0)
    second = restorer.restore(TRAJ, 2, seed=0)  # evicts the snapshot of turn 1
    assert ledger.made[1::2] == [first.env, second.env]  # snapshot, copy, snapshot, copy
    assert [ledger.closed[id(e)] for e in ledger.made] == [1, 0, 0, 0]
    restorer.close()
    ledger.assert_each_closed_once()


def test_an_episode_closes_its_environment_when_it_ends_or_its_step_raises() -> None:
    ledger = Ledger()
    restorer = ReplayEnv(ledger.make)
    episode = restorer.restore(TRAJ, TRAJ.num_turns - 1, seed=0)
    step, policy = episode.last, vault_policy()
    while not step.done:
        assert not ledger.closed
        step = episode.step(policy.act(PolicyContext(None, (), step.observation, step.info, 0, policy_rng(0))))
    assert ledger.closed[id(episode.env)] == 1
    broken = restorer.restore(TRAJ, 0, seed=0)
    with pytest.raises(ValueError, match="not admissible"):
        broken.step("no such action")
    assert ledger.closed[id(broken.env)] == 1
    restorer.close()  # nothing left open: nothing closed twice
    ledger.assert_each_closed_once()


def test_an_environment_that_fails_to_restore_is_closed_at_once() -> None:
    class Diverges(Tracked):
        def reset(self, spec: Mapping[str, Any]) -> Step:
            step = super().reset(spec)
            return Step("elsewhere", step.done, step.success, step.info)

    class NoReseed(Tracked):
        def reseed(self, seed: int) -> None:
            raise RuntimeError("no generator")

    ledger = Ledger()
    with pytest.raises(RestoreError, match="diverged at turn 0"):
        ReplayEnv(lambda: Diverges(ledger)).restore(TRAJ, 2, seed=0)
    with pytest.raises(RestoreError, match=r"NoReseed\.reseed"):
        ReplayEnv(lambda: NoReseed(ledger)).restore(TRAJ, 2, seed=0)
    snapshots = SnapshotEnv(lambda: NoReseed(ledger), copy_env=ledger.copy)
    with pytest.raises(RestoreError, match=r"NoReseed\.reseed"):
        snapshots.restore(TRAJ, 2, seed=0)
    assert [ledger.closed[id(e)] for e in ledger.made] == [1, 1, 0, 1]  # the cached snapshot stays open
    snapshots.close()
    ledger.assert_each_closed_once()


def test_a_missing_reseed_refused_closes_the_environment() -> None:
    class Plain(Tracked):
        reseed = None  # type: ignore[assignment]

    ledger = Ledger()
    with pytest.raises(MissingReseedError):
        ReplayEnv(lambda: Plain(ledger), missing_reseed="error").restore(TRAJ, 1, seed=0)
    ledger.assert_each_closed_once()


def test_a_failing_policy_leaves_no_environment_open() -> None:
    class Broken:
        def act(self, context: PolicyContext) -> str:
            raise RuntimeError("CUDA out of memory")

    ledger = Ledger()
    result = bonus(ReplayEnv(ledger.make), policy=Broken())
    assert result.report.metrics(prefix="")["continuations_failed/error"] > 0
    gc.collect()
    ledger.assert_each_closed_once()


def test_continuations_past_their_time_limit_close_their_environment_when_they_end() -> None:
    ledger = Ledger(gate=threading.Event())
    try:
        result = bonus(ReplayEnv(ledger.make), ProverConfig(k=4, continuation_timeout_s=0.05))
        assert result.report.metrics(prefix="")["continuations_failed/timeout"] > 0
        assert ledger.still_open()  # the abandoned ones are still blocked in a step
    finally:
        ledger.gate.set()  # type: ignore[union-attr]
    deadline = time.monotonic() + 30
    while blocked_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    gc.collect()
    ledger.assert_each_closed_once()


def test_a_cancelled_continuation_closes_its_environment_and_close_is_the_backstop() -> None:
    started = asyncio.Event()

    class Slow:
        async def act(self, context: PolicyContext) -> str:
            started.set()
            await asyncio.sleep(30)
            return "never"

    ledger = Ledger()
    restorer = ReplayEnv(ledger.make)

    async def cancel_one() -> None:
        task = asyncio.create_task(env_continuer(restorer, Slow(), 100)(TRAJ, 1, 0))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_one())
    gc.collect()
    ledger.assert_each_closed_once()

    held = restorer.restore(TRAJ, 1, seed=0)  # a continuation whose episode is still referenced
    assert ledger.still_open() == [held.env]
    restorer.close()
    held.close()
    del held
    gc.collect()
    ledger.assert_each_closed_once()


def test_a_raising_close_keeps_the_outcomes_and_is_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    clean = bonus(ReplayEnv(Ledger().make))
    ledger = Ledger(close_error=OSError("the game process is gone"))
    restorer = ReplayEnv(ledger.make)
    with caplog.at_level(logging.WARNING, logger="prover_core"):
        result = bonus(restorer)
        gc.collect()
    assert result.report.groups == clean.report.groups
    assert all(np.array_equal(result.turn_advantages(t.id), clean.turn_advantages(t.id)) for t in BATCH)
    ledger.assert_each_closed_once()
    assert restorer.close_failures == len(ledger.made)
    # the report counts the failures of this call: every environment made, each closed once, each raising
    assert result.report.metrics()["prover/env_close_failures"] == len(ledger.made) > 0
    assert clean.report.metrics()["prover/env_close_failures"] == 0
    warnings = [r.getMessage() for r in caplog.records if "close()" in r.getMessage()]
    assert warnings == [
        "Tracked.close() raised OSError: the game process is gone; the continuation's outcome is kept. "
        "ReplayEnv.close_failures counts these (further ones are not logged)."
    ]


def test_an_environment_the_user_owns_is_never_closed() -> None:
    ledger = Ledger()
    mine = ledger.make()
    episode = LiveEpisode(env=mine, last=mine.reset(TRAJ.reset))
    while not episode.last.done:
        episode.step(episode.last.info["actions"][0])
    episode.close()
    shared = SnapshotEnv(ledger.make, copy_env=lambda env: env)  # a copy_env that shares: the snapshot owns it
    done = shared.restore(TRAJ, TRAJ.num_turns - 1, seed=0)
    while not done.last.done:
        done.step(done.last.info["actions"][0])
    assert not ledger.closed
    shared.close()
    assert ledger.closed == Counter({id(ledger.made[1]): 1}) and ledger.still_open() == [mine]


def test_a_pickled_or_copied_episode_owns_nothing() -> None:
    ledger = Ledger()
    restorer = ReplayEnv(ledger.make)
    episode = restorer.restore(TRAJ, 1, seed=0)
    assert episode.release is not None
    assert pickle.loads(pickle.dumps(episode)).release is None and copy.deepcopy(episode).release is None
    assert pickle.loads(pickle.dumps(restorer)).close_failures == 0
    restorer.close()
    assert ledger.closed[id(episode.env)] == 1


CLOSED_COPIES: list[MDPEnv] = []


class ClosingVault(MDPEnv):
    """The vault, noting each close (an unpickled copy is a new object: its close is noted here too)."""

    def close(self) -> None:
        CLOSED_COPIES.append(self)  # held, so that two closed copies never share an id


def test_a_ray_workers_unpickled_snapshot_copy_is_closed_when_its_continuation_ends() -> None:
    """RayExecutor with snapshots sends each continuation a pickled episode; the worker's unpickled copy is that
    continuation's own environment, closed once it ends (it was never closed). The worker's body runs here, without
    Ray (``_Worker`` is the actor's class)."""
    from prover_core.executors import _Worker

    restorer = ReplayEnv(lambda: ClosingVault(MDP))
    episode = restorer.restore(TRAJ, 2, seed=0)
    snapshot = pickle.dumps(episode)
    worker = _Worker(pickle.dumps((None, vault_policy, None)), max_turns=100)
    CLOSED_COPIES.clear()
    for seed in (5, 6):
        assert worker.run_snapshot(snapshot, TRAJ, 2, seed)[0] == "ok"
    gc.collect()
    assert len(CLOSED_COPIES) == len({id(env) for env in CLOSED_COPIES}) == 2  # each copy once
    assert all(env is not episode.env for env in CLOSED_COPIES) and worker.owned.failures == 0  # not the driver's
    restorer.close()
