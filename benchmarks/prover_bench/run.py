"""``prover bench``: credit accuracy, training and overhead, written as Markdown, JSON and PNG."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prover_bench import family as F
from prover_bench import neural, neural_report
from prover_bench.accuracy import run_accuracy
from prover_bench.neural import NeuralRun
from prover_bench.overhead import Timing, run_overhead
from prover_bench.report_files import write_report
from prover_bench.suite import SUITE, by_name
from prover_bench.tables import accuracy_table, overhead_table, scaling_lines, training_table
from prover_bench.training import Curve, run_training


@dataclass(frozen=True)
class Settings:
    """How much of each benchmark to run."""

    accuracy_batches: int = 30
    accuracy_groups: int = 16
    training_envs: tuple[str, ...] = ("two-keys", "key+ford", "hidden-key")
    training_seeds: int = 20
    training_steps: int = 60
    training_lr: float = 0.5
    overhead_repeats: int = 15
    overhead_batch_sizes: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
    overhead_lengths: tuple[int, ...] = (10, 25, 50, 100, 200)
    neural_seeds: int = 10
    neural_steps: int = 100
    neural_lrs: tuple[float, ...] = (0.0025, 0.005, 0.01)
    neural_bias_batches: int = 200
    k: int = 8
    seed: int = 0
    sections: tuple[str, ...] = field(default=("accuracy", "training", "overhead", "neural"))


QUICK = Settings(
    accuracy_batches=3,
    training_envs=("two-keys",),
    training_seeds=4,
    training_steps=40,
    overhead_repeats=3,
    overhead_batch_sizes=(32, 128, 512),
    overhead_lengths=(10, 50, 200),
    neural_seeds=3,
    neural_steps=15,
    neural_lrs=(0.005, 0.01),
    neural_bias_batches=20,
)
"""``prover bench --quick``: a smaller run (under 2 minutes on 2 cores)."""
FULL = Settings()
"""``prover bench``: the full run behind docs/benchmarks.md."""


@dataclass
class BenchResult:
    """Everything one ``run_bench`` measured, by section, with the plots it wrote."""

    settings: Settings
    accuracy: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    training: dict[str, list[Curve]] = field(default_factory=dict)
    training_info: dict[str, dict[str, float]] = field(default_factory=dict)
    overhead: dict[str, list[Timing]] = field(default_factory=dict)
    neural: dict[str, dict[float, list[NeuralRun]]] = field(default_factory=dict)
    neural_sizes: dict[float, int] = field(default_factory=dict)
    neural_free_bias: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self, command: str = "prover bench") -> str:
        s = self.settings
        parts = [
            "# prover bench",
            "",
            f"Command: `{command}`; {platform.python_implementation()} {platform.python_version()}, "
            f"numpy {np.__version__}, {os.cpu_count()} CPUs; seconds per section: "
            + ", ".join(f"{k} {v:.1f}" for k, v in self.seconds.items()),
        ]
        if self.accuracy:
            parts += [
                "",
                f"## Credit accuracy (initial policy; {s.accuracy_batches} batches of {s.accuracy_groups} groups x 8 "
                f"per environment; K = {s.k})",
                "",
                accuracy_table(self.accuracy),
            ]
        if self.training:
            parts += [
                "",
                f"## Training ({s.training_steps} optimizer steps, lr {s.training_lr}, 8 groups per step)",
                "",
            ]
            parts.append(training_table(self.training))
            for env, info in self.training_info.items():
                parts.append(
                    f"\n{env}: ProVer's extra policy turns were {100 * info['extra_share']:.1f}% of its rollout turns; "
                    f"budget-matched GRPO used groups of {info['matched_group_size']:.0f}."
                )
        if self.overhead:
            t = self.overhead["headline"][0]
            parts += [
                "",
                "## Overhead without continuations (instant continue_from hook, every group eligible)",
                "",
                overhead_table(self.overhead["headline"]),
                "",
                "Scaling with batch size (50 turns) and with length (128 trajectories):",
                "",
                overhead_table(self.overhead["batch"] + self.overhead["length"]),
                "",
                scaling_lines(self.overhead),
                "",
                f"Headline: compute_bonus on {t.batch_size} x {t.turns} costs {1e3 * t.bonus:.1f} ms "
                f"({1e3 * t.bonus_async:.1f} ms awaited on a running loop), "
                f"GRPO {1e3 * t.grpo:.2f} ms in the same run.",
            ]
        if self.neural:
            parts += [
                "",
                neural_report.markdown(
                    self.neural, self.neural_sizes, s.neural_steps, s.neural_seeds, self.neural_free_bias
                ),
            ]
        if self.plots:
            parts += ["", "Plots: " + ", ".join(Path(p).name for p in self.plots)]
        parts += ["", *self.notes] if self.notes else []
        return "\n".join(parts) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": asdict(self.settings),
            "seconds": self.seconds,
            "accuracy": self.accuracy,
            "training": {
                env: [
                    {"label": c.label, "mean": c.mean, "half_width": c.half_width, "env_steps": c.env_steps}
                    for c in curves
                ]
                for env, curves in self.training.items()
            },
            "training_info": self.training_info,
            "overhead": {k: [asdict(t) for t in v] for k, v in self.overhead.items()},
            "neural": {
                method: {
                    str(lr): [{"seed": r.seed, "success": r.success, "env_steps": r.env_steps} for r in runs]
                    for lr, runs in by_lr.items()
                }
                for method, by_lr in self.neural.items()
            },
            "neural_group_sizes": {str(lr): g for lr, g in self.neural_sizes.items()},
            "neural_free_sample_bias": self.neural_free_bias,
        }


def run_bench(
    settings: Settings = FULL, out: Path | None = None, show_progress: bool = True, command: str = "prover bench"
) -> BenchResult:
    """Run the chosen sections; with ``out``, write ``bench.md``, ``results.json`` and the PNG plots there."""
    result = BenchResult(settings)
    if "accuracy" in settings.sections:
        start = time.perf_counter()
        result.accuracy = run_accuracy(
            SUITE, settings.accuracy_batches, settings.accuracy_groups, 8, settings.k, settings.seed, show_progress
        )
        result.seconds["accuracy"] = time.perf_counter() - start
    if "training" in settings.sections:
        start = time.perf_counter()
        for env in settings.training_envs:
            by_name(env)
            curves, info = run_training(
                env,
                settings.training_seeds,
                settings.training_steps,
                lr=settings.training_lr,
                k=settings.k,
                show_progress=show_progress,
            )
            result.training[env], result.training_info[env] = curves, info
        result.seconds["training"] = time.perf_counter() - start
    if "overhead" in settings.sections:
        start = time.perf_counter()
        result.overhead = run_overhead(
            settings.overhead_batch_sizes, settings.overhead_lengths, settings.overhead_repeats, show_progress
        )
        result.seconds["overhead"] = time.perf_counter() - start
    if "neural" in settings.sections:
        start = time.perf_counter()
        result.neural, result.neural_sizes = neural.sweep(
            neural.DEFAULT_METHODS,
            settings.neural_lrs,
            settings.neural_seeds,
            settings.neural_steps,
            k=settings.k,
            family_seed=settings.seed,
            progress=show_progress,
        )
        train, _ = neural.families(family_seed=settings.seed)
        result.neural_free_bias = neural.free_sample_bias(train, F.initial_weights(), settings.neural_bias_batches)
        result.seconds["neural"] = time.perf_counter() - start
    if out is not None:
        write(result, out, command)
    return result


def write(result: BenchResult, out: Path, command: str = "prover bench") -> None:
    """``bench.md``, ``results.json`` and, when matplotlib is installed, the plots."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        result.plots = []
        result.notes.append("plots skipped: matplotlib is not installed (pip install -e ./benchmarks)")
    else:
        from prover_bench import plots

        paths: list[Path] = []
        if result.accuracy:
            paths += plots.plot_accuracy(result.accuracy, out)
        if result.training:
            paths += plots.plot_training(result.training, out)
        if result.overhead:
            paths += plots.plot_overhead(result.overhead, out)
        if result.neural:
            paths += plots.plot_neural(result.neural, out)
        result.plots = [str(p) for p in paths]
    write_report(out, "bench.md", result.markdown(command), "results.json", result.to_json(), indent=1, default=float)
