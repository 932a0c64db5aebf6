"""Entry point of verl's plugin discovery: importing this module registers ``adv_estimator=prover``.

verl imports it on ``import verl`` when prover-core declares
``[project.entry-points."verl.plugins"] prover = "prover_verl.plugin"``; ``VERL_USE_EXTERNAL_MODULES=
prover_verl.plugin`` does the same without the entry point. Either way registration happens in every
process that imports verl, the Ray trainer process included.
"""

from prover_verl.registry import register

register()
