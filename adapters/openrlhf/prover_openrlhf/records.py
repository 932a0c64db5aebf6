"""What the recording executor stores for every episode, and where it stores it.

The rollout runs in OpenRLHF's vLLM actors and the advantages are computed in the trainer actor, and
an ``Experience`` carries only tokens, masks and numeric metrics from one to the other. So the
recorder puts an :class:`EpisodeRecord` (the reset spec and each turn's observation and action text)
into a :class:`RecordStore` under :func:`record_key` of the episode's token sequence, and the
experience maker takes it back by the key of the row's ``sequences``: no id travels in the batch,
and identical token sequences have identical records.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict, deque
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

STORE_ACTOR_NAME = "prover_openrlhf_records"
DEFAULT_MAX_RECORDS = 100_000


class EpisodeRecord(BaseModel):
    """One agent episode as the restorable environment needs it.

    ``reset`` re-creates the episode: ``{"prompt": ..., "label": ..., "extra": {...}}`` where
    ``extra`` is what the agent instance reported under ``prover_reset`` in its reset result.
    ``observations[t]`` is what the agent saw before turn ``t`` (the reset observation, then each
    step's ``environment_feedback``), ``actions[t]`` the action text of turn ``t``, and
    ``action_ranges[t]`` its token range in the full sequence (as OpenRLHF's executor reports it).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reset: dict[str, Any]
    observations: list[str]
    actions: list[str]
    action_ranges: list[tuple[int, int]] = Field(default_factory=list)
    rewards: list[float] = Field(default_factory=list)
    done: bool = False

    @model_validator(mode="after")
    def _aligned(self) -> EpisodeRecord:
        if len(self.observations) != len(self.actions):
            raise ValueError(f"{len(self.observations)} observations for {len(self.actions)} actions")
        if self.action_ranges and len(self.action_ranges) != len(self.actions):
            raise ValueError(f"{len(self.action_ranges)} action ranges for {len(self.actions)} actions")
        return self


def scalar(value: Any) -> float:
    """A Python float from a number or a one-element tensor (OpenRLHF's ``rewards``)."""
    return float(value.item() if hasattr(value, "item") else value)


def record_key(tokens: Sequence[int] | Any) -> str:
    """SHA-256 of the token ids (as int64): the key of an episode's record.

    Accepts a list of ints, a numpy array or a (CPU) torch tensor.
    """
    if hasattr(tokens, "detach"):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens, dtype=np.int64).reshape(-1)
    return hashlib.sha256(arr.tobytes()).hexdigest()


class RecordStore(Protocol):
    """Where records wait between the rollout and the advantage step.

    ``put`` may return an awaitable (the recorder awaits it before returning the episode, so a record
    is always stored before its experience reaches the trainer); ``take`` removes and returns one
    record per key (``None`` where there is none).
    """

    def put(self, key: str, record: Mapping[str, Any]) -> Awaitable[Any] | None: ...

    def take(self, keys: Sequence[str]) -> list[dict[str, Any] | None]: ...


class LocalRecordStore:
    """An in-process store (one process runs both rollout and advantages: tests, single-process runs).

    Holds at most ``max_records`` records; the oldest keys are dropped first (records of episodes
    that never reach the advantage step, e.g. evaluation or filtered groups, must not pile up).
    """

    def __init__(self, max_records: int = DEFAULT_MAX_RECORDS) -> None:
        self.max_records = max_records
        self._items: OrderedDict[str, deque[dict[str, Any]]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        with self._lock:
            self._items.setdefault(key, deque()).append(dict(record))
            self._items.move_to_end(key)
            self._count += 1
            while self._count > self.max_records and self._items:
                _, dropped = self._items.popitem(last=False)
                self._count -= len(dropped)

    def take(self, keys: Sequence[str]) -> list[dict[str, Any] | None]:
        out: list[dict[str, Any] | None] = []
        with self._lock:
            for key in keys:
                queue = self._items.get(key)
                if not queue:
                    out.append(None)
                    continue
                out.append(queue.popleft())
                self._count -= 1
                if not queue:
                    del self._items[key]
        return out

    def __len__(self) -> int:
        return self._count


class RayRecordStore:
    """A store shared by every process of a Ray job: a named actor holding a :class:`LocalRecordStore`.

    The actor is created on first use (``get_if_exists``); the launcher creates it in the driver so
    that it lives as long as the job. ``put`` returns the actor call's ``ObjectRef`` (awaitable).
    """

    def __init__(self, name: str = STORE_ACTOR_NAME, max_records: int = DEFAULT_MAX_RECORDS) -> None:
        self.name = name
        self.max_records = max_records
        self._actor: Any = None

    @property
    def actor(self) -> Any:
        if self._actor is None:
            import ray

            actor_cls = ray.remote(num_cpus=0)(LocalRecordStore)
            self._actor = actor_cls.options(name=self.name, get_if_exists=True).remote(self.max_records)
        return self._actor

    def put(self, key: str, record: Mapping[str, Any]) -> Any:
        return self.actor.put.remote(key, dict(record))

    def take(self, keys: Sequence[str]) -> list[dict[str, Any] | None]:
        import ray

        result: list[dict[str, Any] | None] = ray.get(self.actor.take.remote(list(keys)))
        return result

    def __getstate__(self) -> dict[str, Any]:  # the actor handle is looked up again after pickling
        return {"name": self.name, "max_records": self.max_records, "_actor": None}
