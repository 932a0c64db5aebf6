"""``AgentInstanceEnv``: the user's OpenRLHF agent instance class as a prover-core ``RestorableEnv``.

State ``s_t`` of a recorded episode is re-created by deterministic replay: a fresh instance is reset
with the recorded spec (``states = {"observation": prompt, "label": label, **extra}``) and stepped
with the recorded actions ``0..t-1``, exactly as ``MultiTurnAgentExecutor`` steps it (``states`` holds
``observation_text``, ``action_text``, ``label`` and ``sampling_params``). Every observation is
checked against the record; a difference raises :class:`~prover_core.ReplayMismatchError` rather than
verifying from a state that is not the recorded one. An instance with randomness should take it from
the reset spec and may define ``reseed(seed)`` for the randomness after the restored state.

A continuation's outcome is the episode's total reward (as OpenRLHF sums it), which must be 0 or 1.
The episode's ``Step.info["text"]`` is the whole conversation so far: the prompt a policy generates from.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Mapping
from typing import Any

from prover_core.hosts import ContinuationError, ProverError, ReplayMismatchError, RestoreError, Step, Trajectory
from prover_openrlhf.records import scalar


class AgentEpisode:
    """A live episode over one agent instance (an ``Episode`` with an ``async`` ``step``)."""

    def __init__(self, instance: Any, label: Any, text: str, last: Step, sampling_params: Any = None) -> None:
        self.instance = instance
        self.label = label
        self.text = text
        self.last = last
        self.sampling_params = sampling_params
        self.total_reward = 0.0

    async def step(self, action: Any) -> Step:
        states = {
            "observation_text": self.text,
            "action_text": action,
            "label": self.label,
            "sampling_params": self.sampling_params,
        }
        result = await self.instance.step(states)
        self.total_reward += scalar(result["rewards"])
        feedback = result["environment_feedback"]
        done = bool(result["done"])
        self.text = self.text + action + feedback
        success = False
        if done:
            if self.total_reward not in (0.0, 1.0):
                raise ContinuationError(
                    f"episode ended with total reward {self.total_reward!r}; ProVer needs a binary reward"
                )
            success = self.total_reward == 1.0
        self.last = Step(observation=feedback, done=done, success=success, info={"text": self.text})
        return self.last


class AgentInstanceEnv:
    """Restores recorded episodes of ``agent_instance_cls`` by replay (see the module doc)."""

    def __init__(
        self,
        agent_instance_cls: Callable[[], Any],
        observation_equal: Callable[[Any, Any], bool] = operator.eq,
        sampling_params: Any = None,
    ) -> None:
        self.agent_instance_cls = agent_instance_cls
        self.observation_equal = observation_equal
        self.sampling_params = sampling_params

    def _check(self, trajectory: Trajectory, t: int, got: Any) -> None:
        expected = trajectory.turns[t].observation
        if not self.observation_equal(expected, got):
            raise ReplayMismatchError(trajectory.id, t, expected, got)

    async def restore(self, trajectory: Trajectory, turn: int, seed: int) -> AgentEpisode:
        if not 0 <= turn < trajectory.num_turns:
            raise RestoreError(
                f"cannot restore trajectory {trajectory.id!r} before turn {turn}: "
                f"it has turns 0..{trajectory.num_turns - 1}"
            )
        spec: Mapping[str, Any] = trajectory.reset
        if "prompt" not in spec:
            raise RestoreError(f"trajectory {trajectory.id!r} has no 'prompt' in its reset spec")
        try:
            instance = self.agent_instance_cls()
            label = spec.get("label")
            result = await instance.reset({"observation": spec["prompt"], "label": label, **spec.get("extra", {})})
            observation = result["observation"]
            self._check(trajectory, 0, observation)
            episode = AgentEpisode(
                instance,
                label,
                observation,
                Step(observation=observation, info={"text": observation}),
                self.sampling_params,
            )
            for t in range(turn):
                step = await episode.step(trajectory.turns[t].action)
                if step.done:
                    raise RestoreError(f"replay of trajectory {trajectory.id!r} ended at turn {t}, before turn {turn}")
                self._check(trajectory, t + 1, step.observation)
            reseed = getattr(instance, "reseed", None)
            if reseed is not None:
                done = reseed(seed)
                if inspect.isawaitable(done):
                    await done
        except ProverError:
            raise
        except Exception as exc:
            raise RestoreError(
                f"agent instance raised while restoring trajectory {trajectory.id!r} to turn {turn}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return episode
