"""How ``adv_estimator=prover`` gets into verl's registry in a fresh process (as in verl's Ray trainer).

Each case runs a new interpreter that imports verl, then asks verl's own ``get_adv_estimator_fn``
(which raises ``ValueError: Unknown advantage estimator`` for a name nobody registered).
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tests.conftest import skip
from tests.hosts import require_host

require_host("verl")

PROBE = (
    "import verl\n"
    "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
    "from verl.trainer.ppo.v1.trainer_base import PPOTrainer, TRAINER_REGISTRY\n"
    "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
    "print('V1', sorted(k for k in TRAINER_REGISTRY if k.startswith('prover')), 'prover_env' in _agent_loop_registry,"
    " getattr(PPOTrainer.__init__, '_prover_guard', False))\n"
    "fn = get_adv_estimator_fn('prover')\n"
    "print('REGISTERED', fn.__module__, fn.__name__)\n"
)
REGISTERED = "REGISTERED prover_verl.estimator compute_prover_advantage"
V1 = "V1 ['prover_colocate_async', 'prover_sync'] True True"


def start_probe(cwd: Path, **env: str) -> subprocess.Popen[str]:
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_")}
    run_env.update(env)
    return subprocess.Popen(
        [sys.executable, "-c", PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env, cwd=cwd
    )


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Both fresh-process probes, started together (each import of verl takes seconds)."""
    tmp = tmp_path_factory.mktemp("verl_plugins")
    # a real distribution's metadata on sys.path, declaring what prover-core's pyproject declares
    dist = tmp / "site" / "prover_probe-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: prover-probe\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text("[verl.plugins]\nprover = prover_verl.plugin\n")
    pythonpath = os.pathsep.join(filter(None, [str(tmp / "site"), os.environ.get("PYTHONPATH")]))
    running = {
        "modules": start_probe(tmp, VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="prover_verl.plugin"),
        "entry_point": start_probe(tmp, VERL_USE_EXTERNAL_PLUGINS="prover", PYTHONPATH=pythonpath),
    }
    lines = {}
    for name, proc in running.items():
        out, err = proc.communicate(timeout=600)  # the plugin also imports verl's v1 trainer
        assert proc.returncode == 0, f"{name}: {err[-2000:]}"
        *_, v1, registered = out.strip().splitlines()
        lines[name], lines[f"{name}_v1"] = registered, v1
    return lines


def test_verl_itself_has_no_prover_estimator() -> None:
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    assert "prover" not in {e.value for e in AdvantageEstimator}


def test_registered_by_verl_use_external_modules(probes: dict[str, str]) -> None:
    assert probes["modules"] == REGISTERED


def test_registered_by_a_verl_plugins_entry_point(probes: dict[str, str]) -> None:
    assert probes["entry_point"] == REGISTERED


def test_the_plugin_registers_provers_v1_trainers_agent_loop_and_start_up_guard(probes: dict[str, str]) -> None:
    assert probes["modules_v1"] == V1
    assert probes["entry_point_v1"] == V1


def test_the_installed_prover_core_declares_the_entry_point() -> None:
    declared = [ep for ep in entry_points(group="verl.plugins") if ep.value == "prover_verl.plugin"]
    if not declared:
        skip("prover-core's metadata has no verl.plugins entry point (pyproject lacks it, or not reinstalled)")
    assert declared[0].name == "prover"


def test_register_is_idempotent_and_guards_the_name() -> None:
    from verl.trainer.ppo import core_algos

    import prover_verl

    fn = prover_verl.register()
    assert prover_verl.register() is fn is core_algos.get_adv_estimator_fn("prover")
    with pytest.raises(ValueError, match="already been registered"):
        core_algos.register_adv_est("prover")(lambda **kw: None)
