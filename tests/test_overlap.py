"""Verification's latency in rounds of policy calls, and the overlap schedule of curtailment.

A batching policy (:class:`~prover_core.batching.Batcher`, as TRL's ``TrainerPolicy`` uses it) makes one call per
round of lockstep continuations; its call count is the latency a GPU sees. The corridor below has a fixed
horizon, so every continuation's length is known by hand: from turn ``b`` of a ``T``-turn corridor it takes
``T - b`` turns. Each action is drawn from the continuation's own seeded rng, so outcomes do not depend on
batching and every schedule decides alike.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from prover_core import (
    ChoiceJudge,
    Outcome,
    ProverConfig,
    ReplayEnv,
    Segment,
    SnapshotEnv,
    Step,
    compute_bonus,
)
from prover_core.batching import Batcher
from prover_core.clock import Meter, PolicyClock
from prover_core.continuations import env_continuer, hook_continuer, metered
from prover_core.curtail import settled
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.demo.run import rollout_batch
from prover_core.protocols import PolicyContext
from prover_core.verify import verify_segment_detailed
from tests.conftest import make_trajectory

T = 6  # corridor length


class Corridor:
    """``T`` turns, observation ``s<t>``; success iff the last action is ``win``."""

    def __init__(self) -> None:
        self.t = 0

    def reset(self, spec: Mapping[str, Any]) -> Step:
        self.t = 0
        return Step(observation="s0")

    def step(self, action: Any) -> Step:
        self.t += 1
        if self.t == T:
            return Step(observation="end", done=True, success=action == "win")
        return Step(observation=f"s{self.t}")

    def reseed(self, seed: int) -> None:
        """Deterministic."""


class BatchedPolicy:
    """Wins at the last turn with probability ``p[boundary]``, from the continuation's own rng; batched calls."""

    def __init__(self, p: Mapping[int, float]) -> None:
        self.p = p
        self.batcher: Batcher[PolicyContext, str] = Batcher(self._answer)

    def _answer(self, contexts: list[PolicyContext]) -> list[str]:
        return ["win" if c.rng.random() < self.p[c.boundary or 0] else "go" for c in contexts]

    async def act(self, context: PolicyContext) -> str:
        return await self.batcher.submit(context)


def verify(p: Mapping[int, float], config: ProverConfig, segment: tuple[int, int] = (1, 2)):  # type: ignore[no-untyped-def]
    """Verify ``segment`` of a successful corridor run; the verification, its stats and the policy."""
    trajectory = make_trajectory("a", "g", True, ["go"] * (T - 1) + ["win"])
    policy = BatchedPolicy(p)
    continuer = env_continuer(ReplayEnv(Corridor), policy, 100)
    seg = Segment(trajectory_id="a", start=segment[0], end=segment[1])
    ver, stats = asyncio.run(verify_segment_detailed(trajectory, seg, continuer, config.stages.verify))
    return ver, stats, policy


def curtailed(mode: str, **update: Any) -> ProverConfig:
    return ProverConfig(k=4, curtail=True, curtail_mode=mode, **update)  # type: ignore[arg-type]


def test_a_hopeful_post_boundary_overlaps_the_pre_boundary_in_one_round() -> None:
    """Segment [1, 2]: post from 3 takes 3 turns, pre from 1 takes 5; together they end at round 5, the longest
    continuation; waiting for the post boundary first ends at 3 + 5 = 8."""
    p = {1: 0.5, 3: 1.0}
    overlap, o_stats, o_policy = verify(p, curtailed("overlap"))
    wait, w_stats, w_policy = verify(p, curtailed("wait"))
    full, f_stats, f_policy = verify(p, ProverConfig(k=4, curtail=False))
    assert overlap == wait == full and overlap.post_successes == 4  # the same outcomes, whatever the schedule
    assert (o_stats.policy_rounds, w_stats.policy_rounds, f_stats.policy_rounds) == (5, 8, 5)
    assert (o_policy.batcher.calls, w_policy.batcher.calls, f_policy.batcher.calls) == (5, 8, 5)
    assert (o_stats.rounds, w_stats.rounds, f_stats.rounds) == (1, 2, 1)
    assert overlap.policy_turns == 4 * 3 + 4 * 5 == o_policy.batcher.rows and o_stats.cancelled == 0


