"""examples/trl_prover_grpo.py trains and logs accepted ProVer credit."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.hosts import require_host

require_host("trl")


def test_trl_example_trains_with_prover_credit(tmp_path: Path) -> None:
    path = Path(__file__).parents[2] / "examples" / "trl_prover_grpo.py"
    spec = importlib.util.spec_from_file_location("trl_prover_grpo", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    logs = [log for log in module.main(steps=2, output_dir=str(tmp_path)) if "prover/groups" in log]
    assert len(logs) == 2
    for log in logs:
        assert log["prover/groups_accepted"] == 1.0
        assert log["prover/mean_delta_accepted"] == 1.0  # LuckyDoor: 4/4 from after the door, 0/4 before
        assert log["prover/bonus_tokens"] >= 1.0
