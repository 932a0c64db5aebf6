"""The hook through which trajectories, judge, environment and policy reach verl's advantage step.

verl calls a registered estimator with tensors only (``token_level_rewards``, ``response_mask``, the
``uid`` array as ``index`` and the algorithm config), so everything else travels through a
:class:`ProverStep` set right before verl's advantage step::

    run = ProverRun(judge, config, continue_from=fn)  # once, before training
    ...
    with prover_step(ProverStep(trajectories=trajs, run=run)) as step:  # every step
        data = compute_advantage(data, adv_estimator="prover", config=algo_cfg)
    log(step.result.report.metrics())

The estimator *takes* the step (a step is used for exactly one batch, so a stale step can never
credit the next batch) and raises :class:`HookMissingError` when none is set.

Rows: ``ProverStep.rows[i]`` says what row ``i`` of the batch holds, as a trajectory id (the whole
trajectory) or a :class:`RowTurns` (some of its turns, e.g. one row per environment step as in
verl-agent), or ``None`` (a row holding no trajectory, such as verl's synthetic padding rows).
``rows=None`` means one row per trajectory, in the order of ``trajectories``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from prover_core.hosts import BonusResult, ContinueFn, Policy, ProverRun, RestorableEnv, Trajectory
from prover_verl.errors import HookMissingError


@dataclass(frozen=True)
class RowTurns:
    """Row content: turns ``turns`` (in token order) of trajectory ``trajectory_id``; ``None``: all of them."""

    trajectory_id: str
    turns: tuple[int, ...] | None = None


@dataclass
class ProverStep:
    """Everything ``adv_estimator=prover`` needs for one batch besides verl's tensors.

    ``trajectories`` (each ``group_id`` equal to its rows' ``uid``) go to ``run``, the training run's
    :class:`~prover_core.ProverRun` (built once, with the judge and the config: it keeps what lives across steps),
    with this step's ``env`` and ``policy`` or ``continue_from`` where given (else the run's own).
    ``check_rewards`` compares each row's summed ``token_level_rewards`` with its trajectory's ``success`` (rows
    holding the terminal turn only); turn it off when the rewards carry a KL penalty (``algorithm.use_kl_in_reward``).
    ``batch_keys`` (verl's v1 trainer: the TransferQueue keys ``{uid}_{session}_{index}`` of the rows,
    ``batch.keys``) makes the GRPO base count each session once, on its final output, exactly as the
    v1 trainer does for ``adv_estimator=grpo``; leave it ``None`` on the legacy path (every row counts).
    After the advantage step, ``result`` holds the :class:`~prover_core.BonusResult`.
    """

    trajectories: Sequence[Trajectory | Mapping[str, Any]]
    run: ProverRun
    env: RestorableEnv | None = None
    policy: Policy | None = None
    continue_from: ContinueFn | None = None
    rows: Sequence[str | RowTurns | None] | None = None
    batch_keys: Sequence[str] | None = None
    check_rewards: bool = True
    result: BonusResult | None = field(default=None, init=False)

    def hooks(self) -> dict[str, Any]:
        """This step's continuation hooks for :meth:`ProverRun.verify` (unset ones left to the run's own)."""
        return {"env": self.env, "policy": self.policy, "continue_from": self.continue_from}


_lock = threading.Lock()
_pending: ProverStep | None = None
_last: ProverStep | None = None


def set_prover_step(step: ProverStep) -> None:
    """Make ``step`` the input of the next ``adv_estimator=prover`` call (replacing an unused one)."""
    if not isinstance(step, ProverStep):
        raise TypeError(f"expected a ProverStep, got {type(step).__name__}")
    global _pending
    with _lock:
        _pending = step


def clear_prover_step() -> None:
    """Drop a step that was set but not used."""
    global _pending
    with _lock:
        _pending = None


def take_prover_step() -> ProverStep:
    """Remove and return the pending step; :class:`HookMissingError` when there is none."""
    global _pending, _last
    with _lock:
        step, _pending = _pending, None
        if step is None:
            raise HookMissingError(
                "adv_estimator='prover' needs this batch's trajectories, judge and environment/policy: "
                "call prover_verl.set_prover_step(ProverStep(...)) (or `with prover_verl.prover_step(...)`) "
                "right before verl's advantage step, in the process that runs it (the trainer/driver); "
                "see docs/adapters/verl.md"
            )
        _last = step
        return step


def last_prover_step() -> ProverStep | None:
    """The step the estimator used last (its ``result`` holds the report), or ``None``."""
    with _lock:
        return _last


@contextmanager
def prover_step(step: ProverStep) -> Iterator[ProverStep]:
    """Set ``step`` for the advantage step inside the ``with`` block; an unused step is dropped on exit."""
    set_prover_step(step)
    try:
        yield step
    finally:
        global _pending
        with _lock:
            if _pending is step:
                _pending = None


def rows_from_batch(data: Any, id_key: str, turns_key: str | None = None) -> list[str | RowTurns]:
    """``ProverStep.rows`` read from a ``DataProto``'s ``non_tensor_batch``.

    ``id_key`` holds each row's trajectory id; ``turns_key`` (optional) each row's turn indices.
    """
    fields = data.non_tensor_batch
    if id_key not in fields:
        raise KeyError(f"non_tensor_batch has no field {id_key!r} (fields: {sorted(fields)})")
    ids = [str(v) for v in fields[id_key]]
    if turns_key is None:
        return list(ids)
    if turns_key not in fields:
        raise KeyError(f"non_tensor_batch has no field {turns_key!r} (fields: {sorted(fields)})")
    return [RowTurns(tid, tuple(int(t) for t in turns)) for tid, turns in zip(ids, fields[turns_key], strict=True)]


def trajectories_from_batch(data: Any, key: str = "prover_trajectory") -> list[Trajectory]:
    """One :class:`~prover_core.Trajectory` per row, from a ``non_tensor_batch`` column of trajectories or dicts.

    An agent loop that records ``output.extra_fields["prover_trajectory"] = trajectory.model_dump()`` gets
    this column in the batch (verl turns ``extra_fields`` keys into ``non_tensor_batch`` columns).
    """
    fields = data.non_tensor_batch
    if key not in fields:
        raise KeyError(f"non_tensor_batch has no field {key!r} (fields: {sorted(fields)})")
    return [v if isinstance(v, Trajectory) else Trajectory.model_validate(v) for v in fields[key]]
