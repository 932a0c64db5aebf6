"""ProVer credit for OpenRLHF (0.11.x) agent training.

* :class:`ProverExperienceMaker`: OpenRLHF's ``RemoteExperienceMaker`` whose
  ``compute_advantages_and_returns`` adds ``lam * Delta`` on accepted segments' action tokens.
* :func:`install` / ``python -m prover_openrlhf.launch``: make OpenRLHF's trainer (inside its Ray
  actor) build that class.
* :class:`RecordingAgentExecutor`: the multi-turn executor for ``--train.agent_func_path`` that
  records what the restorable environment needs; :class:`AgentInstanceEnv` restores from it.
* :func:`engine_policy`: continuations on OpenRLHF's own vLLM engines, token-exactly
  (:class:`RolloutEngines`, :mod:`prover_openrlhf.engine`).

OpenRLHF and torch are imported on first use of those names: ``import prover_openrlhf`` imports neither.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from prover_core.hosts import mask_runs, require_hosts
from prover_openrlhf.batch import Plan, Row, batch_rows, build_trajectory, plan_batch
from prover_openrlhf.errors import ExperienceBatchError, ProverOpenRLHFError, SetupError
from prover_openrlhf.prover_setup import SETUP_ENV, ProverSetup, load_setup
from prover_openrlhf.records import EpisodeRecord, LocalRecordStore, RayRecordStore, RecordStore, record_key
from prover_openrlhf.spans import ranges_to_mask_spans

if TYPE_CHECKING:
    from prover_openrlhf.engine import RolloutEngines, engine_policy
    from prover_openrlhf.experience_maker import ProverExperienceMaker
    from prover_openrlhf.install import install, uninstall
    from prover_openrlhf.recorder import RecordingAgentExecutor
    from prover_openrlhf.restore import AgentInstanceEnv

__version__ = "0.1.0"
INSTALL_HINT = (
    "Install torch and OpenRLHF first (CPU recipe: docs/adapters/openrlhf.md), then pip install ./adapters/openrlhf."
)
_LAZY = {
    "ProverExperienceMaker": "prover_openrlhf.experience_maker",
    "install": "prover_openrlhf.install",
    "uninstall": "prover_openrlhf.install",
    "RecordingAgentExecutor": "prover_openrlhf.recorder",
    "AgentInstanceEnv": "prover_openrlhf.restore",
    "RolloutEngines": "prover_openrlhf.engine",
    "engine_policy": "prover_openrlhf.engine",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        require_hosts("torch", "openrlhf", "ray", adapter="prover-openrlhf", hint=INSTALL_HINT)
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'prover_openrlhf' has no attribute {name!r}")


__all__ = [
    "SETUP_ENV",
    "AgentInstanceEnv",
    "EpisodeRecord",
    "ExperienceBatchError",
    "LocalRecordStore",
    "Plan",
    "ProverExperienceMaker",
    "ProverOpenRLHFError",
    "ProverSetup",
    "RayRecordStore",
    "RecordStore",
    "RecordingAgentExecutor",
    "RolloutEngines",
    "Row",
    "SetupError",
    "batch_rows",
    "build_trajectory",
    "engine_policy",
    "install",
    "load_setup",
    "mask_runs",
    "plan_batch",
    "ranges_to_mask_spans",
    "record_key",
    "uninstall",
]
