"""Does crediting choices instead of luck train better? ``prover bench --only delta``.

Design (fixed before the first run, docs/benchmarks.md): every tabular environment of the judge harness,
development and held-out (corridors, luck corridors, nonce corridors, gymnasium's slippery tables; 22),
from the harness's own starting policy. Three arms, trained with the plain policy gradient on the logits
(:func:`prover_core.bench.training.policy_gradient`, SGD), ``groups`` groups of ``group_size`` per step:

* GRPO;
* ProVer with the default :class:`~prover_core.judges.AnchorJudge`, ``Delta`` of states (the paper);
* the same with ``delta_of="choices"`` (the segment's actions replayed from ``s_l`` with fresh transitions);
* ProVer with :class:`~prover_core.judges.ChoiceJudge` (one turn: the choice the failed runs at the same
  state least often made), ``Delta`` of states (added after the first run, with the 2-groups regime);
* the same with ``K = 2`` (a quarter of the paper's cost) and GRPO budget-matched to it (added after the
  second run, from the harness's cost sweep);
* GRPO with ``round(G (1 + share))`` members per group, ``share`` the states arm's measured extra policy
  turns over its rollout turns (at its best lr): budget-matched, and the regime check (if more samples per
  step do not beat GRPO, learning is not limited by gradient noise and no credit method can show much).

The two ProVer arms spend the same continuations (about the same policy turns), so their difference needs
no budget matching. Each arm gets its best lr of a grid per environment (by the mean exact success over
the steps); an lr on the edge of the grid widens it by 3x once, and a best lr still on the edge is
reported. Seeds are paired (one sampling stream per seed and environment, every arm starts from it).
Reported: the exact success probability ``V(s_0)`` averaged over the steps (area under the curve) and at
the last step, paired differences with 95% Student-t intervals over seeds, per environment and pooled by
family (the per-seed mean over a family's environments).
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from prover_core.bench import methods
from prover_core.bench.batch import sample_batch
from prover_core.bench.judge_cases import CORRIDORS, HELD_OUT, LUCK, NONCE, TOY_TEXT, TabularEnv
from prover_core.bench.progress import mean_ci
from prover_core.bench.tabular import Sampler, compile_mdp, value_table
from prover_core.bench.training import policy_gradient
from prover_core.config import ProverConfig
from prover_core.judges import AnchorJudge, ChoiceJudge

ARMS = (
    "GRPO",
    "ProVer, Delta of states",
    "ProVer, Delta of choices",
    "ProVer, choice judge",
    "GRPO, budget-matched",
    "ProVer, choice judge, K=2",
    "GRPO, budget-matched to K=2",
)
MATCHED = {
    "GRPO, budget-matched": "ProVer, Delta of states",
    "GRPO, budget-matched to K=2": "ProVer, choice judge, K=2",
}
"""Each budget-matched arm and the ProVer arm whose measured cost it is sized to."""


@dataclass(frozen=True)
class DeltaSettings:
    seeds: int = 8
    steps: int = 30
    lrs: tuple[float, ...] = (0.3, 1.0, 3.0)
    groups: int = 2
    """Groups per step. 2: with 8 (the first run) the best lr sat on the edge of the grid everywhere and more
    samples per step did not help (docs/benchmarks.md): learning was limited by steps, not by gradient noise."""
    group_size: int = 8
    k: int = 8
    only: tuple[str, ...] = ()
    """Environment names to run (all when empty)."""


QUICK_DELTA = DeltaSettings(seeds=2, steps=4, lrs=(1.0,), groups=4, only=("rockfalls after the key", "traps"))


@dataclass
class Curve:
    """One arm on one environment at one lr: ``success[seed][step]`` (step 0 = the start) and env steps."""

    success: list[list[float]] = field(default_factory=list)
    env_steps: list[int] = field(default_factory=list)
    rollout_turns: int = 0
    extra_turns: int = 0

    def auc(self) -> list[float]:
        """Per seed: the exact success averaged over steps 1..T."""
        return [float(np.mean(s[1:])) for s in self.success]


def environments(only: Sequence[str] = ()) -> list[TabularEnv]:
    envs = [*CORRIDORS, *LUCK, *NONCE, *TOY_TEXT, *HELD_OUT]
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        envs = [e for e in envs if e.kind != "gymnasium"]
    return [e for e in envs if not only or e.name in only]


def train_curve(env: TabularEnv, arm: str, lr: float, settings: DeltaSettings, group_size: int = 0) -> Curve:
    """``settings.seeds`` runs of ``arm`` at ``lr`` (``group_size`` members per group if given); the exact success
    after every step."""
    c = compile_mdp(env.make())
    start = env.policy(c)
    out = Curve()
    for seed in range(settings.seeds):
        theta = start.copy()
        rng = np.random.default_rng([seed, zlib.crc32(env.name.encode()), 23])
        success = [float(value_table(c, theta)[c.horizon, c.initial])]
        spent = 0
        for step in range(settings.steps):
            batch = sample_batch(c, theta, settings.groups, group_size or settings.group_size, rng)
            spent += int(batch.episodes.length.sum())
            out.rollout_turns += int(batch.episodes.length.sum())
            if arm.startswith("GRPO"):
                credit = methods.grpo(batch)
            else:
                delta_of = "choices" if arm.endswith("choices") else "states"
                k = 2 if arm.endswith("K=2") else settings.k
                config = ProverConfig(k=k, seed=seed * 100_003 + step, delta_of=delta_of)
                judge = ChoiceJudge() if "choice judge" in arm else AnchorJudge()
                credit = methods.prover(batch, judge, Sampler(c, theta), config)
                spent += credit.policy_turns
                out.extra_turns += credit.policy_turns
            theta = theta + lr * policy_gradient(c, theta, batch, credit.per_turn)
            success.append(float(value_table(c, theta)[c.horizon, c.initial]))
        out.success.append(success)
        out.env_steps.append(spent)
    return out


@dataclass
class ArmResult:
    lr: float
    edge: bool
    """The best lr is still on the edge of the (widened) grid."""
    curve: Curve
    tried: dict[float, float]
    """lr -> mean area under the curve."""


def _train_at(env: TabularEnv, arm: str, settings: DeltaSettings, group_size: int, lr: float) -> Curve:
    return train_curve(env, arm, lr, settings, group_size)


def best_lr(run: Callable[[float], Curve], lrs: Sequence[float]) -> ArmResult:
    """The lr of the largest mean area under the curve; a best lr on an edge widens the grid by 3x once."""
    curves = {lr: run(lr) for lr in sorted(lrs)}

    def best() -> float:
        return max(curves, key=lambda lr: float(np.mean(curves[lr].auc())))

    grid = sorted(curves)
    if len(grid) > 1 and best() in (grid[0], grid[-1]):
        wider = best() * 3 if best() == grid[-1] else best() / 3
        curves[wider] = run(wider)
        grid = sorted(curves)
    chosen = best()
    edge = len(grid) > 1 and chosen in (grid[0], grid[-1])
    return ArmResult(chosen, edge, curves[chosen], {lr: float(np.mean(c.auc())) for lr, c in curves.items()})


def run_delta(
    settings: DeltaSettings, say: Callable[[str], None] = print, workers: int = 1
) -> dict[str, dict[str, ArmResult]]:
    """``results[env][arm]`` over :func:`environments`, ``workers`` environments at a time (processes)."""
    from concurrent.futures import ProcessPoolExecutor

    names = [e.name for e in environments(settings.only)]
    job = functools.partial(run_environment, settings=settings)
    if workers <= 1:
        return {name: _said(name, job(name), say) for name in names}
    with ProcessPoolExecutor(workers) as pool:
        return {name: _said(name, by_arm, say) for name, by_arm in zip(names, pool.map(job, names), strict=True)}


def _said(name: str, by_arm: dict[str, ArmResult], say: Callable[[str], None]) -> dict[str, ArmResult]:
    say(f"{name}: " + ", ".join(f"{a} {np.mean(r.curve.auc()):.3f} (lr {r.lr:g})" for a, r in by_arm.items()))
    return by_arm


def run_environment(name: str, settings: DeltaSettings) -> dict[str, ArmResult]:
    """Every arm at its best lr on the environment called ``name``."""
    env = next(e for e in environments() if e.name == name)
    by_arm: dict[str, ArmResult] = {}
    for arm in ARMS:
        size = 0
        if arm in MATCHED:
            measured = by_arm[MATCHED[arm]].curve
            share = measured.extra_turns / measured.rollout_turns
            size = max(settings.group_size + 1, round(settings.group_size * (1 + share)))
        by_arm[arm] = best_lr(functools.partial(_train_at, env, arm, settings, size), settings.lrs)
    return by_arm


def _diff(a: Sequence[float], b: Sequence[float]) -> str:
    mean, half = mean_ci([x - y for x, y in zip(a, b, strict=True)])
    return f"{mean:+.3f} ± {half:.3f}" if not math.isnan(mean) else "-"


def markdown(results: dict[str, dict[str, ArmResult]], kinds: dict[str, str], settings: DeltaSettings) -> str:
    grpo, states, choices, choice_judge, matched, cheap, matched_cheap = ARMS
    pairs = [(choices, states), (choice_judge, states), (states, grpo), (choices, grpo), (matched, grpo)]
    pairs += [(states, matched), (cheap, grpo), (cheap, matched_cheap)]
    names = {grpo: "GRPO", states: "states", choices: "choices", choice_judge: "choice judge", matched: "matched"}
    names |= {cheap: "choice K=2", matched_cheap: "matched K=2"}
    columns = ["environment", "family", "start", *names.values(), *(f"{names[a]} - {names[b]}" for a, b in pairs)]
    columns += ["extra env steps", "best lr (" + " / ".join(names.values()) + ")"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    pooled: dict[str, dict[str, list[list[float]]]] = {}
    for name, by_arm in results.items():
        auc = {a: r.curve.auc() for a, r in by_arm.items()}
        for a in ARMS:
            pooled.setdefault(kinds[name], {}).setdefault(a, []).append(auc[a])
        start = by_arm[grpo].curve.success[0][0]
        extra = np.mean(by_arm[states].curve.env_steps) / np.mean(by_arm[grpo].curve.env_steps) - 1
        lrs = " / ".join(f"{by_arm[a].lr:g}{'*' if by_arm[a].edge else ''}" for a in ARMS)
        cells = [name, kinds[name], f"{start:.3f}", *(f"{np.mean(auc[a]):.3f}" for a in ARMS)]
        cells += [_diff(auc[a], auc[b]) for a, b in pairs] + [f"{100 * extra:+.0f}%", lrs]
        lines.append("| " + " | ".join(cells) + " |")
    family_columns = ["family", "environments", *(f"{names[a]} - {names[b]}" for a, b in pairs)]
    lines += ["", "| " + " | ".join(family_columns) + " |", "|" + "---|" * len(family_columns)]
    for kind, family in pooled.items():
        per_seed = {a: list(np.mean(np.array(v), axis=0)) for a, v in family.items()}
        cells = [kind, str(len(family[grpo])), *(_diff(per_seed[a], per_seed[b]) for a, b in pairs)]
        lines.append("| " + " | ".join(cells) + " |")
    edges = [n for n, arms in results.items() if any(r.edge for r in arms.values())]
    arm_edges = sum(r.edge for arms in results.values() for r in arms.values())
    lines += [
        "",
        f"Exact success V(s_0) averaged over {settings.steps} SGD steps ({settings.groups} groups x "
        f"{settings.group_size} per step, K = {settings.k}), each arm at its best lr of "
        f"{', '.join(f'{lr:g}' for lr in settings.lrs)} (widened 3x once at an edge); {settings.seeds} paired seeds, "
        "95% Student-t intervals of the paired differences. states / choices: ProVer with the anchor judge and "
        "Delta of states (the paper) / of choices; choice judge: ProVer with ChoiceJudge, Delta of states; "
        "matched: GRPO with ProVer's (states) measured extra turns as more group members; choice K=2: the choice judge "
        "with K = 2, and GRPO matched to its cost. extra env steps: "
        "ProVer (states) over GRPO. "
        + (
            f"Best lr still on the edge of its widened grid (*) for {arm_edges} of {len(results) * len(ARMS)} "
            f"(environment, arm) pairs, in {len(edges)} of {len(results)} environments ({'; '.join(edges)}): "
            "there a larger step would still help, and the comparison is at the grid's best."
            if edges
            else "No best lr is on its grid's edge."
        ),
    ]
    return "\n".join(lines)


def delta_command(quick: bool, out: str, groups: int | None = None) -> int:
    """``prover bench --only delta``: print the tables, write ``delta.md`` and ``delta.json`` to ``out``."""
    import dataclasses
    import json
    import os
    import sys
    import time
    from pathlib import Path

    settings = QUICK_DELTA if quick else DeltaSettings()
    if groups is not None:
        settings = dataclasses.replace(settings, groups=groups)
    began = time.perf_counter()
    workers = 1 if quick else min(2, os.cpu_count() or 1)
    results = run_delta(settings, say=lambda line: print(line, file=sys.stderr, flush=True), workers=workers)
    kinds = {e.name: e.kind for e in environments(settings.only)}
    command = "prover bench --only delta" + (" --quick" if quick else "") + f" --out {out}"
    command += f" --groups {groups}" if groups is not None else ""
    text = (
        f"# Delta of choices against Delta of states, in training\n\nCommand: `{command}`; "
        f"{time.perf_counter() - began:.0f} s\n\n{markdown(results, kinds, settings)}\n"
    )
    print(text)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "delta.md").write_text(text, encoding="utf-8")
    payload = {
        env: {arm: {"lr": r.lr, "edge": r.edge, "tried": r.tried, "success": r.curve.success} for arm, r in by.items()}
        for env, by in results.items()
    }
    (folder / "delta.json").write_text(json.dumps(payload), encoding="utf-8")
    return 0