def test_a_hopeless_post_boundary_stops_the_pre_continuations_it_started() -> None:
    """Post 0/4 is known when the post continuations end, at round 3; pre has taken 3 turns each by then: 4 stopped
    continuations, their 12 turns counted in policy_turns, and no further call."""
    p = {1: 0.5, 3: 0.0}
    ver, stats, policy = verify(p, curtailed("overlap"))
    assert ver.curtailed and not ver.accepted and (ver.pre_count, ver.post_successes, ver.post_count) == (0, 0, 4)
    assert (stats.stop, stats.spent, stats.cancelled, stats.policy_rounds) == ("curtailed", 8, 4, 3)
    assert ver.policy_turns == 4 * 3 + 4 * 3 == policy.batcher.rows and policy.batcher.calls == 3
    assert "the 4 pre continuations were stopped after 12 policy turns" in ver.reason
    wait, w_stats, w_policy = verify(p, curtailed("wait"))
    assert (w_stats.spent, w_stats.cancelled, wait.policy_turns, w_policy.batcher.calls) == (4, 0, 12, 3)
    full, _, _ = verify(p, ProverConfig(k=4, curtail=False))
    assert full.policy_turns == 4 * 3 + 4 * 5 and not full.accepted


def test_a_drop_runs_the_pre_boundary_first_and_stops_post() -> None:
    """Negative credit: pre 0/4 settles it (no drop possible); post, from 3, took its 3 turns as pre took 5."""
    trajectory = make_trajectory("a", "g", False, ["go"] * T)
    policy = BatchedPolicy({1: 0.0, 3: 1.0})
    continuer = env_continuer(ReplayEnv(Corridor), policy, 100)
    seg = Segment(trajectory_id="a", start=1, end=2)
    ver, stats = asyncio.run(
        verify_segment_detailed(trajectory, seg, continuer, curtailed("overlap").stages.verify, None, "drop")
    )
    assert ver.curtailed and (ver.pre_successes, ver.pre_count, ver.post_count) == (0, 4, 0)
    assert (stats.cancelled, ver.policy_turns, policy.batcher.calls) == (4, 4 * 5 + 4 * 3, 5)


class Hook:
    """An async continuation hook (its turns run elsewhere): records the boundary of every call in order."""

    def __init__(self, p: Mapping[int, float]) -> None:
        self.p, self.calls = p, []  # type: ignore[var-annotated]

    async def __call__(self, trajectory, turn, seed):  # type: ignore[no-untyped-def]
        self.calls.append(turn)
        await asyncio.sleep(0)
        return Outcome(success=bool(np.random.default_rng(seed).random() < self.p[turn]), turns=T - turn)


def test_a_hook_cannot_be_stopped_so_its_second_boundary_waits() -> None:
    """Overlap needs continuations it can stop; a continue_from hook's pre boundary starts after post has ended."""
    trajectory = make_trajectory("a", "g", True, ["go"] * (T - 1) + ["win"])
    hook = Hook({1: 0.5, 3: 1.0})
    seg = Segment(trajectory_id="a", start=1, end=2)
    _, stats = asyncio.run(
        verify_segment_detailed(trajectory, seg, hook_continuer(hook), curtailed("overlap").stages.verify)
    )
    assert hook.calls == [3] * 4 + [1] * 4 and stats.rounds == 2 and not metered(hook_continuer(hook))
    assert stats.policy_rounds == 3 + 5  # the clock follows a hook's turns when it ends (Outcome.turns)
    assert metered(env_continuer(ReplayEnv(Corridor), BatchedPolicy({}), 10))


def test_settled_by_hand() -> None:
    """Under Delta > 0 the pre boundary is moot only once every post continuation has ended and none succeeded."""
    rule = ProverConfig().stages.verify.rule
    lose, win = Outcome(success=False), Outcome(success=True)
    assert settled([lose] * 4, 0, 4, rule, 0) and not settled([lose] * 3, 1, 4, rule, 0)
    assert not settled([win, lose, lose, lose], 0, 4, rule, 0)
    assert settled([RuntimeError("x")], 3, 4, rule, 0)  # a failure: the first boundary is incomplete whatever follows
    # one failure allowed (min_finished 3 of 4): it is not settled while a pending one could still win
    assert not settled([RuntimeError("x")], 3, 4, rule, 1) and settled(
        [RuntimeError("x"), lose, lose, lose], 0, 4, rule, 1
    )


