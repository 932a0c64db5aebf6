"""The replica server stand-in of ``test_verl_v1_trainer.py``, in a module of its own that imports neither verl
nor torch: Ray starts each replica actor in a fresh worker process that imports the module defining the
actor's class, and importing the test module there (verl, torch, TransferQueue) took tens of seconds per
replica on a 2-core machine, to serve one-token answers.

The answers are verl's ``TokenOutput``: built where they are received (the driver, or whichever verl
process called ``generate``), through :class:`Answer`'s pickling, so the caller gets verl's own type.
"""

from __future__ import annotations

import asyncio
import string
from typing import Any

VOCAB = string.printable
"""The test's character vocabulary: character ``c`` is token ``VOCAB.index(c) + 2`` (0 and 1: UNK and PAD)."""


def token_output(fields: dict[str, Any]) -> Any:
    """verl's ``TokenOutput(**fields)`` (imports verl: called where the answer is unpickled)."""
    from verl.workers.rollout.replica import TokenOutput

    return TokenOutput(**fields)


class Answer:
    """A ``TokenOutput`` to be: pickles as a call of :func:`token_output` with its fields."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        return token_output, (self.fields,)


class ReplicaServer:
    """A replica server: ``generate`` with the signature of verl's vLLM server (token ids in and out).

    Asleep, it queues requests until woken, as vLLM 0.29 does. Left out: real sampling (a scripted
    one-token "model": without a seed it plays the script's next character, with a seed ``s`` it plays
    ``r`` unless ``s % 3 == 0``), EOS, ``max_model_len`` clamping (verl's server code, not exercised here),
    batching.
    """

    def __init__(self, name: str) -> None:
        self.name, self.awake, self.mode = name, True, "ok"
        self.events: list[str] = []
        self.requests: list[tuple[list[int], dict[str, Any]]] = []

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        priority: int = 0,
    ) -> Answer:
        self.requests.append((list(prompt_ids), dict(sampling_params)))
        self.events.append("generate")
        while not self.awake:  # vLLM 0.29 pauses its scheduler while asleep: the request waits for wake_up
            await asyncio.sleep(0.05)
        if self.mode == "raise":
            raise RuntimeError("CUDA error: out of memory")
        if self.mode == "slow":
            await asyncio.sleep(30)
        if self.mode == "abort":
            return Answer(token_ids=[], stop_reason="aborted", extra_fields={"global_steps": 0})
        text = "".join(VOCAB[i - 2] for i in prompt_ids)
        seed = sampling_params.get("seed")
        if seed is None:
            script = text.split("|")[0]
            char = script[text.count("\n") - 1]
        else:
            char = "x" if seed % 3 == 0 else "r"
        return Answer(
            token_ids=[VOCAB.index(char) + 2],
            log_probs=[-0.5],
            stop_reason="completed",
            extra_fields={"global_steps": 0},
        )

    def set(self, awake: bool | None = None, mode: str | None = None) -> None:
        self.awake = self.awake if awake is None else awake
        self.mode = self.mode if mode is None else mode

    def load_weights(self, global_steps: int) -> None:
        self.awake = True
        self.events.append(f"load_weights:{global_steps}")

    def sleep(self) -> None:
        self.awake = False
        self.events.append("sleep")

    def log(self, event: str) -> None:
        self.events.append(event)

    def take(self) -> tuple[list[str], list[tuple[list[int], dict[str, Any]]]]:
        out = (self.events, self.requests)
        self.events, self.requests = [], []
        return out
