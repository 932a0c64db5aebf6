"""What the adapters (``prover-trl``, ``prover-verl``, ``prover-openrlhf``; ``prover-engine``) use of the library.

A host adapter imports from this module only (and from ``prover_engine``; ``tests/test_architecture.py`` checks
it), so the library's surface to the hosts is this list: the pipeline, the data at the boundary, the credit's token
spreading, the judge-against-chance window (``LiftWindow``: each adapter keeps one across steps), the typed errors,
and :func:`require_hosts`, which checks that the host library is installed and says how to install it otherwise.
The engines (``prover_engine``) take the runtime's public modules and from here what they share with its private
ones: user code called sync or async under the runtime's thread bound (:func:`call_user`, :func:`resolve`) and
the finite-number rule (:func:`check_finite`, :func:`finite_arguments`).
"""

from __future__ import annotations

import importlib.util

from prover_core._aio import call_user, resolve
from prover_core._finite import check_finite, finite_arguments
from prover_core.batching import Batcher
from prover_core.bonus import BonusResult, compute_bonus, group_batch
from prover_core.chance import LiftWindow
from prover_core.config import ProverConfig
from prover_core.credit import credit_masses, mask_runs, spans_off_mask, spread_to_tokens
from prover_core.data import Trajectory, Turn
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
from prover_core.protocols import Closable, ContinueFn, Judge, Policy, PolicyContext, RestorableEnv, Step
from prover_core.report import GroupRecord, Report
from prover_core.restore import Env, ReplayEnv
from prover_core.run import ProverRun, merge_reports
from prover_core.trigger import is_eligible, representative, success_rate

__all__ = [
    "Batcher",
    "BonusResult",
    "Closable",
    "ContinuationError",
    "ContinuationLimitError",
    "ContinueFn",
    "EngineError",
    "Env",
    "GroupRecord",
    "InvalidBatchError",
    "Judge",
    "LiftWindow",
    "Policy",
    "PolicyContext",
    "ProverConfig",
    "ProverError",
    "ProverRun",
    "ReplayEnv",
    "ReplayMismatchError",
    "Report",
    "RestorableEnv",
    "RestoreError",
    "Step",
    "Trajectory",
    "Turn",
    "call_user",
    "check_finite",
    "compute_bonus",
    "credit_masses",
    "default_judge",
    "finite_arguments",
    "group_batch",
    "is_eligible",
    "mask_runs",
    "merge_reports",
    "representative",
    "resolve",
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
