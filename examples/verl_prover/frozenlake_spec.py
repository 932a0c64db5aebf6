"""A ProverSpec for verl runs on gymnasium's slippery FrozenLake (text actions), for examples/verl_prover/run.sh.

Each dataset row's ``extra_info`` holds ``{"seed": int}``; the agent loop ``prover_env`` plays one episode
per session, the trainer ``prover_sync`` restores turns by replay (FrozenLake is deterministic given its
reset seed and actions) and continues them on verl's rollout replicas. Needs prover-envs with gymnasium
(``pip install -e './adapters/envs[gym]'``) beside prover-verl.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prover_core import ChoiceJudge, ProverConfig
from prover_envs.gymnasium import GymEnv, gym_spec
from prover_verl import ProverSpec

ACTIONS = ("left", "down", "right", "up")


class FrozenLakeSpec(ProverSpec):
    max_turns = 20

    def make_env(self) -> GymEnv:
        return GymEnv()

    def reset_spec(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        return gym_spec("FrozenLake-v1", int(sample["extra_info"]["seed"]), is_slippery=True)

    def render_observation(self, observation: Any) -> list[int]:
        text = f"You are on tile {observation} of a 4x4 lake. Move (left/down/right/up):\n"
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def parse_action(self, text: str) -> int:
        words = text.strip().lower().split()
        return ACTIONS.index(words[0]) if words and words[0] in ACTIONS else 0  # anything else: "left"

    def judge(self) -> ChoiceJudge:
        return ChoiceJudge()  # the default; on slippery FrozenLake it declines most groups (docs/environments.md)

    def prover_config(self) -> ProverConfig:
        return ProverConfig(k=4, lam=1.0)  # the defaults
