"""Orchestration of ``prover bench --only llm``: BC starts, every arm at every lr and seed, the report."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from prover_core.bench.llm import report
from prover_core.bench.llm.credit import OracleJudge, SameLengthRandomJudge, matched_group_size
from prover_core.bench.llm.engine import threads
from prover_core.bench.llm.train import Arm, LLMRun, behaviour_clone, evaluate, train_run
from prover_core.judges import AnchorJudge

ANCHOR = "ProVer, anchor judge"


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
    """ProVer (anchor) with K = 2."""
    seq_mean: bool = False
    """GRPO and ProVer (anchor) with the sequence-mean loss too."""
    title: str = "LLM-shaped benchmark"
    eval_at: tuple[int, ...] = field(default=())

    def checkpoints(self) -> tuple[int, ...]:
        return self.eval_at or tuple(range(self.eval_every, self.steps + 1, self.eval_every))


QUICK = Settings(seeds=2, steps=4, lrs=(1e-3, 3e-3), eval_every=4, eval_tasks=32, eval_samples=2, tasks_per_step=4,
                 title="quick")  # fmt: skip
MEDIUM = Settings(seeds=4, steps=10, lrs=(1e-4, 3e-4), eval_every=5, eval_tasks=32, eval_samples=2, tasks_per_step=4,
                  widen=1, seq_mean=True, title="medium")  # fmt: skip
FULL = Settings(seeds=8, steps=40, lrs=(3e-5, 1e-4, 3e-4), eval_every=10, eval_tasks=64, eval_samples=4, extras=True,
                seq_mean=True, widen=2, title="full")  # fmt: skip


def arms(extras: bool, seq_mean: bool) -> list[Arm]:
    """Every arm but budget-matched GRPO (sized after ProVer's measured cost)."""
    out = [
        Arm("GRPO"),
        Arm("GiGPO", credit="gigpo"),
        Arm("ProVer, oracle judge", credit="prover", judge=lambda s: OracleJudge()),
        Arm(ANCHOR, credit="prover", judge=lambda s: AnchorJudge()),
        Arm("ProVer, random judge (same lengths)", credit="prover",
            judge=lambda s: SameLengthRandomJudge(AnchorJudge(), seed=s)),
    ]  # fmt: skip
    if extras:
        out.append(Arm("ProVer, anchor judge, K=2", credit="prover", judge=lambda s: AnchorJudge(), k=2))
    if seq_mean:
        out += [
            Arm("GRPO, seq-mean", aggregation="seq-mean"),
            Arm(
                "ProVer, anchor judge, seq-mean", credit="prover", judge=lambda s: AnchorJudge(), aggregation="seq-mean"
            ),
        ]
    return out


def run_llm(settings: Settings, out: Path, command: str) -> str:
    """Run the benchmark; write ``llm.md`` and ``results.json`` to ``out``; return the Markdown."""
    threads()
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    starts, start_success = {}, {}
    for seed in range(settings.seeds):
        t = time.perf_counter()
        starts[seed] = behaviour_clone(seed, steps=settings.bc_steps)
        start_success[seed] = evaluate(starts[seed], settings.eval_tasks, settings.eval_samples, seed)
        _say(f"seed {seed}: BC start, held-out success {start_success[seed]:.3f} ({time.perf_counter() - t:.0f} s)")
    runs: dict[str, dict[float, list[LLMRun]]] = {}
    at = settings.checkpoints()

    def train(arm: Arm, seed: int, lr: float) -> None:
        r = train_run(arm, starts[seed], seed, lr, settings.steps, at, settings.eval_tasks, settings.eval_samples,
                      start_success[seed], settings.tasks_per_step)  # fmt: skip
        runs.setdefault(arm.name, {}).setdefault(lr, []).append(r)
        _say(f"{arm.name} lr {lr:g} seed {seed}: {r.success[-1]:.3f} (extra env steps "
             f"{100 * r.extra_share():.0f}%, {r.seconds:.0f} s)")  # fmt: skip

    def column(lr: float) -> None:
        """Every arm at ``lr``; budget-matched GRPO last, sized by ProVer (anchor)'s measured cost at ``lr``."""
        for seed in range(settings.seeds):
            for arm in arms(settings.extras, settings.seq_mean):
                train(arm, seed, lr)
        anchor = runs[ANCHOR][lr]
        g = matched_group_size(8, sum(x.rollout_turns for r in anchor for x in r.logs),
                               sum(x.extra_turns for r in anchor for x in r.logs))  # fmt: skip
        for seed in range(settings.seeds):
            train(Arm(report.MATCHED, group_size=g), seed, lr)

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
    ordered = {
        name: runs[name] for name in [report.BASE, report.MATCHED] + [n for n in runs if "GRPO" != n != report.MATCHED]
    }
    minutes = (time.perf_counter() - t0) / 60
    text = report.markdown(ordered, f"{settings.title}: `{command}`", [start_success[s] for s in range(settings.seeds)],
                           minutes)  # fmt: skip
    (out / "llm.md").write_text(text + "\n")
    dump = {
        "settings": dataclasses.asdict(settings) | {"checkpoints": list(at)},
        "start_success": start_success,
        "runs": [dataclasses.asdict(r) for by_lr in ordered.values() for rs in by_lr.values() for r in rs],
    }
    (out / "results.json").write_text(json.dumps(dump, indent=1))
    return text


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
