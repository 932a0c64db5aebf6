"""Refuse ``algorithm.adv_estimator=prover`` at start-up when nothing would hand the estimator its step.

Without ProVer's v1 trainer the estimator only learns at the first advantage step (after worker start-up
and a whole rollout) that no :class:`~prover_verl.hook.ProverStep` was set. :func:`check_config` says so
from the config alone; it runs

* in :class:`~prover_verl.trainer.ProverTrainerMixin` ``__init__`` (before any worker starts), and
* for verl's built-in trainers, in ``PPOTrainer.__init__`` once :func:`install_startup_guard` has wrapped
  it (the ``verl.plugins`` entry point does this in every process that imports verl, so
  ``trainer_cls(config)`` in verl's ``TaskRunnerV1.run`` raises before ``trainer.init()``).

verl 0.9.1 offers no config-validation hook for plugins (``main_ppo.main`` runs ``validate_config``, then
the Ray task runner picks the trainer class), so the trainer's constructor is the earliest place.
"""

from __future__ import annotations

import functools
from typing import Any

from prover_verl.errors import SetupError
from prover_verl.names import ESTIMATOR_NAME

PROVER_TRAINER_ATTR = "prover_sets_step"
"""Class attribute (True) of trainers that set the ProverStep before the advantage step."""


def _get(config: Any, path: str, default: Any = None) -> Any:
    node = config
    for part in path.split("."):
        if node is None:
            return default
        node = node.get(part, None) if hasattr(node, "get") else getattr(node, part, None)
    return default if node is None else node


def check_config(config: Any, trainer_cls: type | None = None) -> None:
    """Raise :class:`SetupError` if ``config`` selects ``adv_estimator=prover`` without ProVer's trainer.

    ``trainer_cls`` is the trainer about to be built (default: the class verl's v1 registry holds for
    ``trainer.v1.trainer_mode``). The legacy trainer (``trainer.use_v1=false``, deprecated in verl) is
    not checked: there only a user's own ``fit`` override can set the step.
    """
    if str(_get(config, "algorithm.adv_estimator", "")) != ESTIMATOR_NAME or not _get(config, "trainer.use_v1", True):
        return
    mode = str(_get(config, "trainer.v1.trainer_mode", ""))
    if trainer_cls is None:
        from verl.trainer.ppo.v1 import get_trainer_cls

        trainer_cls = get_trainer_cls(mode)
    if not getattr(trainer_cls, PROVER_TRAINER_ATTR, False):
        raise SetupError(
            f"algorithm.adv_estimator=prover needs ProVer's trainer, but trainer.v1.trainer_mode={mode!r} is "
            f"{trainer_cls.__name__}, which never sets the ProverStep (the run would fail at its first advantage "
            "step). Set trainer.v1.trainer_mode=prover_sync (or prover_colocate_async) and register them "
            "(VERL_USE_EXTERNAL_MODULES=prover_verl.plugin or the verl.plugins entry point); see docs/adapters/verl.md"
        )


def install_startup_guard() -> bool:
    """Wrap verl's ``PPOTrainer.__init__`` with :func:`check_config` (idempotent).

    Returns ``False`` (and changes nothing) where verl's v1 trainer cannot be imported (no TransferQueue).
    """
    try:
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    except ImportError:
        return False
    init = PPOTrainer.__init__
    if getattr(init, "_prover_guard", False):
        return True

    @functools.wraps(init)
    def guarded_init(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        check_config(config, type(self))
        init(self, config, *args, **kwargs)

    guarded_init._prover_guard = True  # type: ignore[attr-defined]
    PPOTrainer.__init__ = guarded_init  # type: ignore[method-assign]
    return True
