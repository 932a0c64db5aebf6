"""Registering the estimator with verl (imports verl only when called)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from prover_verl.names import ESTIMATOR_NAME

INSTALL_HINT = "Install torch and verl first (CPU recipe: docs/adapters/verl.md), then pip install ./adapters/verl."


def register() -> Callable[..., Any]:
    """Register ``adv_estimator=prover`` in ``verl.trainer.ppo.core_algos`` (idempotent); return the estimator.

    Raises verl's ``ValueError`` if another function already holds the name.
    """
    from prover_core.hosts import require_hosts

    require_hosts("torch", "verl", adapter="prover-verl", hint=INSTALL_HINT)
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from prover_verl import estimator  # registers through @register_adv_est on first import

    registered = get_adv_estimator_fn(ESTIMATOR_NAME)  # type: ignore[no-untyped-call]
    if registered is not estimator.compute_prover_advantage:
        raise ValueError(f"adv_estimator {ESTIMATOR_NAME!r} is registered to {registered!r}, not ProVer's")
    return cast(Callable[..., Any], estimator.compute_prover_advantage)
