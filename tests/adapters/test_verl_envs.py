"""A verl-agent style environment manager restored by replay, end to end through verl's ``compute_advantage``.

``CorridorManager`` is a small real environment behind verl-agent's manager interface
(``reset(kwargs) -> (obs, infos)``, ``step(text_actions) -> (obs, rewards, dones, infos)``, obs a dict
of per-environment lists with ``"text"`` and ``"anchor"``): positions 0..3, start 0, ``"right"``/
``"left"`` move by one unless the move slips (probability 0.3, the manager's own seeded RNG), success
on reaching 3 within 6 steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from tests.hosts import require_host

verl = require_host("verl")

import torch  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

import prover_verl  # noqa: E402
from prover_core import (  # noqa: E402
    PolicyContext,
    ProverConfig,
    ProverRun,
    RandomJudge,
    ReplayEnv,
    ReplayMismatchError,
    RestoreError,
    Trajectory,
    Turn,
)
from prover_verl import EnvManagerEnv, ProverStep, prover_step, turn_runs  # noqa: E402

prover_verl.register()

GOAL, MAX_STEPS, SLIP = 3, 6, 0.3
ACTION_TOKENS, OBS_TOKENS = 2, 1
T = MAX_STEPS * (ACTION_TOKENS + OBS_TOKENS)


class CorridorManager:
    """One corridor environment behind a verl-agent style (batched) manager interface."""

    def __init__(self, spec: Mapping[str, Any], lanes: int = 1) -> None:
        self.rng = np.random.default_rng(spec["seed"])
        self.lanes = lanes
        self.pos, self.steps, self.history = 0, 0, []
        OPEN.add(id(self))

    def _obs(self) -> dict[str, Any]:
        text = f"history: {' '.join(self.history) or '-'}; you are at {self.pos}"
        return {"text": [text] * self.lanes, "image": None, "anchor": [f"pos {self.pos}"] * self.lanes}

    def reset(self, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.pos, self.steps, self.history = int(kwargs.get("start", 0)), 0, []
        return self._obs(), [{"won": False}] * self.lanes

    def step(self, text_actions: list[str]) -> tuple[dict[str, Any], np.ndarray, np.ndarray, list[dict[str, Any]]]:
        action = text_actions[0]
        if self.rng.random() >= SLIP:
            self.pos = min(GOAL, self.pos + 1) if action == "right" else max(0, self.pos - 1)
        self.steps += 1
        self.history.append(action)
        won = self.pos == GOAL
        done = won or self.steps >= MAX_STEPS
        return self._obs(), np.array([float(won)]), np.array([done]), [{"won": won}]

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def close(self) -> None:  # verl-agent's EnvironmentManagerBase.close: self.envs.close()
        OPEN.discard(id(self))


OPEN: set[int] = set()
"""The managers made and not closed yet (``CorridorManager.__init__`` adds itself)."""


class CoinPolicy:
    """The 'current policy': right with probability 0.5, drawn from the continuation's seeded RNG."""

    def act(self, context: PolicyContext) -> str:
        assert context.info["text"].endswith(f"you are at {context.observation.split()[1]}")
        return "right" if context.rng.random() < 0.5 else "left"


def play(spec: dict[str, Any], tid: str, group: str, policy_seed: int) -> Trajectory:
    """Record one episode through the manager, as the rollout would."""
    env = EnvManagerEnv(CorridorManager)
    step = env.reset(spec)
    rng = np.random.default_rng(policy_seed)
    turns = []
    while not step.done:
        action = "right" if rng.random() < 0.5 else "left"
        turns.append(Turn(observation=step.observation, action=action))
        step = env.step(action)
    env.close()
    return Trajectory(id=tid, group_id=group, reset=spec, turns=turns, success=step.success)


def response_mask(n_turns: int) -> list[int]:
    row: list[int] = []
    for t in range(n_turns):
        row += [1] * ACTION_TOKENS + ([0] * OBS_TOKENS if t < n_turns - 1 else [])
    return row + [0] * (T - len(row))


def test_env_manager_env_steps_one_environment() -> None:
    env = EnvManagerEnv(CorridorManager)
    first = env.reset({"seed": 0, "reset_kwargs": {"start": 2}})
    assert first.observation == "pos 2" and not first.done and first.info["text"].endswith("at 2")
    step = env.step("right")
    while not step.done:
        step = env.step("right")
    assert step.observation == "pos 3" and step.success and step.info["won"]


