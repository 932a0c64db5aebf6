"""ProVer adapter for verl: ``algorithm.adv_estimator=prover`` (imports verl and torch lazily).

Importing this package imports neither torch nor verl. :func:`register` (or the ``verl.plugins``
entry point :mod:`prover_verl.plugin`) registers the estimator in verl's registry; the batch's
trajectories, judge and environment/policy reach it through :func:`set_prover_step` /
:func:`prover_step`. On verl's default v1 path, ``prover_verl.trainer`` (trainers ``prover_sync`` /
``prover_colocate_async``) and ``prover_verl.agent_loop`` (``prover_env``) do that; they import verl.
See docs/adapters/verl.md.
"""

from prover_verl.engine import VerlServerEngine
from prover_verl.envs import EnvManagerEnv
from prover_verl.errors import HookMissingError, RowAlignmentError, SetupError, TurnAlignmentError
from prover_verl.hook import (
    ProverStep,
    RowTurns,
    clear_prover_step,
    last_prover_step,
    prover_step,
    rows_from_batch,
    set_prover_step,
    take_prover_step,
    trajectories_from_batch,
)
from prover_verl.names import ESTIMATOR_NAME
from prover_verl.registry import register
from prover_verl.replicas import awake_replicas
from prover_verl.rows import bonus_matrix, turn_runs
from prover_verl.spec import ProverSpec
from prover_verl.startup import check_config, install_startup_guard

__version__ = "0.1.0"

__all__ = [
    "ESTIMATOR_NAME",
    "EnvManagerEnv",
    "HookMissingError",
    "ProverSpec",
    "ProverStep",
    "RowAlignmentError",
    "RowTurns",
    "SetupError",
    "TurnAlignmentError",
    "VerlServerEngine",
    "awake_replicas",
    "bonus_matrix",
    "check_config",
    "clear_prover_step",
    "last_prover_step",
    "prover_step",
    "install_startup_guard",
    "register",
    "rows_from_batch",
    "set_prover_step",
    "take_prover_step",
    "trajectories_from_batch",
    "turn_runs",
]
