"""Orchestration of ``prover bench --only llm``: BC starts, every arm at every lr and seed, the report."""

from __future__ import annotations

import dataclasses
import multiprocessing
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prover_bench.llm import report
from prover_bench.llm.credit import OracleJudge, SameLengthRandomJudge, matched_group_size
from prover_bench.llm.engine import threads
from prover_bench.llm.train import Arm, LLMRun, behaviour_clone, evaluate, train_run
from prover_bench.report_files import write_report
from prover_core.config import ProverConfig
from prover_core.judges import AnchorJudge, ChoiceJudge

ANCHOR = "ProVer, anchor judge"
DATA = "ProVer, anchor judge, continuations as data"
DEFAULT = f"ProVer, library default (choice judge, K={ProverConfig().k})"
NEGATIVE = "ProVer, anchor judge, negative credit"
Runs = dict[str, dict[float, list[LLMRun]]]


@dataclass(frozen=True)
class Settings:
    seeds: int
    steps: int
    lrs: tuple[float, ...]
    eval_every: int
    eval_tasks: int
    eval_samples: int
    tasks_per_step: int = 8
    bc_steps: int = 200
    widen: int = 0
    """Times the lr grid is widened (by a factor 3 beyond the edge) while some arm's best lr is on an edge."""
    extras: bool = False
    """ProVer (anchor) with K = 2, and with adaptive sampling."""
    more: bool = False
    """ProVer with the library's default configuration (choice judge, K = 4), and ProVer (anchor) with its
    continuations as training data and with negative credit."""
    seq_mean: bool = False
    """GRPO and ProVer (anchor) with the sequence-mean loss too."""
    title: str = "LLM-shaped benchmark"
    eval_at: tuple[int, ...] = field(default=())
    optimizer: str = "adam"
    """``adam`` or ``sgd`` (plain, no momentum), for every arm."""
    workers: int = 1
    """Processes running (arm, seed, lr) jobs at once; results do not depend on it (each job is seeded on its own)."""

    def checkpoints(self) -> tuple[int, ...]:
        return self.eval_at or tuple(range(self.eval_every, self.steps + 1, self.eval_every))


QUICK = Settings(seeds=2, steps=4, lrs=(1e-3, 3e-3), eval_every=4, eval_tasks=32, eval_samples=2, tasks_per_step=4,
                 title="quick")  # fmt: skip
MEDIUM = Settings(seeds=4, steps=10, lrs=(1e-4, 3e-4), eval_every=5, eval_tasks=32, eval_samples=2, tasks_per_step=4,
                  widen=1, seq_mean=True, title="medium")  # fmt: skip
FULL = Settings(seeds=8, steps=40, lrs=(3e-5, 1e-4, 3e-4), eval_every=10, eval_tasks=64, eval_samples=4, extras=True,
                more=True, seq_mean=True, widen=2, title="full")  # fmt: skip
SGD = Settings(seeds=8, steps=20, lrs=(1.0, 3.0, 10.0), eval_every=10, eval_tasks=64, eval_samples=2, tasks_per_step=4,
               extras=True, widen=1, optimizer="sgd", workers=2, title="sgd")  # fmt: skip
"""Issue 22's optimizer factor (docs/benchmarks.md, "The SGD size"): plain SGD, 8 seeds, 2 processes."""
ADAM = Settings(seeds=8, steps=20, lrs=(1e-4, 3e-4), eval_every=10, eval_tasks=64, eval_samples=2, tasks_per_step=4,
                extras=True, more=True, widen=1, workers=2, title="adam")  # fmt: skip
"""The SGD size's Adam twin with every ProVer arm (docs/benchmarks.md, "The Adam size"): 8 seeds, 2 processes."""


def arms(settings: Settings) -> list[Arm]:
    """Every arm but budget-matched GRPO (sized after ProVer's measured cost), with the settings' optimizer."""
    out = [
        Arm("GRPO"),
        Arm("GiGPO", credit="gigpo"),
        Arm("ProVer, oracle judge", credit="prover", judge=lambda s: OracleJudge()),
        Arm(ANCHOR, credit="prover", judge=lambda s: AnchorJudge()),
        Arm("ProVer, random judge (same lengths)", credit="prover",
            judge=lambda s: SameLengthRandomJudge(AnchorJudge(), seed=s)),
    ]  # fmt: skip
    if settings.extras:
        out += [
            Arm("ProVer, anchor judge, K=2", credit="prover", judge=lambda s: AnchorJudge(), k=2),
            Arm("ProVer, anchor judge, adaptive", credit="prover", judge=lambda s: AnchorJudge(), sampling="adaptive"),
        ]
    if settings.more:
        out += [
            Arm(DEFAULT, credit="prover", judge=lambda s: ChoiceJudge(), k=ProverConfig().k),
            Arm(DATA, credit="prover", judge=lambda s: AnchorJudge(), continuation_data=True),
            Arm(NEGATIVE, credit="prover", judge=lambda s: AnchorJudge(), negative=True),
        ]
    if settings.seq_mean:
        out += [
            Arm("GRPO, seq-mean", aggregation="seq-mean"),
            Arm(
                "ProVer, anchor judge, seq-mean", credit="prover", judge=lambda s: AnchorJudge(), aggregation="seq-mean"
            ),
        ]
    return [dataclasses.replace(a, optimizer=settings.optimizer) for a in out]


