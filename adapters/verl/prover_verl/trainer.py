"""ProVer's v1 trainers: verl's sync / colocate-async trainers whose advantage step sets the ProverStep.

Registered with verl's ``@register_trainer`` as ``prover_sync`` and ``prover_colocate_async``; select one
with ``trainer.v1.trainer_mode=prover_sync`` together with ``algorithm.adv_estimator=prover`` and
``+prover.spec=my_pkg.MySpec``. Each behaves exactly as its base (``sync`` / ``colocate_async``:
replay buffer, refill, checkpoint rules, ``trainer.v1.<base>`` settings) except ``_compute_advantage``:

1. fetch each row's ``extra_fields`` and token ids from TransferQueue (``batch.keys`` order), where the
   recording agent loop put ``prover_trajectory`` (verl's padding rows carry none they own);
2. fill a :class:`~prover_engine.TokenStore` and build an :class:`~prover_engine.EnginePolicy`
   over verl's own ``LLMServerClient`` (:class:`~prover_verl.engine.VerlServerEngine`), the environment
   restored by replay (:class:`~prover_core.ReplayEnv` over ``spec.make_env``) and the spec's judge;
3. if some group can be credited (success rate strictly between 0 and 1), wake the replicas with the
   actor's weights (:func:`~prover_verl.replicas.awake_replicas`) and run verl's own advantage step under
   ``with prover_step(ProverStep(..., batch_keys=batch.keys))``; otherwise run it without waking;
4. add ``step.result.report.metrics()`` (``prover/...``) to the step's metrics dict, which verl's
   ``Tracking`` logger logs with the rest.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from prover_core.hosts import ProverRun, ReplayEnv, Trajectory, group_batch, success_rate
from prover_engine import EnginePolicy, TokenStore
from prover_verl.agent_loop import TRAJECTORY_FIELD
from prover_verl.engine import VerlServerEngine, sglang_seed_note
from prover_verl.errors import RowAlignmentError, SetupError
from prover_verl.hook import ProverStep, RowTurns, prover_step
from prover_verl.names import ESTIMATOR_NAME
from prover_verl.replicas import awake_replicas
from prover_verl.spec import ProverSpec, load_spec, spec_class

TURNS_FIELD = "prover_turns"
"""Optional ``extra_fields`` entry: the turn indices an output holds when a session has several outputs."""


def _rows(value: Any) -> list[Any]:
    """Per-row Python values of a TransferQueue field (a list, a non-tensor stack, or a nested tensor)."""
    if hasattr(value, "is_nested") and value.is_nested:
        return [t.tolist() for t in value.unbind()]
    if hasattr(value, "tolist"):
        return list(value.tolist())
    return list(value)


def rows_from_extra_fields(extra_fields: Sequence[Any]) -> tuple[list[Trajectory], list[str | RowTurns | None]]:
    """The step's trajectories and rows from each (non-padding) row's ``extra_fields``, in order.

    A row is its trajectory's id (the output holds the whole episode), or ``RowTurns`` when the output
    names the turns it holds in ``extra_fields["prover_turns"]`` (several outputs per session).
    """
    trajectories: dict[str, Trajectory] = {}
    rows: list[str | RowTurns | None] = []
    for i, fields in enumerate(extra_fields):
        if not isinstance(fields, dict) or TRAJECTORY_FIELD not in fields:
            raise RowAlignmentError(
                f"row {i} has no extra_fields[{TRAJECTORY_FIELD!r}]: is the agent loop prover_env (or another that "
                "records the trajectory)?"
            )
        trajectory = Trajectory.model_validate(fields[TRAJECTORY_FIELD])
        trajectories.setdefault(trajectory.id, trajectory)
        turns = fields.get(TURNS_FIELD)
        rows.append(trajectory.id if turns is None else RowTurns(trajectory.id, tuple(int(t) for t in turns)))
    return list(trajectories.values()), rows


class ProverTrainerMixin:
    """The ProVer advantage step, mixed into one of verl's v1 trainers (see the module docstring)."""

    prover_sets_step = True
    base_mode = "sync"
    resume_generation = False

    config: Any
    tokenizer: Any
    global_steps: int
    checkpoint_manager: Any

    def __init__(self, config: Any) -> None:
        estimator = str(config.algorithm.adv_estimator)
        if estimator != ESTIMATOR_NAME:
            raise SetupError(
                f"trainer.v1.trainer_mode={config.trainer.v1.trainer_mode!r} is ProVer's trainer but "
                f"algorithm.adv_estimator={estimator!r}; set algorithm.adv_estimator={ESTIMATOR_NAME}"
            )
        spec_class(config)  # fail now, not at the first advantage step, if prover.spec is wrong
        note = sglang_seed_note(config)
        if note is not None:
            warnings.warn(note, stacklevel=2)
        self._prover_spec: ProverSpec | None = None
        self._prover_run: ProverRun | None = None
        super().__init__(config)  # type: ignore[call-arg]

    @property
    def trainer_mode(self) -> str:
        """The base trainer's mode, so verl's mode-dependent logic (replay buffer, refill, checkpoints) matches it."""
        return self.base_mode

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self.configured_mode = value

    @property
    def prover_spec(self) -> ProverSpec:
        if self._prover_spec is None:
            self._prover_spec = load_spec(self.config, self.tokenizer)
        return self._prover_spec

    @property
    def prover_run(self) -> ProverRun:
        """The run's ProVer state (the judge, the config, the step's seed, the window against chance): built once
        from the spec, at the first advantage step."""
        if self._prover_run is None:
            spec = self.prover_spec
            self._prover_run = ProverRun(spec.judge(), spec.prover_config(), env=ReplayEnv(spec.make_env))
        return self._prover_run

    def prover_engine(self) -> VerlServerEngine:
        """The engine continuations run on: verl's ``LLMServerClient`` to the rollout replicas."""
        return VerlServerEngine(self.get_llm_client())  # type: ignore[attr-defined]

    def build_prover_step(self, keys: Sequence[str], tags: Sequence[dict[str, Any]], data: Any) -> ProverStep:
        """The :class:`ProverStep` for the rows ``keys`` (``data``: their TransferQueue fields)."""
        spec = self.prover_spec
        padding = [bool(tag.get("is_padding", False)) for tag in tags]
        extras = _rows(data["extra_fields"])
        real = [e for e, pad in zip(extras, padding, strict=True) if not pad]
        trajectories, real_rows = rows_from_extra_fields(real)
        it = iter(real_rows)
        rows = [None if pad else next(it) for pad in padding]
        prompts, responses = _rows(data["prompts"]), _rows(data["responses"])
        tokens = TokenStore()
        for i, row in enumerate(rows):
            if isinstance(row, str):  # the row holds the whole trajectory: its tokens are the record
                tokens.add(next(t for t in trajectories if t.id == row), prompts[i], responses[i])
        policy = EnginePolicy(
            self.prover_engine(),
            tokens,
            render_observation=spec.render_observation,
            parse_action=lambda g: spec.parse_action(
                self.tokenizer.decode(list(g.token_ids), skip_special_tokens=True)
            ),
            sampling=spec.sampling(),
        )
        return ProverStep(
            trajectories=trajectories,
            run=self.prover_run,
            policy=policy,
            rows=rows,
            batch_keys=list(keys),
            check_rewards=not bool(self.config.algorithm.use_kl_in_reward),
        )

    @contextmanager
    def prover_replicas(self, step: ProverStep) -> Iterator[None]:
        """Replicas awake with the actor's weights if any group can be credited, else nothing."""
        creditable = any(0.0 < success_rate(group) < 1.0 for group in group_batch(step.trajectories).values())
        waking = (
            awake_replicas(self.checkpoint_manager, self.global_steps - 1, resume_generation=self.resume_generation)
            if creditable
            else nullcontext()
        )
        with waking:
            yield

    def _compute_advantage(self, batch: Any, metrics: dict[str, Any]) -> Any:
        import transfer_queue as tq

        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields", "prompts", "responses"]
        )
        step = self.build_prover_step(batch.keys, batch.tags, data)
        with self.prover_replicas(step), prover_step(step):
            batch = super()._compute_advantage(batch, metrics)  # type: ignore[misc]
        if step.result is not None:
            metrics.update(step.result.report.metrics())
        return batch


@register_trainer("prover_sync")
class ProverTrainerSync(ProverTrainerMixin, PPOTrainerSync):
    """verl's ``sync`` trainer with ProVer's advantage step."""

    base_mode = "sync"


@register_trainer("prover_colocate_async")
class ProverTrainerColocateAsync(ProverTrainerMixin, PPOTrainerColocateAsync):
    """verl's ``colocate_async`` trainer with ProVer's advantage step (replicas resumed and re-aborted)."""

    base_mode = "colocate_async"
    resume_generation = True
