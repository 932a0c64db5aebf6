"""ProVer credit for TRL's ``GRPOTrainer``.

``ProverGRPOTrainer`` (with ``ProverSetup``) is imported lazily, so ``import prover_trl`` imports
neither trl nor torch; the helpers for spans, batches, rollouts, chat rendering, the default policy
and the vLLM token engines are light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prover_core.hosts import mask_runs, require_hosts
from prover_trl.batch import PROVER_KEYS, RESET_KEY, SPANS_KEY, SUCCESS_KEY, TURNS_KEY, Row, build_trajectory, owners
from prover_trl.chat import ChatRenderer
from prover_trl.engines import VLLMColocateEngine, VLLMServerEngine, trainer_sampling
from prover_trl.errors import ProverTRLError
from prover_trl.policy import TrainerPolicy
from prover_trl.rollout import make_rollout_func, member_reset, rollout_policy_options, success_reward
from prover_trl.spans import check_spans

if TYPE_CHECKING:
    from prover_trl.trainer import ProverGRPOTrainer, ProverSetup

__version__ = "0.1.0"
INSTALL_HINT = (
    "Install torch first (CPU: pip install torch==2.13.0), then pip install ./adapters/trl; see docs/adapters/trl.md."
)
_LAZY = {"ProverGRPOTrainer", "ProverSetup"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        require_hosts("torch", "trl", adapter="prover-trl", hint=INSTALL_HINT)
        from prover_trl import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'prover_trl' has no attribute {name!r}")


__all__ = [
    "PROVER_KEYS",
    "RESET_KEY",
    "SPANS_KEY",
    "SUCCESS_KEY",
    "TURNS_KEY",
    "ChatRenderer",
    "ProverGRPOTrainer",
    "ProverSetup",
    "ProverTRLError",
    "Row",
    "TrainerPolicy",
    "VLLMColocateEngine",
    "VLLMServerEngine",
    "build_trajectory",
    "check_spans",
    "make_rollout_func",
    "mask_runs",
    "member_reset",
    "owners",
    "rollout_policy_options",
    "success_reward",
    "trainer_sampling",
]