def test_the_clock_keeps_its_furthest_round_across_threads() -> None:
    clock = PolicyClock()
    meters = [Meter(clock, start=s) for s in (0, 2, 5)]

    def walk(meter: Meter) -> None:
        for _ in range(100):
            meter.tick()

    threads = [threading.Thread(target=walk, args=(m,)) for m in meters]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    meters[0].finish(3)  # an Outcome's count never lowers what the meter saw
    assert clock.now == 105 and meters[0].turns == 100


class SlowSyncPolicy:
    """A blocking policy (run in threads under a time limit): counts its calls, 20 ms each."""

    def __init__(self, p: Mapping[int, float]) -> None:
        self.p, self.calls, self.lock = p, 0, threading.Lock()

    def act(self, context: PolicyContext) -> str:
        time.sleep(0.02)
        with self.lock:
            self.calls += 1
        return "win" if context.rng.random() < self.p[context.boundary or 0] else "go"


def test_a_continuation_in_a_thread_stops_at_its_next_turn_when_cancelled() -> None:
    """Threaded continuations (continuation_timeout_s) cannot be cancelled; their meter tells them to stop."""
    trajectory = make_trajectory("a", "g", True, ["go"] * (T - 1) + ["win"])
    policy = SlowSyncPolicy({0: 0.5, 4: 0.0})
    config = curtailed("overlap", continuation_timeout_s=30.0)
    continuer = env_continuer(ReplayEnv(Corridor), policy, 100, threaded=True)
    seg = Segment(trajectory_id="a", start=0, end=3)  # post from 4: 2 turns; pre from 0: 6 turns
    ver, stats = asyncio.run(verify_segment_detailed(trajectory, seg, continuer, config.stages.verify))
    time.sleep(0.3)  # long enough for a pre continuation that did not stop to finish its 6 turns
    assert ver.curtailed and stats.spent == 4 + stats.cancelled and stats.cancelled == 4
    assert policy.calls == ver.policy_turns < 4 * 2 + 4 * 6  # every policy call counted; the stopped ones stopped


@pytest.mark.parametrize("seed", range(3))
def test_every_schedule_decides_alike_on_the_vault_with_a_batching_policy(seed: int) -> None:
    """The demo's vault with a batched policy, ChoiceJudge: statuses and advantages equal across the schedules;
    overlap in as few rounds as running everything, waiting in more; waiting spends the fewest turns."""
    mdp = VaultMDP()
    batch = rollout_batch(mdp, 12, 8, seed)
    base = vault_policy()

    class Batched:
        def __init__(self) -> None:
            self.batcher: Batcher[PolicyContext, Any] = Batcher(lambda cs: [base.act(c) for c in cs])

        async def act(self, context: PolicyContext) -> Any:
            return await self.batcher.submit(context)

    out, calls = {}, {}
    for mode in ("off", "overlap", "wait"):
        config = ProverConfig(seed=seed, curtail=mode != "off", curtail_mode="wait" if mode == "wait" else "overlap")
        policy = Batched()
        out[mode] = compute_bonus(batch, judge=ChoiceJudge(), env=SnapshotEnv(lambda: MDPEnv(mdp)), policy=policy,
                                  config=config)  # fmt: skip
        calls[mode] = policy.batcher.calls
    metrics = {mode: r.report.metrics(prefix="") for mode, r in out.items()}
    for mode in ("overlap", "wait"):
        assert [g.status for g in out[mode].report.groups] == [g.status for g in out["off"].report.groups]
        for tid in out["off"].trajectories:
            np.testing.assert_array_equal(out[mode].turn_advantages(tid), out["off"].turn_advantages(tid))
    rounds = {mode: m["verify_policy_rounds"] for mode, m in metrics.items()}
    assert rounds == calls  # the clock counts the batching policy's calls
    assert rounds["overlap"] == rounds["off"] <= mdp.horizon < rounds["wait"]
    assert metrics["off"]["rollout_policy_rounds"] == max(t.num_turns for t in batch)
    assert metrics["wait"]["policy_turns"] <= metrics["overlap"]["policy_turns"] <= metrics["off"]["policy_turns"]
