"""The worked launch (examples/verl_prover/run.sh): its Hydra overrides compose with verl 0.9.1's own config
and pass ProVer's start-up check, and the data it trains on is made by make_data.py (the run itself needs
GPUs and vLLM; it was not run)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from tests.hosts import require_host

verl = require_host("verl")
require_host("transfer_queue")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verl_prover"


def overrides() -> list[str]:
    script = (EXAMPLE / "run.sh").read_text()
    command = script[script.index("python3 -m verl.trainer.main_ppo") : script.index('"$@"')]
    args = shlex.split(command.replace("\\\n", " "), comments=False)
    return [a.replace("$DATA", "/home/user/data/frozenlake") for a in args[3:]]


def test_the_launch_overrides_compose_and_pass_the_start_up_check() -> None:
    from hydra import compose, initialize_config_dir

    from prover_verl.spec import spec_class
    from prover_verl.startup import check_config
    from prover_verl.trainer import ProverTrainerSync

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides())
    assert config.algorithm.adv_estimator == "prover" and config.trainer.v1.trainer_mode == "prover_sync"
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "prover_env"
    check_config(config, ProverTrainerSync)  # raises SetupError otherwise
    sys.path.insert(0, str(EXAMPLE))
    try:
        assert spec_class(config).__name__ == "FrozenLakeSpec"
    finally:
        sys.path.remove(str(EXAMPLE))


def test_make_data_writes_the_parquet_files_the_launch_reads(tmp_path: Path) -> None:
    import datasets

    sys.path.insert(0, str(EXAMPLE))
    try:
        from frozenlake_spec import FrozenLakeSpec
        from make_data import main

        train, test = main(["--out", str(tmp_path), "--train", "5", "--test", "2"])
    finally:
        sys.path.remove(str(EXAMPLE))
    script = (EXAMPLE / "run.sh").read_text()
    assert 'make_data.py" --out "$DATA"' in script and 'data.train_files="$DATA/train.parquet"' in script
    rows = datasets.Dataset.from_parquet(str(train))
    assert len(rows) == 5 and len(datasets.Dataset.from_parquet(str(test))) == 2
    assert rows[3]["prompt"][0]["role"] == "user" and rows[3]["extra_info"]["seed"] == 3
    spec = FrozenLakeSpec.reset_spec(FrozenLakeSpec.__new__(FrozenLakeSpec), rows[3])  # the row as the loop sees it
    assert spec == FrozenLakeSpec.reset_spec(FrozenLakeSpec.__new__(FrozenLakeSpec), {"extra_info": {"seed": 3}})
