"""The benchmark driver end to end on a tiny setting, the overhead harness and the CLI wiring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prover_bench.cli import bench_command
from prover_bench.overhead import instant, linear_fit, synthetic_batch, time_batch
from prover_bench.run import Settings, run_bench
from prover_bench.suite import by_name
from prover_bench.training import run_training, train
from prover_core.cli import main
from prover_core.data import Trajectory
from prover_core.judges import RandomJudge
from tests.conftest import importorskip

TINY = Settings(
    accuracy_batches=1,
    accuracy_groups=4,
    training_envs=("key",),
    training_seeds=2,
    training_steps=2,
    overhead_repeats=1,
    overhead_batch_sizes=(16,),
    overhead_lengths=(10,),
    neural_seeds=2,
    neural_steps=2,
    neural_lrs=(0.1,),
    neural_bias_batches=2,
)


def test_run_bench_writes_tables_json_and_plots(tmp_path: Path) -> None:
    result = run_bench(TINY, tmp_path, show_progress=False, command="test")
    text = (tmp_path / "bench.md").read_text()
    for heading in ("## Credit accuracy", "## Training", "## Overhead", "## Neural miniature", "Exact pairing"):
        assert heading in text
    assert "ProVer, rule judge (K=8)" in text and "VinePPO K=8, all runs" in text and "GiGPO" in text
    assert "GRPO budget-matched" in text
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["accuracy"]) == {"key", "two-keys", "key+ford", "late-key", "hidden-key"}
    assert [t["batch_size"] for t in data["overhead"]["batch"]] == [16, 128]
    assert len(data["training"]["key"][0]["mean"]) == TINY.training_steps + 1
    importorskip("matplotlib")
    assert len(data["neural"]["ProVer, rule judge"]["0.1"]) == 2 and set(data["neural_free_sample_bias"]) == {
        "pre",
        "post",
    }
    assert {Path(p).name for p in result.plots} == {
        "localisation.png",
        "training-key.png",
        "overhead.png",
        "neural.png",
    }
    assert all((tmp_path / Path(p).name).stat().st_size > 1000 for p in result.plots)


def test_training_records_success_and_env_steps() -> None:
    run = train(by_name("key"), "prover", seed=0, steps=3)
    assert len(run.success) == len(run.env_steps) == 4
    assert run.env_steps[0] == 0 and run.env_steps[-1] == run.rollout_turns + run.extra_turns
    assert all(0.0 <= s <= 1.0 for s in run.success)
    with pytest.raises(ValueError, match="unknown training method"):
        train(by_name("key"), "ppo", seed=0, steps=1)
    curves, info = run_training("key", seeds=2, steps=2, with_random=False, show_progress=False)
    assert [c.label.split(" (")[0] for c in curves] == ["GRPO", "GRPO budget-matched", "ProVer, rule judge"]
    assert info["matched_group_size"] >= 9
    # same seeds, same first batch: GRPO and budget-matched start from the same policy value
    assert curves[0].mean[0] == curves[1].mean[0] == curves[2].mean[0]


def test_overhead_harness_counts_hook_calls() -> None:
    raw = synthetic_batch(16, 10)
    batch = [Trajectory.model_validate(t) for t in raw]
    assert len(batch) == 16 and all(t.num_turns == 10 for t in batch)
    assert sum(t.success for t in batch) == 4  # 2 of 8 per group: every group eligible
    timing = time_batch(16, 10, repeats=1, judge=RandomJudge(0))
    assert timing.hook_calls == 2 * 2 * 8  # 2 groups, K pre + K post each
    assert timing.bonus > 0 and timing.grpo > 0 and timing.per_turn_us > 0
    assert instant(batch[0], 0, 3) is True and instant(batch[0], 0, 2) is False
    a, b, r2 = linear_fit([1, 2, 3], [3, 5, 7])
    assert (a, b, r2) == pytest.approx((1.0, 2.0, 1.0))
    with pytest.raises(ValueError, match="multiple"):
        synthetic_batch(10, 5)


def test_cli_rejects_unknown_sections(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--only", "nonsense", "--out", "unused"]) == 2
    assert "unknown sections" in capsys.readouterr().err
    assert bench_command(False, "unused", "") == 2
