"""Rollout replicas awake, with the actor's current weights, while verification runs.

In verl's v1 sync and colocate-async trainers the replicas sleep from the end of sampling
(``on_sample_end``: [abort,] sleep) until the end of the step (``on_step_end``: update weights
[, resume generation]), so they are asleep at the advantage step. :func:`awake_replicas` does what
those hooks do, through the same ``CheckpointEngineManager`` (``trainer.checkpoint_manager``)::

    enter: update_weights(global_steps)    wakes every replica and loads the actor's weights
           resume_generation_replicas()    colocate-async only: its replicas were aborted/paused
    exit:  abort_replicas()                colocate-async only, as its on_sample_end
           sleep_replicas()                frees weights and KV cache for the actor update

At the advantage step the actor still holds the weights the batch was sampled with (the actor update
comes after it), so the continuations run on the rollout policy. The exit runs even if verification
raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def awake_replicas(
    checkpoint_manager: Any, global_steps: int | None, *, resume_generation: bool = False
) -> Iterator[None]:
    """Wake the replicas with the actor's weights for the ``with`` block, then sleep them again."""
    checkpoint_manager.update_weights(global_steps)
    try:
        if resume_generation:
            checkpoint_manager.resume_generation_replicas()
        yield
    finally:
        if resume_generation:
            checkpoint_manager.abort_replicas()
        checkpoint_manager.sleep_replicas()
