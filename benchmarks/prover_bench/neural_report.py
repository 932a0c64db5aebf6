"""The neural miniature's tables: paired three-way ratios, the lr sweep, cost by phase, exact pairing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from prover_bench import coupling
from prover_bench import family as F
from prover_bench.free_samples import start_bias
from prover_bench.neural import NeuralRun
from prover_bench.progress import mean_ci
from prover_bench.tables import markdown_table

Runs = Mapping[str, Mapping[float, Sequence[NeuralRun]]]


def paired_difference(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Mean and 95% half-width of ``x_s - y_s`` over paired seeds ``s``."""
    if len(x) != len(y):
        raise ValueError("paired samples need equal lengths")
    return mean_ci([a - b for a, b in zip(x, y, strict=True)])


def paired_ratio(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Mean and 95% half-width of ``x_s / y_s - 1`` over paired seeds (a relative gain)."""
    if len(x) != len(y):
        raise ValueError("paired samples need equal lengths")
    return mean_ci([a / b - 1.0 for a, b in zip(x, y, strict=True)])


def best_lr(by_lr: Mapping[float, Sequence[NeuralRun]]) -> float:
    """The lr with the highest mean final held-out success (ties to the smallest lr)."""
    return max(sorted(by_lr), key=lambda lr: float(np.mean([r.success[-1] for r in by_lr[lr]])))


@dataclass
class Row:
    method: str
    lr: float
    group_size: int
    final: tuple[float, float]
    ratio: tuple[float, float]
    diff: tuple[float, float]
    equal: tuple[float, float]
    equal_ratio: tuple[float, float]
    equal_diff: tuple[float, float]
    extra: float
    phases: tuple[float, float, float]
    accepted: int
    verified: int
    harmless: int


def rows(runs: Runs, baseline: str = "GRPO") -> list[Row]:
    """Each method at its best lr against GRPO at its best lr, paired by seed.

    "Equal environment steps" evaluates every method once it has spent GRPO's final environment
    steps of the same seed (rollout turns plus continuation turns).
    """
    base = runs[baseline][best_lr(runs[baseline])]
    y = [r.success[-1] for r in base]
    budgets = [r.env_steps[-1] for r in base]
    out = []
    for name, by_lr in runs.items():
        lr = best_lr(by_lr)
        rs = by_lr[lr]
        x = [r.success[-1] for r in rs]
        eq = [r.at_env_steps(b) for r, b in zip(rs, budgets, strict=True)]
        steps = len(rs[0].logs)
        cuts = [0, steps // 3, 2 * steps // 3, steps]
        phases = tuple(float(np.mean([r.extra_share(cuts[i], cuts[i + 1]) for r in rs])) for i in range(3))
        out.append(
            Row(
                name,
                lr,
                rs[0].group_size,
                mean_ci(x),
                paired_ratio(x, y),
                paired_difference(x, y),
                mean_ci(eq),
                paired_ratio(eq, y),
                paired_difference(eq, y),
                float(np.mean([r.extra_share() for r in rs])),
                (phases[0], phases[1], phases[2]),
                sum(sum(x.accepted for x in r.logs) for r in rs),
                sum(sum(x.verified for x in r.logs) for r in rs),
                sum(sum(x.harmless_accepted for x in r.logs) for r in rs),
            )
        )
    return out


def _pm(v: tuple[float, float], pct: bool = False) -> str:
    return f"{100 * v[0]:+.1f}% ± {100 * v[1]:.1f}" if pct else f"{v[0]:.3f} ± {v[1]:.3f}"


def headline_table(table: Sequence[Row]) -> str:
    header = [
        "method", "best lr", "G", "held-out success at the step budget", "vs GRPO (paired ratio)",
        "paired difference", "at GRPO's env steps", "vs GRPO", "paired difference", "extra env steps",
        "early / mid / late", "accepted / verified", "accepted with exact effect <= 0.02",
    ]  # fmt: skip
    body = [
        [
            r.method,
            f"{r.lr:g}",
            str(r.group_size),
            _pm(r.final),
            _pm(r.ratio, pct=True),
            f"{r.diff[0]:+.4f} ± {r.diff[1]:.4f}",
            _pm(r.equal),
            _pm(r.equal_ratio, pct=True),
            f"{r.equal_diff[0]:+.4f} ± {r.equal_diff[1]:.4f}",
            f"{100 * r.extra:.1f}%",
            " / ".join(f"{100 * p:.1f}%" for p in r.phases),
            f"{r.accepted} / {r.verified}" if r.verified else "—",
            f"{100 * r.harmless / r.accepted:.1f}%" if r.accepted else "—",
        ]
        for r in table
    ]
    return markdown_table(header, body)


def sweep_table(runs: Runs) -> str:
    """Final held-out success (mean ± 95% CI over seeds) of every method at every lr."""
    lrs = sorted(next(iter(runs.values())))
    header = ["method", *(f"lr {lr:g}" for lr in lrs), "mean over steps at best lr"]
    body = []
    for name, by_lr in runs.items():
        best = best_lr(by_lr)
        body.append(
            [name]
            + [_pm(mean_ci([r.success[-1] for r in by_lr[lr]])) + (" *" if lr == best else "") for lr in lrs]
            + [_pm(mean_ci([float(np.mean(r.success[1:])) for r in by_lr[best]]))]
        )
    return markdown_table(header, body)


PAIRING_CASES = {
    "wait at turn 0 (harmless, state unchanged)": ((0, 0), (0, 1)),
    "go east at turn 0 (what the policy does anyway)": ((0, 0), (8, 1)),
    "take the item in room 2 (pivotal)": ((16, 2), (17, 3)),
    "take the decoy in room 3 (harmless)": ((25, 3), (29, 4)),
}


def pairing_task() -> F.Family:
    """The task of the exact pairing table: 6 rooms, the item in room 2, the decoy in room 3, slip 0.2, 10 turns."""
    return F.build(np.array([6]), np.array([[2, -1]]), np.array([3]), np.array([0.2]), np.array([10]))


def pairing_table(k: int = 8) -> str:
    """Exact ``E[Delta]``, ``Var(Delta)`` and false credit per coupling, at the initial policy."""
    fam = pairing_task()
    pi = F.policy(fam, F.initial_weights())
    header = ["segment", "exact effect", "coupling", "Var(Delta)", "P(accept)", "E[Delta 1{accept}]"]
    body = []
    for name, (pre, post) in PAIRING_CASES.items():
        for cp in ("independent", "sequential", "turn"):
            law = coupling.pair_law(fam, pi, 0, pre, post, cp)
            mean, var = coupling.delta_moments(law, k)
            acc, bonus = coupling.acceptance(law, k)
            body.append([name, f"{mean:+.4f}", cp, f"{var:.5f}", f"{acc:.3f}", f"{bonus:.4f}"])
    return markdown_table(header, body)


def free_sample_table(group_size: int = 8) -> str:
    """The exact bias of free samples at ``s_0`` (:func:`start_bias`)."""
    ps = (0.05, 0.1, 0.2, 0.3, 0.5)
    header = ["p = V(s_0)", *(f"{p:g}" for p in ps)]
    body = [[f"E[free mean given trigger] - p (G = {group_size})", *(f"{start_bias(p, group_size):+.3f}" for p in ps)]]
    return markdown_table(header, body)


def markdown(
    runs: Runs,
    sizes: Mapping[float, int],
    steps: int,
    seeds: int,
    free_bias: Mapping[str, tuple[float, float, float]] | None = None,
) -> str:
    table = rows(runs)
    by = {r.method: r for r in table}
    lines = [
        f"## Neural miniature ({steps} optimizer steps, {seeds} paired seeds, 16 tasks x 8 per step, Adam)",
        "",
        "Paired three-way table: each method at its best lr against GRPO at its best lr (95% CIs over seeds).",
        "",
        headline_table(table),
        "",
        "lr sweep (final held-out success; * = best lr):",
        "",
        sweep_table(runs),
        "",
        "Budget-matched GRPO group size per lr: " + ", ".join(f"lr {lr:g}: G={g}" for lr, g in sizes.items()),
    ]
    if "ProVer, rule judge" in by and "GRPO budget-matched" in by:
        p, m = by["ProVer, rule judge"], by["GRPO budget-matched"]
        lines += [
            "",
            f"Three-way at the step budget: ProVer/GRPO {_pm(p.ratio, True)}, budget-matched/GRPO "
            f"{_pm(m.ratio, True)}; at equal environment steps: ProVer/GRPO {_pm(p.equal_ratio, True)}, "
            f"budget-matched/GRPO {_pm(m.equal_ratio, True)}.",
        ]
    lines += [
        "",
        "Exact pairing (one pre and one post continuation per pair, K = 8, initial policy, task of `pairing_task()`):",
        "",
        pairing_table(),
        "",
        "Free samples at the first state (exact):",
        "",
        free_sample_table(),
    ]
    if free_bias:
        lines += [
            "",
            "Free samples at the rule judge's boundaries (initial policy, training tasks; mean of R_j - V(s_b) over "
            "the members that reached s_b, against exact V): "
            + "; ".join(
                f"{side} {mean:+.3f} ± {hw:.3f} ({per:.2f} free samples per verification)"
                for side, (mean, hw, per) in free_bias.items()
            ),
        ]
    return "\n".join(lines)