@dataclass(frozen=True)
class Job:
    """One training run, named so a worker process can rebuild its arm (judges are not picklable)."""

    arm: str
    group_size: int
    seed: int
    lr: float


def _run_job(settings: Settings, job: Job, start: Any, start_success: float) -> LLMRun:
    threads()
    named = {a.name: a for a in arms(settings)}
    if job.arm == report.MATCHED:
        named[job.arm] = Arm(report.MATCHED, group_size=job.group_size, optimizer=settings.optimizer)
    if job.arm not in named:
        raise KeyError(f"no arm {job.arm!r} in these settings; arms: {sorted(named)}")
    arm = named[job.arm]
    return train_run(arm, start, job.seed, job.lr, settings.steps, settings.checkpoints(), settings.eval_tasks,
                     settings.eval_samples, start_success, settings.tasks_per_step)  # fmt: skip


def _start(settings: Settings, seed: int) -> tuple[Any, float]:
    threads()
    params = behaviour_clone(seed, steps=settings.bc_steps)
    return params, evaluate(params, settings.eval_tasks, settings.eval_samples, seed)


class _Serial(Executor):
    """The in-process executor of ``workers=1`` (no pickling, no child processes)."""

    def map(self, fn: Any, *iterables: Any, timeout: float | None = None, chunksize: int = 1) -> Any:
        return map(fn, *iterables)


def run_llm(settings: Settings, out: Path, command: str) -> str:
    """Run the benchmark; write ``llm.md`` and ``results.json`` to ``out``; return the Markdown."""
    threads()
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    pool: Executor = (
        ProcessPoolExecutor(settings.workers, mp_context=multiprocessing.get_context("spawn"))
        if settings.workers > 1
        else _Serial()
    )
    with pool:
        starts, start_success = bc_starts(settings, pool, range(settings.seeds))
        runs = _columns(settings, pool, starts, start_success)
    ordered = {
        name: runs[name] for name in [report.BASE, report.MATCHED] + [n for n in runs if "GRPO" != n != report.MATCHED]
    }
    minutes = (time.perf_counter() - t0) / 60
    text = report.markdown(ordered, f"{settings.title}: `{command}`", [start_success[s] for s in range(settings.seeds)],
                           minutes)  # fmt: skip
    dump = {
        "settings": dataclasses.asdict(settings) | {"checkpoints": list(settings.checkpoints())},
        "start_success": start_success,
        "runs": [dataclasses.asdict(r) for by_lr in ordered.values() for rs in by_lr.values() for r in rs],
    }
    write_report(out, "llm.md", text + "\n", "results.json", dump, indent=1)
    return text


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def bc_starts(settings: Settings, pool: Executor, seeds: Sequence[int]) -> tuple[dict[int, Any], dict[int, float]]:
    """Each seed's behaviour-cloned start (its parameters, and its held-out success), reported as it comes."""
    starts, start_success = {}, {}
    for seed, (params, success) in zip(seeds, pool.map(_start, [settings] * len(seeds), seeds), strict=True):
        starts[seed], start_success[seed] = params, success
        _say(f"seed {seed}: BC start, held-out success {success:.3f}")
    return starts, start_success


def train_jobs(
    settings: Settings, pool: Executor, jobs: Sequence[Job], starts: dict[int, Any], start_success: dict[int, float],
    runs: Runs,
) -> None:  # fmt: skip
    """Run ``jobs`` on ``pool`` from their seeds' BC starts; add each run to ``runs[arm][lr]`` and report it."""
    done = pool.map(_run_job, [settings] * len(jobs), jobs, [starts[j.seed] for j in jobs],
                    [start_success[j.seed] for j in jobs])  # fmt: skip
    for job, r in zip(jobs, done, strict=True):
        runs.setdefault(job.arm, {}).setdefault(job.lr, []).append(r)
        _say(f"{job.arm} lr {job.lr:g} seed {job.seed}: {r.success[-1]:.3f} (extra env steps "
             f"{100 * r.extra_share():.0f}%, {r.seconds:.0f} s)")  # fmt: skip


def _columns(settings: Settings, pool: Executor, starts: dict[int, Any], start_success: dict[int, float]) -> Runs:
    """Every arm at every lr of the grid, widened while a best lr is on an edge (``settings.widen`` times)."""
    runs: Runs = {}

    def train(jobs: Sequence[Job]) -> None:
        train_jobs(settings, pool, jobs, starts, start_success, runs)

    def column(lr: float) -> None:
        """Every arm at ``lr``; budget-matched GRPO last, sized by ProVer (anchor)'s measured cost at ``lr``."""
        train([Job(arm.name, arm.group_size, seed, lr) for seed in range(settings.seeds) for arm in arms(settings)])
        anchor = runs[ANCHOR][lr]
        g = matched_group_size(8, sum(x.rollout_turns for r in anchor for x in r.logs),
                               sum(x.extra_turns for r in anchor for x in r.logs))  # fmt: skip
        train([Job(report.MATCHED, g, seed, lr) for seed in range(settings.seeds)])

    for lr in settings.lrs:
        column(lr)
    for _ in range(settings.widen):
        where = {report.edge(by_lr) for by_lr in runs.values()}
        lrs = sorted(runs[report.BASE])
        new = lrs[0] / 3 if "lowest" in where else lrs[-1] * 3 if "highest" in where else None
        if new is None:
            break
        _say(f"a best lr is on the {'lowest' if new < lrs[0] else 'highest'} edge of {lrs}: widening to lr {new:g}")
        column(new)
    return runs
