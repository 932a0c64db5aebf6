"""Entry point of verl's plugin discovery: importing this module registers ``adv_estimator=prover``.

verl imports it on ``import verl`` when prover-core declares
``[project.entry-points."verl.plugins"] prover = "prover_verl.plugin"``; ``VERL_USE_EXTERNAL_MODULES=
prover_verl.plugin`` does the same without the entry point. Either way registration happens in every
process that imports verl, the Ray trainer process included. It also installs the start-up check
(:func:`prover_verl.startup.install_startup_guard`): ``adv_estimator=prover`` with one of verl's own
trainers is refused when the trainer is built, before any worker starts; and it registers ProVer's v1
trainers (``trainer.v1.trainer_mode=prover_sync`` / ``prover_colocate_async``) and the recording agent
loop (``prover_env``).
"""

from prover_verl.registry import register
from prover_verl.startup import install_startup_guard

register()
if install_startup_guard():  # verl's v1 trainer is importable: register ProVer's trainers and agent loop
    import prover_verl.agent_loop
    import prover_verl.trainer  # noqa: F401
