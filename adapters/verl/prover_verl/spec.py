"""What the recording agent loop and ProVer's trainer share: the environment, the token protocol, the judge.

Both sides must render observations to the same token ids, or a continuation would not start from the
context the rollout saw. A run names one :class:`ProverSpec` subclass in its config
(``+prover.spec=my_pkg.MySpec``); the agent loop (rollout workers) and the trainer (driver) each build
it with ``(config, tokenizer)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from prover_core.hosts import Env, Judge, ProverConfig, default_judge
from prover_engine import SamplingParams
from prover_verl.errors import SetupError

SPEC_KEY = "prover.spec"


class ProverSpec(ABC):
    """One environment family: how to build and reset it, render observations, parse actions, judge.

    Subclasses implement :meth:`make_env` (a plain ``reset(spec) -> Step`` / ``step(action) -> Step``
    environment, deterministic given its reset spec and actions: continuations restore it by replay) and
    :meth:`reset_spec`; the rest has defaults (:meth:`judge`: :func:`prover_core.default_judge`).
    """

    max_turns: int = 8

    def __init__(self, config: Any, tokenizer: Any) -> None:
        self.config = config
        self.tokenizer = tokenizer

    @abstractmethod
    def make_env(self) -> Env:
        """A fresh environment (reset by the caller)."""

    @abstractmethod
    def reset_spec(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """``Trajectory.reset`` for a dataset row (the agent loop's ``run`` keyword arguments)."""

    def judge(self) -> Judge:
        """The judge that nominates segments (built once per trainer): the library's default unless overridden."""
        return default_judge()

    def prover_config(self) -> ProverConfig:
        return ProverConfig()

    def render_observation(self, observation: Any) -> list[int]:
        """Token ids appended (response_mask 0) for an observation after an action."""
        return [int(i) for i in self.tokenizer.encode(f"{observation}\n", add_special_tokens=False)]

    def prompt_ids(self, sample: Mapping[str, Any], observation: Any) -> list[int]:
        """The prompt: everything before the first action (default: the first observation rendered)."""
        return self.render_observation(observation)

    def parse_action(self, text: str) -> Any:
        return text.strip()

    def sampling(self) -> SamplingParams:
        """Per-action sampling of continuations: :func:`rollout_sampling` (the rollout's own, EOS as the stop)."""
        return rollout_sampling(self.config, self.tokenizer)


def rollout_sampling(config: Any, tokenizer: Any) -> SamplingParams:
    """The rollout's sampling, read in ONE place from verl's ``actor_rollout_ref.rollout`` config.

    verl's agent-loop worker sends ``temperature``, ``top_p``, ``top_k`` (``-1``: off, here 0) and
    ``repetition_penalty=1.0`` (whatever ``rollout.repetition_penalty`` says); the rest of the
    distribution is the engine's neutral value (min-p 0, no presence/frequency penalty), sent explicitly
    by :class:`~prover_verl.engine.VerlServerEngine`. ``max_tokens`` is ``rollout.response_length``;
    verl's replica server clamps it to the room left under ``max_model_len``, as for the rollout.
    """
    rollout = config.actor_rollout_ref.rollout
    eos = getattr(tokenizer, "eos_token_id", None)
    return SamplingParams(
        max_tokens=int(rollout.response_length),
        temperature=float(rollout.temperature),
        top_p=float(rollout.top_p),
        top_k=max(int(rollout.top_k), 0),
        repetition_penalty=1.0,
        stop_token_ids=() if eos is None else (int(eos),),
    )


def spec_class(config: Any) -> type[ProverSpec]:
    """The :class:`ProverSpec` subclass named by ``prover.spec`` (a ``module.Class`` path)."""
    from verl.utils.import_utils import load_class_from_fqn

    section = config.get("prover", None) if hasattr(config, "get") else None
    fqn = section.get("spec", None) if section is not None else None
    if not fqn:
        raise SetupError(
            f"ProVer's agent loop and trainer need +{SPEC_KEY}=<module.Class of a ProverSpec> in the config"
        )
    try:
        cls = load_class_from_fqn(str(fqn), "ProverSpec")
    except (ImportError, AttributeError, ValueError) as exc:
        raise SetupError(f"{SPEC_KEY}={fqn!r} cannot be loaded: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, ProverSpec)):
        raise SetupError(f"{SPEC_KEY}={fqn!r} is not a ProverSpec subclass")
    return cls


def load_spec(config: Any, tokenizer: Any) -> ProverSpec:
    """Build the :class:`ProverSpec` named by ``prover.spec`` with ``(config, tokenizer)``."""
    return spec_class(config)(config, tokenizer)
