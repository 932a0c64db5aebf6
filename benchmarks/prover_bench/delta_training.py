"""Does crediting choices instead of luck train better? ``prover bench --only delta``.

Design (fixed before the first run, docs/benchmarks.md): every tabular environment of the judge harness,
development and held-out (corridors, luck corridors, nonce corridors, gymnasium's slippery tables; 22),
from the harness's own starting policy. Three arms, trained with the plain policy gradient on the logits
(:func:`prover_bench.training.policy_gradient`, SGD), ``groups`` groups of ``group_size`` per step:

* GRPO;
* ProVer with the default :class:`~prover_core.judges.AnchorJudge`, ``Delta`` of states (the paper);
* the same with ``delta_of="choices"`` (the segment's actions replayed from ``s_l`` with fresh transitions);
* ProVer with :class:`~prover_core.judges.ChoiceJudge` (one turn: the choice the failed runs at the same
  state least often made), ``Delta`` of states (added after the first run, with the 2-groups regime);
* the same with ``K = 2`` (a quarter of the paper's cost) and GRPO budget-matched to it (added after the
  second run, from the harness's cost sweep);
* GRPO with ``round(G (1 + share))`` members per group, ``share`` the states arm's measured extra policy
  turns over its rollout turns (at its best lr): budget-matched, and the regime check (if more samples per
  step do not beat GRPO, learning is not limited by gradient noise and no credit method can show much);
* the cost levers (added after the third run, design in the docs before their run), all with the choice judge:
  continuations as training data (:class:`methods.Continuations`) at K = 8 and K = 2, adaptive sampling, and
  K = 4, each with GRPO budget-matched to its own measured cost (:data:`SPECS`).

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
from typing import Literal

import numpy as np

from prover_bench import methods
from prover_bench.batch import Batch, sample_batch
from prover_bench.judge_cases import CORRIDORS, HELD_OUT, LUCK, NONCE, TOY_TEXT, TabularEnv
from prover_bench.progress import mean_ci
from prover_bench.report_files import write_report
from prover_bench.tabular import Compiled, FloatArray, Sampler, compile_mdp, value_table
from prover_bench.training import policy_gradient, score_sum
from prover_core.config import ProverConfig
from prover_core.judges import AnchorJudge, ChoiceJudge


@dataclass(frozen=True)
class Arm:
    """How one arm credits a batch: GRPO (``judge=None``) or ProVer through :func:`methods.prover`."""

    short: str
    """The arm's column name in the tables."""
    judge: Literal["anchor", "choice"] | None = None
    k: int | None = None
    """Continuations per boundary (``None``: the settings' K)."""
    delta_of: Literal["states", "choices"] = "states"
    sampling: Literal["fixed", "adaptive"] = "fixed"
    data: bool = False
    """Continuations as data: each continuation's policy turns join the gradient (:class:`methods.Continuations`)."""
    matched_to: str | None = None
    """GRPO with this ProVer arm's measured extra policy turns as more group members."""


SPECS: dict[str, Arm] = {
    "GRPO": Arm("GRPO"),
    "ProVer, Delta of states": Arm("states", "anchor"),
    "ProVer, Delta of choices": Arm("choices", "anchor", delta_of="choices"),
    "ProVer, choice judge": Arm("choice judge", "choice"),
    "GRPO, budget-matched": Arm("matched", matched_to="ProVer, Delta of states"),
    "ProVer, choice judge, K=2": Arm("choice K=2", "choice", k=2),
    "GRPO, budget-matched to K=2": Arm("matched K=2", matched_to="ProVer, choice judge, K=2"),
    "ProVer, choice judge, continuations as data": Arm("data", "choice", data=True),
    "GRPO, budget-matched to data": Arm("matched data", matched_to="ProVer, choice judge, continuations as data"),
    "ProVer, choice judge, K=2, continuations as data": Arm("data K=2", "choice", k=2, data=True),
    "GRPO, budget-matched to K=2 data": Arm(
        "matched data K=2", matched_to="ProVer, choice judge, K=2, continuations as data"
    ),
    "ProVer, choice judge, adaptive": Arm("adaptive", "choice", sampling="adaptive"),
    "GRPO, budget-matched to adaptive": Arm("matched adaptive", matched_to="ProVer, choice judge, adaptive"),
    "ProVer, choice judge, K=4": Arm("choice K=4", "choice", k=4),
    "GRPO, budget-matched to K=4": Arm("matched K=4", matched_to="ProVer, choice judge, K=4"),
}
"""Every arm in run order (a budget-matched arm after the arm it is sized to)."""
ARMS = tuple(SPECS)
MATCHED = {name: arm.matched_to for name, arm in SPECS.items() if arm.matched_to is not None}
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
    spec = SPECS[arm]
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
            kept = None
            if spec.judge is None:
                credit = methods.grpo(batch)
            else:
                k = spec.k or settings.k
                config = ProverConfig(k=k, seed=seed * 100_003 + step, delta_of=spec.delta_of, sampling=spec.sampling)
                judge = ChoiceJudge() if spec.judge == "choice" else AnchorJudge()
                kept = methods.Continuations() if spec.data else None
                credit = methods.prover(batch, judge, Sampler(c, theta), config, kept=kept)
                spent += credit.policy_turns
                out.extra_turns += credit.policy_turns
            theta = theta + lr * _gradient(c, theta, batch, credit.per_turn, kept)
            success.append(float(value_table(c, theta)[c.horizon, c.initial]))
        out.success.append(success)
        out.env_steps.append(spent)
    return out


