"""What stands in for the GPU in the OpenRLHF engine tests: a tiny deterministic "model" behind the fake vLLM.

OpenRLHF's own ``RolloutRayActor`` / ``create_vllm_engines`` / ``SamplesGenerator`` run unchanged on top of
``tests/adapters/fake_vllm`` (see its docstring); the network is :data:`key_door_model`, which plays the
KeyDoor task with a character-level vocabulary (id ``= string.printable.index(c) + 2``, as
``tests/adapters/test_openrlhf.py:char_tokenizer``) and logs every request it serves (token ids and seed)
to a named Ray actor, so that a test can check exactly what reached the engine.

The model's policy:

* ``"You hold the key."`` in the context: ``open door`` (the episode is won);
* rollout requests (no seed): the first action of the ``i``-th episode an engine serves is
  ``take key`` when ``i % 4 == 1``, else ``look``; after ``look`` it is ``open door`` (locked: lost).
  A group of 4 samples on one engine therefore holds exactly one success;
* continuation requests (a seed): ``take key`` when the seed is even, else ``open door``.
"""

from __future__ import annotations

import os
import string
import sys
from collections import Counter
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_VLLM = os.path.join(HERE, "fake_vllm")
REQUEST_LOG = "openrlhf_stand_in_requests"
PROMPTS = ["Find the key, then open the door.\n", "Open the door; the key is near.\n"]
CHARS = string.printable
HOLD = "You hold the key.\n"
TAKE_KEY_IDS = (31, 12, 22, 16, 96, 22, 16, 36)  # "take key" by hand: t a k e ' ' k e y (printable index + 2)
Request = tuple[tuple[int, ...], int, int]


def char_ids(text: str) -> list[int]:
    return [CHARS.index(c) + 2 for c in text]


def char_text(ids: list[int]) -> str:
    return "".join(CHARS[i - 2] if 2 <= i < len(CHARS) + 2 else "?" for i in ids)


def char_tokenizer() -> Any:
    """The Hugging Face tokenizer of that vocabulary (built locally)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[PAD]": 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


class KeyDoor(AgentInstanceBase):
    """'take key' then 'open door' wins; opening without the key loses; 4 turns at most."""

    def __init__(self) -> None:
        self.has_key = False
        self.turns = 0

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {"observation": states["observation"]}

    async def step(self, state_dict: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        action = state_dict["action_text"].strip()
        self.turns += 1
        reward, done = 0.0, False
        if action == "take key":
            self.has_key, feedback = True, "You hold the key.\n"
        elif action == "open door":
            done = True
            reward, feedback = (1.0, "The door opens.\n") if self.has_key else (0.0, "Locked.\n")
        else:
            feedback = "Nothing happens.\n"
        done = done or self.turns >= 4
        return {
            "rewards": torch.tensor(reward),
            "scores": torch.tensor(reward),
            "environment_feedback": feedback,
            "done": done,
        }


class RequestLog:
    """A named Ray actor: every request the model served, in order."""

    def __init__(self) -> None:
        self.requests: list[tuple[list[int], int | None, int | None]] = []

    def add(self, ids: list[int], seed: int | None, max_tokens: int | None) -> None:
        self.requests.append((ids, seed, max_tokens))

    def take(self) -> list[tuple[list[int], int | None, int | None]]:
        out, self.requests = self.requests, []
        return out


class KeyDoorModel:
    """The "network" (see the module docstring); ``decode`` turns ids back into text as vLLM would."""

    def __init__(self) -> None:
        self.episodes = 0
        self.requests: list[tuple[list[int], int | None, int | None]] = []

    async def __call__(self, ids: list[int], params: Any) -> list[int]:
        import ray

        self.requests.append((list(ids), params.seed, params.max_tokens))
        if ray.is_initialized():  # inside an engine actor: tell the test's log actor
            try:
                log = ray.get_actor(REQUEST_LOG)
            except ValueError:
                log = None
            if log is not None:
                await log.add.remote(list(ids), params.seed, params.max_tokens)
        text = char_text(ids)
        if "You hold the key." in text:
            action = "open door"
        elif params.seed is None:
            if text in PROMPTS:
                action = "take key" if self.episodes % 4 == 1 else "look"
                self.episodes += 1
            else:
                action = "open door"
        else:
            action = "take key" if params.seed % 2 == 0 else "open door"
        return char_ids(action)

    @staticmethod
    def decode(ids: list[int]) -> str:
        return char_text(ids)


key_door_model = KeyDoorModel()


def expected_requests(prompt: str, trajectory: Any, max_len: int, seed: int = 0) -> Counter[Request]:
    """By hand: every (context ids, engine seed, max_tokens) the verification of ``prompt``'s group must send.

    The success is ``take key, open door``; the failures start with ``look``, so the segment is turn 0,
    the pre boundary turn 0 and the post boundary turn 1. Continuation seed ``s``: pre action 0 from
    ``prompt`` with engine seed ``a0 = action_seed(s, 0)`` (even: ``take key``, then action 1 from
    ``prompt + take key + HOLD`` with ``action_seed(s, 1)``; odd: ``open door``, lost); post action 0 from
    ``prompt + take key + HOLD`` with ``a0`` (paired seeds). ``max_tokens = max_len - len(context)``.
    """
    from prover_core import ProverConfig
    from prover_core.verify import continuation_seeds
    from prover_engine.policy import action_seed

    pre = tuple(char_ids(prompt))
    post = (*pre, *TAKE_KEY_IDS, *char_ids(HOLD))
    out: Counter[Request] = Counter()
    pre_seeds, post_seeds = continuation_seeds(ProverConfig(k=8, seed=seed).stages.verify, trajectory)
    assert pre_seeds == post_seeds
    for s in pre_seeds:
        a0 = action_seed(s, 0)
        out[(pre, a0, max_len - len(pre))] += 1
        out[(post, a0, max_len - len(post))] += 1
        if a0 % 2 == 0:
            out[(post, action_seed(s, 1), max_len - len(post))] += 1
    return out


def pre_successes(trajectory: Any, seed: int = 0) -> int:
    """How many of the K pre continuations take the key (even first-action seed), by the same seeds."""
    from prover_core import ProverConfig
    from prover_core.verify import continuation_seeds
    from prover_engine.policy import action_seed

    return sum(
        action_seed(s, 0) % 2 == 0
        for s in continuation_seeds(ProverConfig(k=8, seed=seed).stages.verify, trajectory)[0]
    )


def worker_setup() -> None:
    """Ray's ``worker_process_setup_hook`` for these tests: the fake vLLM, flash-attn's Python files, ``install()``."""
    if FAKE_VLLM not in sys.path:
        sys.path.insert(0, FAKE_VLLM)
    from prover_openrlhf.cpu import _shell_package

    _shell_package("flash_attn")
    from prover_openrlhf.install import install

    install()
