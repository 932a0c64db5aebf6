"""``RecordingAgentExecutor``: OpenRLHF's multi-turn executor that also records each episode.

Use it as the ``AgentExecutor`` of the file given to ``--train.agent_func_path``::

    from prover_openrlhf.recorder import RecordingAgentExecutor

    class AgentExecutor(RecordingAgentExecutor):
        def __init__(self):
            super().__init__(MyAgentInstance)   # your AgentInstanceBase subclass

The rollout itself is OpenRLHF's ``MultiTurnAgentExecutor.execute``, unchanged. A subclass of the
agent instance class notes what the restorable environment needs: the reset spec (prompt, label and
whatever the instance returns under ``prover_reset`` from ``reset``), the observation before each
turn and each turn's action text. The record is stored (and awaited) before the episode is returned,
under :func:`~prover_openrlhf.records.record_key` of the token sequence OpenRLHF will train on.
"""

from __future__ import annotations

import inspect
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor  # type: ignore[import-untyped]

from prover_openrlhf.records import EpisodeRecord, RayRecordStore, RecordStore, record_key, scalar

RESET_EXTRA_KEY = "prover_reset"
"""Key of the optional dict in an agent instance's ``reset`` result that the reset spec must keep
(for instance a seed the instance drew); :class:`~prover_openrlhf.AgentInstanceEnv` passes it back
inside ``states`` when it restores the episode."""


@dataclass
class _Recording:
    reset: dict[str, Any] | None = None
    observations: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    done: bool = False


_CURRENT: ContextVar[_Recording | None] = ContextVar("prover_openrlhf_recording", default=None)


def recording_class(agent_instance_cls: type) -> type:
    """A subclass of ``agent_instance_cls`` whose ``reset`` and ``step`` also write to the current recording."""
    if not (isinstance(agent_instance_cls, type) and issubclass(agent_instance_cls, AgentInstanceBase)):
        raise TypeError(f"expected an AgentInstanceBase subclass, got {agent_instance_cls!r}")

    base: Any = agent_instance_cls

    class Recording(base):  # type: ignore[misc]
        async def reset(self, states: dict[str, Any], **kwargs: Any) -> Any:
            result = await super().reset(states, **kwargs)
            recording = _CURRENT.get()
            if recording is not None:
                extra = result.get(RESET_EXTRA_KEY) or {}
                recording.reset = {
                    "prompt": states.get("observation"),
                    "label": states.get("label"),
                    "extra": dict(extra),
                }
                recording.observations.append(result["observation"])
            return result

        async def step(self, state_dict: dict[str, Any], **kwargs: Any) -> Any:
            result = await super().step(state_dict, **kwargs)
            recording = _CURRENT.get()
            if recording is not None:
                recording.actions.append(state_dict["action_text"])
                recording.rewards.append(scalar(result["rewards"]))
                recording.done = bool(result["done"])
                recording.observations.append(result["environment_feedback"])
            return result

    Recording.__name__ = Recording.__qualname__ = f"Recording{agent_instance_cls.__name__}"
    Recording.__module__ = agent_instance_cls.__module__
    return Recording


class RecordingAgentExecutor(MultiTurnAgentExecutor):  # type: ignore[misc]
    """OpenRLHF's ``MultiTurnAgentExecutor`` that stores an :class:`EpisodeRecord` of every episode.

    ``store`` defaults to the job-wide :class:`~prover_openrlhf.records.RayRecordStore`.
    """

    def __init__(self, agent_instance_cls: type, store: RecordStore | None = None) -> None:
        super().__init__(recording_class(agent_instance_cls))
        self.store: RecordStore = store if store is not None else RayRecordStore()

    async def execute(
        self,
        prompt: Any,
        label: Any,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:
        recording = _Recording()
        token = _CURRENT.set(recording)
        try:
            output: dict[str, Any] = await super().execute(
                prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images=images
            )
        finally:
            _CURRENT.reset(token)
        turns = len(recording.actions)
        record = EpisodeRecord(
            reset=recording.reset or {"prompt": prompt, "label": label, "extra": {}},
            observations=recording.observations[:turns],
            actions=recording.actions,
            action_ranges=[(int(a), int(b)) for a, b in output["action_ranges"]],
            rewards=recording.rewards,
            done=recording.done,
        )
        stored = self.store.put(record_key(output["observation_tokens"][:max_length]), record.model_dump())
        if inspect.isawaitable(stored):
            await stored
        return output
