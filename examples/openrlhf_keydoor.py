"""A worked OpenRLHF agent task with ProVer credit; run by ``examples/openrlhf_prover.sh`` (needs GPUs).

This one file plays two roles:

* ``--train.agent_func_path examples/openrlhf_keydoor.py``: OpenRLHF loads ``AgentExecutor`` from it inside
  every vLLM engine actor. ``KeyDoor`` is a small text game (take the key, then open the door; opening
  it without the key loses; 6 turns at most) with a binary reward; the recording executor stores what
  ProVer needs to restore each episode.
* ``--prover.setup examples.openrlhf_keydoor:make_setup``: the trainer actor calls ``make_setup(maker)``
  once. Continuations run on OpenRLHF's own vLLM engines (``engine_policy``), token-exactly, sampled as
  the rollout samples; the environment restores a state by replaying the recorded actions.
"""

from __future__ import annotations

from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase

from prover_core import ChoiceJudge, ProverConfig
from prover_openrlhf import AgentInstanceEnv, ProverSetup
from prover_openrlhf.engine import engine_policy
from prover_openrlhf.recorder import RecordingAgentExecutor

MAX_TURNS = 6


class KeyDoor(AgentInstanceBase):
    """``take key`` then ``open door`` wins (reward 1); ``open door`` without the key or 6 turns lose (0)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.has_key = False
        self.turns = 0

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {"observation": states["observation"]}

    async def step(self, state_dict: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        action = state_dict["action_text"].strip().lower()
        self.turns += 1
        reward, done = 0.0, False
        if "take key" in action:
            self.has_key, feedback = True, "\nYou hold the key. Next action:"
        elif "open door" in action:
            done = True
            reward, feedback = (1.0, "\nThe door opens.") if self.has_key else (0.0, "\nThe door is locked.")
        else:
            feedback = "\nNothing happens. Next action:"
        done = done or self.turns >= MAX_TURNS
        return {
            "rewards": torch.tensor(reward),
            "scores": torch.tensor(reward),
            "environment_feedback": feedback,
            "done": done,
        }


class AgentExecutor(RecordingAgentExecutor):
    def __init__(self) -> None:
        super().__init__(KeyDoor)


def make_setup(maker: Any) -> ProverSetup:
    """Called once in OpenRLHF's trainer actor with the experience maker."""
    return ProverSetup(
        judge=ChoiceJudge(),  # the default; or an LLMJudge (docs/judges.md)
        env=AgentInstanceEnv(KeyDoor),
        policy=engine_policy(maker),  # OpenRLHF's vLLM engines, found through the launcher's registry
        config=ProverConfig(k=4, lam=1.0, max_continuation_turns=MAX_TURNS),  # k, lam: the defaults
    )
