"""``ProverSetup``: what the experience maker needs to propose and verify, and how a trainer finds it.

OpenRLHF builds its experience maker inside the trainer's Ray actor with a fixed signature, so the
setup is named by an import path in the environment variable ``PROVER_OPENRLHF_SETUP``
(``"package.module:factory"``). The factory is called once, in the trainer process, with the
experience maker (for its ``args`` and ``tokenizer``) and returns a :class:`ProverSetup`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prover_core.hosts import ContinueFn, Judge, Policy, ProverConfig, RestorableEnv, default_judge
from prover_openrlhf.errors import SetupError
from prover_openrlhf.records import RayRecordStore, RecordStore

SETUP_ENV = "PROVER_OPENRLHF_SETUP"


@dataclass(frozen=True)
class ProverSetup:
    """Judge, continuation source, configuration and record store of one training run.

    Give ``env`` (a :class:`~prover_core.RestorableEnv`, e.g. :class:`~prover_openrlhf.AgentInstanceEnv`)
    and ``policy``, or the low-level ``continue_from``. ``store`` defaults to the job-wide
    :class:`~prover_openrlhf.RayRecordStore` that :class:`~prover_openrlhf.RecordingAgentExecutor`
    writes to. ``enabled=False`` keeps stock OpenRLHF advantages (an ablation switch).
    """

    judge: Judge = field(default_factory=default_judge)
    """The library's default (:func:`prover_core.default_judge`, a ``ChoiceJudge``) unless given."""
    env: RestorableEnv | None = None
    policy: Policy | None = None
    continue_from: ContinueFn | None = None
    config: ProverConfig = field(default_factory=ProverConfig)
    store: RecordStore = field(default_factory=RayRecordStore)
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.continue_from is not None and (self.env is not None or self.policy is not None):
            raise SetupError("give either continue_from or env and policy, not both")
        if self.continue_from is None and (self.env is None or self.policy is None):
            raise SetupError("ProverSetup needs env and policy, or continue_from")


def resolve(path: str) -> Any:
    """The object at ``"package.module:attribute"`` (raises :class:`SetupError` when it is not there)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise SetupError(f"expected 'package.module:attribute', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SetupError(f"cannot import {module_name!r} named by {path!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SetupError(f"module {module_name!r} has no attribute {attr!r}") from None


def load_setup(maker: Any, path: str | None = None) -> ProverSetup:
    """Call the factory named by ``path`` (default: ``$PROVER_OPENRLHF_SETUP``) with ``maker``."""
    path = path or os.environ.get(SETUP_ENV)
    if not path:
        raise SetupError(
            f"ProVer's experience maker is installed but no setup is given: set {SETUP_ENV}="
            "'package.module:factory' (a callable taking the experience maker and returning a ProverSetup), "
            "or pass prover=ProverSetup(...) to the constructor"
        )
    factory: Callable[[Any], ProverSetup] = resolve(path)
    setup = factory(maker)
    if not isinstance(setup, ProverSetup):
        raise SetupError(f"{path} returned {type(setup).__name__}, expected a ProverSetup")
    return setup