def _gradient(
    c: Compiled, theta: FloatArray, batch: Batch, per_turn: FloatArray, kept: methods.Continuations | None
) -> FloatArray:
    """The batch's policy gradient, with the kept continuations as more samples of the same weight:
    ``(sum over the batch's turns + sum over the continuations' policy turns) / (members + continuations)``."""
    if kept is None or not kept.records:
        return policy_gradient(c, theta, batch, per_turn)
    states, actions, adv, count = kept.samples()
    grad = policy_gradient(c, theta, batch, per_turn) * batch.n + score_sum(c, theta, states, actions, adv)
    out: FloatArray = grad / (batch.n + count)
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


def run_environment(name: str | TabularEnv, settings: DeltaSettings) -> dict[str, ArmResult]:
    """Every arm at its best lr on the environment called ``name`` (of :func:`environments`), or on ``name``
    itself when it is a :class:`TabularEnv`."""
    env = name if isinstance(name, TabularEnv) else next(e for e in environments() if e.name == name)
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


@dataclass(frozen=True)
class Table:
    """One pair of tables (per environment, per family): its arms, the paired differences ``(a, b)`` read
    ``a - b``, and the arms whose extra environment steps over GRPO it shows; arms by their short names."""

    arms: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    costly: tuple[str, ...]


_BY_SHORT = {spec.short: name for name, spec in SPECS.items()}
CREDIT = Table(
    ("GRPO", "states", "choices", "choice judge", "matched", "choice K=2", "matched K=2"),
    (
        ("choices", "states"),
        ("choice judge", "states"),
        ("states", "GRPO"),
        ("choices", "GRPO"),
        ("matched", "GRPO"),
        ("states", "matched"),
        ("choice K=2", "GRPO"),
        ("choice K=2", "matched K=2"),
    ),
    ("states",),
)
"""Which Delta, which judge, K = 2."""
COST = Table(
    (
        "GRPO",
        "choice judge",
        "choice K=2",
        "data",
        "matched data",
        "data K=2",
        "matched data K=2",
        "adaptive",
        "matched adaptive",
        "choice K=4",
        "matched K=4",
    ),
    tuple(
        (arm, other)
        for arm, matched, plain in (
            ("data", "matched data", "choice judge"),
            ("data K=2", "matched data K=2", "choice K=2"),
            ("adaptive", "matched adaptive", "choice judge"),
            ("choice K=4", "matched K=4", "choice judge"),
        )
        for other in (matched, plain, "GRPO")
    ),
    ("choice K=2", "data", "data K=2", "adaptive", "choice K=4"),
)
"""The cost levers: each against GRPO matched to its cost, the same arm without the lever, and GRPO."""