def test_every_manager_made_is_closed_by_the_next_reset_or_the_restorer() -> None:
    """A manager per episode: a second reset closes the first one's, ``close`` the last, and a restorer's
    continuations close theirs when their episodes end (verl-agent managers hold worker processes)."""
    OPEN.clear()
    env = EnvManagerEnv(CorridorManager)
    env.reset({"seed": 0})
    env.reset({"seed": 1})
    assert len(OPEN) == 1
    env.close()
    assert not OPEN and env.manager is None
    trajectory = play({"seed": 5}, "t", "g", policy_seed=9)
    with ReplayEnv(lambda: EnvManagerEnv(CorridorManager)) as restorer:
        episode = restorer.restore(trajectory, 1, seed=1)
        while not episode.step("right").done:
            pass
        assert not OPEN  # the finished continuation's manager is closed
        held = restorer.restore(trajectory, 1, seed=2)
        assert len(OPEN) == 1 and not held.last.done
    assert not OPEN  # the restorer's close() closes what is still open


def test_env_manager_env_needs_exactly_one_environment() -> None:
    env = EnvManagerEnv(lambda spec: CorridorManager(spec, lanes=2))
    with pytest.raises(RestoreError, match="exactly one environment"):
        env.reset({"seed": 0})


def test_replay_through_the_manager_restores_and_checks_the_record() -> None:
    trajectory = play({"seed": 5}, "t", "g", policy_seed=9)
    env = ReplayEnv(lambda: EnvManagerEnv(CorridorManager))
    last = trajectory.num_turns - 1
    episode = env.restore(trajectory, last, seed=1)
    assert episode.last.observation == trajectory.turns[last].observation
    forged = trajectory.model_copy(update={"reset": {"seed": 5, "reset_kwargs": {"start": 1}}})
    with pytest.raises(ReplayMismatchError):
        env.restore(forged, last, seed=1)


def test_prover_over_replayed_manager_episodes_through_compute_advantage() -> None:
    trajectories = [
        play({"seed": 100 * g + j}, f"g{g}-{j}", f"g{g}", policy_seed=7919 * g + j) for g in range(6) for j in range(8)
    ]
    masks = torch.tensor([response_mask(t.num_turns) for t in trajectories], dtype=torch.int64)
    rewards = torch.zeros(masks.shape)
    for i, t in enumerate(trajectories):
        rewards[i, int(masks[i].nonzero().max())] = float(t.success)

    def batch() -> DataProto:
        uids = np.array([t.group_id for t in trajectories], dtype=object)
        tensors = {"token_level_rewards": rewards.clone(), "response_mask": masks.clone()}
        return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids})

    cfg = AlgoConfig(adv_estimator="prover", norm_adv_by_std_in_grpo=False)
    grpo = compute_advantage(batch(), adv_estimator="grpo", norm_adv_by_std_in_grpo=False)
    hook = ProverStep(
        trajectories=trajectories,
        run=ProverRun(RandomJudge(seed=0), ProverConfig(k=8, lam=1.0)),  # the counts below: the seeds at K = 8
        env=ReplayEnv(lambda: EnvManagerEnv(CorridorManager)),
        policy=CoinPolicy(),
    )
    with prover_step(hook):
        adv = compute_advantage(batch(), adv_estimator="prover", config=cfg).batch["advantages"]

    assert hook.result is not None
    report = hook.result.report
    accepted = [g for g in report.groups if g.status == "accepted"]
    assert len(accepted) == 2 and report.count("rejected") == 1, report.summary()  # fixed by the seeds
    assert not report.skips, [g.reason for g in report.skips]

    expected = grpo.batch["advantages"].clone()
    row_of = {t.id: i for i, t in enumerate(trajectories)}
    for record in accepted:
        assert record.proposal is not None and record.verification is not None
        assert record.verification.pre_count == record.verification.post_count == 8
        segment = record.proposal.segment
        i = row_of[segment.trajectory_id]
        runs = turn_runs(masks[i].numpy())
        for turn in range(segment.start, segment.end + 1):
            start, end = runs[turn]
            expected[i, start:end] += record.verification.delta
    assert torch.equal(adv, expected)
