"""Markdown tables of the three benchmarks."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from prover_bench.overhead import Timing, linear_fit
from prover_bench.training import Curve


def _fmt(value: float, digits: int = 3, pct: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{100 * value:.1f}%" if pct else f"{value:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def accuracy_table(results: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """One row per (environment, method)."""
    header = [
        "env", "method", "localisation", "singled out", "turns", "acceptance", "MAE", "MAE pivotal", "corr",
        "continuations / batch", "extra turns", "accepted Δ (exact)",
    ]  # fmt: skip
    rows = []
    for env, methods in results.items():
        for name, r in methods.items():
            delta = "—" if math.isnan(r["delta"]) else f"{r['delta']:+.3f} ({r['exact']:+.3f})"
            rows.append(
                [
                    env,
                    name,
                    _fmt(r["localisation"], pct=True),
                    _fmt(r["singled_out"], pct=True),
                    _fmt(r["focus_turns"], 2),
                    _fmt(r["acceptance"], pct=True),
                    _fmt(r["mae"]),
                    _fmt(r["mae_pivotal"]),
                    _fmt(r["corr"], 2),
                    f"{r['continuations']:.0f}",
                    _fmt(r["extra_share"], pct=True),
                    delta,
                ]
            )
    return markdown_table(header, rows)


def training_table(results: Mapping[str, Sequence[Curve]]) -> str:
    """Final and mean success (95% CI over seeds), success at equal environment steps, the gain over GRPO.

    The equal budget is the smallest final environment-step count among the methods (GRPO's, usually).
    """
    header = [
        "env", "method", "seeds", "final success", "mean success over steps", "vs GRPO (mean)", "env steps",
        "success at equal env steps",
    ]  # fmt: skip
    rows = []
    for env, curves in results.items():
        base = curves[0].average()[0]
        budget = min(cv.env_steps[-1] for cv in curves)
        for cv in curves:
            final, avg, equal = cv.final(), cv.average(), cv.at_env_steps(budget)
            gain = f"{100 * (avg[0] / base - 1):+.1f}%" if base > 0 else "—"
            rows.append(
                [
                    env,
                    cv.label,
                    str(len(cv.runs)),
                    f"{final[0]:.3f} ± {final[1]:.3f}",
                    f"{avg[0]:.3f} ± {avg[1]:.3f}",
                    gain,
                    f"{cv.env_steps[-1]:,.0f}",
                    f"{equal[0]:.3f} ± {equal[1]:.3f} (at {budget:,.0f})",
                ]
            )
    return markdown_table(header, rows)


def overhead_table(timings: Sequence[Timing]) -> str:
    header = [
        "B", "T", "build Trajectory", "GRPO (library)", "GRPO (numpy)", "compute_bonus", "acompute_bonus",
        "bonus_matrix", "compute_bonus / GRPO", "acompute_bonus / GRPO", "µs per turn (async)", "hook calls",
    ]  # fmt: skip
    rows = [
        [
            str(t.batch_size),
            str(t.turns),
            f"{1e3 * t.build:.2f} ms",
            f"{1e3 * t.grpo:.3f} ms",
            f"{1e6 * t.grpo_numpy:.1f} µs",
            f"{1e3 * t.bonus:.2f} ms",
            f"{1e3 * t.bonus_async:.2f} ms",
            f"{1e3 * t.token_matrix:.2f} ms",
            f"{t.ratio:.0f}x",
            f"{t.bonus_async / t.grpo:.0f}x",
            f"{t.per_turn_us:.2f}",
            str(t.hook_calls),
        ]
        for t in timings
    ]
    return markdown_table(header, rows)


def scaling_lines(timings: Mapping[str, Sequence[Timing]]) -> str:
    """Linear fits of the async time against B (fixed T) and T (fixed B)."""
    out = []
    for kind, xs in (
        ("batch", [t.batch_size for t in timings["batch"]]),
        ("length", [t.turns for t in timings["length"]]),
    ):
        ts = timings[kind]
        if len(ts) < 2:
            continue
        a, b, r2 = linear_fit(xs, [t.bonus_async for t in ts])
        a2, b2, r22 = linear_fit(xs, [t.bonus for t in ts])
        unit = "trajectory" if kind == "batch" else "turn of every trajectory"
        out.append(
            f"- acompute_bonus vs {kind}: {1e3 * a:.2f} ms + {1e3 * b:.3f} ms per {unit} (R² = {r2:.3f}); "
            f"compute_bonus: {1e3 * a2:.2f} ms + {1e3 * b2:.3f} ms per {unit} (R² = {r22:.3f})"
        )
    return "\n".join(out)
