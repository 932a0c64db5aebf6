"""PNG plots (matplotlib, imported lazily: a dependency of ``prover-bench``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prover_bench.neural import NeuralRun
from prover_bench.overhead import Timing
from prover_bench.training import Curve


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_training(results: Mapping[str, Sequence[Curve]], out: Path) -> list[Path]:
    """Success against optimizer steps and against environment steps, 95% CI bands, one figure per env."""
    plt = _pyplot()
    paths = []
    for env, curves in results.items():
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for cv in curves:
            mean, hw = np.array(cv.mean), np.array(cv.half_width)
            for ax, x in ((axes[0], np.arange(len(mean))), (axes[1], np.array(cv.env_steps))):
                ax.plot(x, mean, label=cv.label)
                ax.fill_between(x, mean - hw, mean + hw, alpha=0.2)
        axes[0].set_xlabel("optimizer step")
        axes[1].set_xlabel("environment steps (rollouts + continuations), thousands")
        axes[1].xaxis.set_major_formatter(lambda x, _pos: f"{x / 1000:g}")
        for ax in axes:
            ax.set_ylabel("exact success probability")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"Training on {env} ({len(curves[0].runs)} seeds, mean and 95% CI)")
        fig.tight_layout()
        path = out / f"training-{env}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_overhead(timings: Mapping[str, Sequence[Timing]], out: Path) -> list[Path]:
    """Library time against batch size and against trajectory length (log-log)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, kind, xlabel in ((axes[0], "batch", "trajectories (50 turns)"), (axes[1], "length", "turns (128 runs)")):
        ts = timings[kind]
        xs = [t.batch_size if kind == "batch" else t.turns for t in ts]
        for attr, label in (("bonus", "compute_bonus"), ("bonus_async", "acompute_bonus"), ("grpo", "GRPO (library)"),
                            ("build", "build Trajectory objects")):  # fmt: skip
            ax.plot(xs, [1e3 * getattr(t, attr) for t in ts], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel("ms (best of repeats)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.suptitle("Library overhead without continuations (all groups eligible)")
    fig.tight_layout()
    path = out / "overhead.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def plot_accuracy(results: Mapping[str, Mapping[str, Mapping[str, float]]], out: Path) -> list[Path]:
    """Localisation precision per method and environment."""
    plt = _pyplot()
    envs = list(results)
    methods = [m for m in next(iter(results.values())) if m != "GRPO"]
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        ys = [results[e][m]["localisation"] for e in envs]
        ax.bar(np.arange(len(envs)) + j * width, np.nan_to_num(ys), width, label=m)
    ax.set_xticks(np.arange(len(envs)) + 0.4 - width / 2, envs)
    ax.set_ylabel("singled-out segment contains a pivotal turn")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    path = out / "localisation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def plot_neural(runs: Mapping[str, Mapping[float, Sequence[NeuralRun]]], out: Path) -> list[Path]:
    """Held-out success against optimizer steps and environment steps, each method at its best lr."""
    from prover_bench.neural_report import best_lr

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    grid = None
    for name, by_lr in runs.items():
        lr = best_lr(by_lr)
        rs = by_lr[lr]
        success = np.array([r.success for r in rs])
        mean = success.mean(axis=0)
        hw = 1.96 * success.std(axis=0, ddof=1) / np.sqrt(len(rs)) if len(rs) > 1 else 0 * mean
        axes[0].plot(np.arange(len(mean)), mean, label=f"{name} (lr {lr:g})")
        axes[0].fill_between(np.arange(len(mean)), mean - hw, mean + hw, alpha=0.15)
        if grid is None:
            grid = np.linspace(0, max(r.env_steps[-1] for r in rs), 200)
        on_grid = np.array([np.interp(grid, r.env_steps, r.success, right=np.nan) for r in rs])
        axes[1].plot(grid, on_grid.mean(axis=0))
    axes[0].set_xlabel("optimizer step")
    axes[1].set_xlabel("environment steps (rollouts + continuations), thousands")
    axes[1].xaxis.set_major_formatter(lambda x, _pos: f"{x / 1000:g}")
    for ax in axes:
        ax.set_ylabel("exact held-out success (128 tasks)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    n = len(next(iter(next(iter(runs.values())).values())))
    fig.suptitle(f"Neural miniature: shared linear-softmax policy, {n} paired seeds (mean, 95% CI)")
    fig.tight_layout()
    path = out / "neural.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