def markdown(results: dict[str, dict[str, ArmResult]], kinds: dict[str, str], settings: DeltaSettings) -> str:
    credit, cost = _tables(results, kinds, CREDIT), _tables(results, kinds, COST)
    edges = [n for n, arms in results.items() if any(r.edge for r in arms.values())]
    arm_edges = sum(r.edge for arms in results.values() for r in arms.values())
    lines = [
        *credit,
        "",
        f"Exact success V(s_0) averaged over {settings.steps} SGD steps ({settings.groups} groups x "
        f"{settings.group_size} per step, K = {settings.k}), each arm at its best lr of "
        f"{', '.join(f'{lr:g}' for lr in settings.lrs)} (widened 3x once at an edge); {settings.seeds} paired seeds, "
        "95% Student-t intervals of the paired differences. states / choices: ProVer with the anchor judge and "
        "Delta of states (the paper) / of choices; choice judge: ProVer with ChoiceJudge, Delta of states; "
        "matched: GRPO with ProVer's (states) measured extra turns as more group members; choice K=2: the choice judge "
        "with K = 2, and GRPO matched to its cost. extra env steps: "
        "ProVer (states) over GRPO.",
        "",
        "### Cost levers: continuations as data and adaptive K",
        "",
        *cost,
        "",
        "data / data K=2: the choice judge at K = 8 / 2 with every continuation also a training sample (leave-one-out "
        "advantage at its boundary); adaptive: the choice judge with sampling='adaptive'; choice K=4: the choice judge "
        "at K = 4 (half the paper's, from the harness's K sweep); each matched arm: GRPO with "
        "that arm's measured extra turns as more group members. extra env steps: each arm over GRPO.",
        "",
        (
            f"Best lr still on the edge of its widened grid (*) for {arm_edges} of {len(results) * len(ARMS)} "
            f"(environment, arm) pairs, in {len(edges)} of {len(results)} environments ({'; '.join(edges)}): "
            "there a larger step would still help, and the comparison is at the grid's best."
            if edges
            else "No best lr is on its grid's edge."
        ),
    ]
    return "\n".join(lines)


def _tables(results: dict[str, dict[str, ArmResult]], kinds: dict[str, str], table: Table) -> list[str]:
    """A per-environment table (each arm's mean, the paired differences, extra env steps, best lrs) and a
    per-family one (paired differences of the per-seed family means)."""
    arms = [_BY_SHORT[a] for a in table.arms]
    pairs = [(_BY_SHORT[a], _BY_SHORT[b]) for a, b in table.pairs]
    costly = [_BY_SHORT[a] for a in table.costly]
    labels = [f"{a} - {b}" for a, b in table.pairs]
    columns = ["environment", "family", "start", *table.arms, *labels]
    columns += [f"extra env steps ({' / '.join(table.costly)})", "best lr (" + " / ".join(table.arms) + ")"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    pooled: dict[str, dict[str, list[list[float]]]] = {}
    for name, by_arm in results.items():
        auc = {a: by_arm[a].curve.auc() for a in arms}
        for a in arms:
            pooled.setdefault(kinds[name], {}).setdefault(a, []).append(auc[a])
        grpo_steps = np.mean(by_arm[ARMS[0]].curve.env_steps)
        extra = " / ".join(f"{100 * (np.mean(by_arm[a].curve.env_steps) / grpo_steps - 1):+.0f}%" for a in costly)
        lrs = " / ".join(f"{by_arm[a].lr:g}{'*' if by_arm[a].edge else ''}" for a in arms)
        cells = [name, kinds[name], f"{by_arm[ARMS[0]].curve.success[0][0]:.3f}"]
        cells += [f"{np.mean(auc[a]):.3f}" for a in arms]
        cells += [_diff(auc[a], auc[b]) for a, b in pairs] + [extra, lrs]
        lines.append("| " + " | ".join(cells) + " |")
    family_columns = ["family", "environments", *labels]
    lines += ["", "| " + " | ".join(family_columns) + " |", "|" + "---|" * len(family_columns)]
    for kind, family in pooled.items():
        per_seed = {a: list(np.mean(np.array(v), axis=0)) for a, v in family.items()}
        cells = [kind, str(len(family[arms[0]])), *(_diff(per_seed[a], per_seed[b]) for a, b in pairs)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def delta_command(quick: bool, out: str, groups: int | None = None) -> int:
    """``prover bench --only delta``: print the tables, write ``delta.md`` and ``delta.json`` to ``out``."""
    import dataclasses
    import os
    import sys
    import time

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
    payload = {
        env: {arm: {"lr": r.lr, "edge": r.edge, "tried": r.tried, "success": r.curve.success} for arm, r in by.items()}
        for env, by in results.items()
    }
    write_report(out, "delta.md", text, "delta.json", payload)
    return 0
