"""What the host adapters (``prover-trl``, ``prover-verl``, ``prover-openrlhf``) use of the library, in one place.

An adapter imports from this module only (``tests/test_architecture.py`` checks it), so the library's surface to
the hosts is this list: the pipeline, the data at the boundary, the engine policy, the credit's token spreading,
the judge-against-chance window (``LiftWindow``: each adapter keeps one across steps), the typed errors, and
:func:`require_hosts`, which checks that the host library is installed and says how to install it otherwise.
"""

from __future__ import annotations

import importlib.util

from prover_core.batching import Batcher
from prover_core.bonus import BonusResult, compute_bonus, group_batch
from prover_core.chance import LiftWindow
from prover_core.config import ProverConfig
from prover_core.credit import mask_runs, spans_off_mask, spread_to_tokens
from prover_core.data import Trajectory, Turn
from prover_core.engine import EnginePolicy, Generation, SamplingParams, TokenEngine, TokenStore
from prover_core.engine.parity import merge_metrics
from prover_core.errors import (
    ContinuationError,
    ContinuationLimitError,
    EngineError,
    HostImportError,
    InvalidBatchError,
    ProverError,
    ReplayMismatchError,
    RestoreError,
)
from prover_core.judges import default_judge
from prover_core.protocols import ContinueFn, Judge, Policy, PolicyContext, RestorableEnv, Step
from prover_core.report import GroupRecord, Report
from prover_core.restore import Env, ReplayEnv
from prover_core.trigger import is_eligible, representative, success_rate

__all__ = [
    "Batcher",
    "BonusResult",
    "ContinuationError",
    "ContinuationLimitError",
    "ContinueFn",
    "EngineError",
    "EnginePolicy",
    "Env",
    "Generation",
    "GroupRecord",
    "InvalidBatchError",
    "Judge",
    "LiftWindow",
    "Policy",
    "PolicyContext",
    "ProverConfig",
    "ProverError",
    "ReplayEnv",
    "ReplayMismatchError",
    "Report",
    "RestorableEnv",
    "RestoreError",
    "SamplingParams",
    "Step",
    "TokenEngine",
    "TokenStore",
    "Trajectory",
    "Turn",
    "compute_bonus",
    "default_judge",
    "group_batch",
    "is_eligible",
    "mask_runs",
    "merge_metrics",
    "representative",
    "require_hosts",
    "spans_off_mask",
    "spread_to_tokens",
    "success_rate",
]


def require_hosts(*modules: str, adapter: str, hint: str) -> None:
    """Raise :class:`HostImportError` (naming ``adapter``, with ``hint``) unless all ``modules`` are installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise HostImportError(f"{adapter} needs {', '.join(missing)}, which is not installed. {hint}")
