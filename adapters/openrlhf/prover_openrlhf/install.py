"""Putting :class:`ProverExperienceMaker` where OpenRLHF's trainer looks for its experience maker.

``BasePPOTrainer.__init__`` (``openrlhf/trainer/ppo_trainer.py``) calls the module-level name
``RemoteExperienceMaker``, which that module imports from ``openrlhf.trainer.ppo_utils.experience_maker``,
inside the trainer's Ray actor. :func:`install` rebinds that name in both modules (the second one
whether or not it is imported yet: a later import copies the patched name). It must run in every Ray
worker process before the trainer actor is created, which Ray's ``worker_process_setup_hook`` does:
:mod:`prover_openrlhf.launch` starts Ray with ``worker_process_setup_hook=WORKER_SETUP_HOOK``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

EXPERIENCE_MAKER_MODULE = "openrlhf.trainer.ppo_utils.experience_maker"
TRAINER_MODULE = "openrlhf.trainer.ppo_trainer"
WORKER_SETUP_HOOK = "prover_openrlhf.install.install"
"""The import path Ray's ``runtime_env={"worker_process_setup_hook": ...}`` takes."""

_ORIGINAL: dict[str, Any] = {}


def install() -> type:
    """Make OpenRLHF's trainer build a :class:`ProverExperienceMaker`; returns the class. Idempotent."""
    from prover_openrlhf.experience_maker import ProverExperienceMaker

    maker_module = importlib.import_module(EXPERIENCE_MAKER_MODULE)
    for name in (EXPERIENCE_MAKER_MODULE, TRAINER_MODULE):
        module = sys.modules.get(name)
        if module is None:
            continue
        current = getattr(module, "RemoteExperienceMaker", None)
        if current is not ProverExperienceMaker:
            _ORIGINAL.setdefault(name, current)
            module.RemoteExperienceMaker = ProverExperienceMaker  # type: ignore[attr-defined]
    assert maker_module.RemoteExperienceMaker is ProverExperienceMaker
    return ProverExperienceMaker


def uninstall() -> None:
    """Restore OpenRLHF's own class in every module :func:`install` patched."""
    for name, original in list(_ORIGINAL.items()):
        module = sys.modules.get(name)
        if module is not None:
            module.RemoteExperienceMaker = original  # type: ignore[attr-defined]
        del _ORIGINAL[name]


def installed() -> bool:
    """Whether OpenRLHF's experience-maker module currently names :class:`ProverExperienceMaker`."""
    module = sys.modules.get(EXPERIENCE_MAKER_MODULE)
    cls = getattr(module, "RemoteExperienceMaker", None)
    return getattr(cls, "__name__", None) == "ProverExperienceMaker"
