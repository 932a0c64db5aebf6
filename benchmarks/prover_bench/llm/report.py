"""The LLM-shaped benchmark's report: self-checks first, then the paired table and the lr sweep (numpy only).

Runs are any objects with the fields of ``train.LLMRun`` (``arm``, ``seed``, ``lr``, ``group_size``,
``success``, ``env_steps``, ``policy_tokens``, ``logs``, ``at``, ``extra_share``, ``extra_token_share``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from prover_bench.neural_report import paired_difference
from prover_bench.progress import mean_ci
from prover_bench.tables import markdown_table

Runs = Mapping[str, Mapping[float, Sequence[Any]]]
BASE, MATCHED = "GRPO", "GRPO budget-matched"


def best_lr(by_lr: Mapping[float, Sequence[Any]]) -> float:
    """The lr with the highest mean final held-out success (ties to the smallest lr)."""
    return max(sorted(by_lr), key=lambda lr: float(np.mean([r.success[-1] for r in by_lr[lr]])))


def edge(by_lr: Mapping[float, Sequence[Any]]) -> str | None:
    """``"lowest"`` / ``"highest"`` when the best lr is on that edge of a grid of 2 or more, else ``None``."""
    lrs = sorted(by_lr)
    if len(lrs) < 2:
        return "only one lr"
    best = best_lr(by_lr)
    return "lowest" if best == lrs[0] else "highest" if best == lrs[-1] else None


def _by_seed(runs: Sequence[Any]) -> list[Any]:
    return sorted(runs, key=lambda r: r.seed)


def format_pm(v: tuple[float, float]) -> str:
    return f"{v[0]:+.3f} ± {v[1]:.3f}"


def format_ci(v: tuple[float, float]) -> str:
    return f"{v[0]:.3f} ± {v[1]:.3f}"


def checks(runs: Runs) -> list[str]:
    """The self-checks, most important first (see docs/benchmarks.md, "LLM-shaped benchmark: design")."""
    lines = []
    if BASE in runs and MATCHED in runs:
        verdicts = []
        for lr in sorted(runs[BASE]):
            if lr not in runs[MATCHED]:
                continue
            x = [r.success[-1] for r in _by_seed(runs[MATCHED][lr])]
            y = [r.success[-1] for r in _by_seed(runs[BASE][lr])]
            d = paired_difference(x, y)
            verdicts.append((lr, d, runs[MATCHED][lr][0].group_size))
        helps = [v for v in verdicts if v[1][0] - v[1][1] > 0]
        detail = "; ".join(f"lr {lr:g}: G={g}, {format_pm(d)}" for lr, d, g in verdicts)
        if not helps:
            lines.append(
                "**This regime cannot show credit assignment**: budget-matched GRPO (more group members at equal "
                f"optimizer steps) is not above GRPO at any lr (paired difference of final held-out success, 95% CI: "
                f"{detail}). More samples per step buy nothing measurable here, so better credit cannot either."
            )
        else:
            lines.append(
                f"More samples help at equal optimizer steps (budget-matched GRPO minus GRPO, paired: {detail}): "
                "the regime can show better gradients."
            )
    for name, by_lr in runs.items():
        where = edge(by_lr)
        if where == "only one lr":
            lines.append(f"{name}: one lr only ({next(iter(by_lr)):g}); no lr check.")
        elif where is not None:
            lines.append(
                f"{name}: best lr {best_lr(by_lr):g} is the {where} of the grid {sorted(by_lr)} (after any widening "
                "this run did): its figures are lower bounds."
            )
    return lines


def headline(runs: Runs) -> str:
    """Each arm at its best lr against GRPO at its best lr: per step, at equal env steps, at equal tokens."""
    base = _by_seed(runs[BASE][best_lr(runs[BASE])])
    y = [r.success[-1] for r in base]
    env_budget = [r.env_steps[-1] for r in base]
    tok_budget = [r.policy_tokens[-1] for r in base]
    header = [
        "arm", "best lr", "G", "held-out success (step budget)", "minus GRPO, paired", "at GRPO's env steps",
        "minus GRPO", "at GRPO's policy tokens", "minus GRPO", "extra env steps", "extra policy tokens",
        "extra tokens / step", "accepted / verified", "accepted on the pivot",
    ]  # fmt: skip
    body = []
    for name, by_lr in runs.items():
        lr = best_lr(by_lr)
        rs = _by_seed(by_lr[lr])
        if [r.seed for r in rs] != [r.seed for r in base]:
            continue
        x = [r.success[-1] for r in rs]
        eq = [r.at(b, "env") for r, b in zip(rs, env_budget, strict=True)]
        et = [r.at(b, "tokens") for r, b in zip(rs, tok_budget, strict=True)]
        verified = sum(x.verified for r in rs for x in r.logs)
        accepted = sum(x.accepted for r in rs for x in r.logs)
        on_pivot = sum(x.accepted_on_pivot for r in rs for x in r.logs)
        per_step = float(np.mean([x.extra_tokens for r in rs for x in r.logs]))
        body.append(
            [
                name, f"{lr:g}", str(rs[0].group_size), format_ci(mean_ci(x)), format_pm(paired_difference(x, y)),
                format_ci(mean_ci(eq)), format_pm(paired_difference(eq, y)), format_ci(mean_ci(et)),
                format_pm(paired_difference(et, y)),
                f"{100 * np.mean([r.extra_share() for r in rs]):.1f}%",
                f"{100 * np.mean([r.extra_token_share() for r in rs]):.1f}%", f"{per_step:.0f}",
                f"{accepted} / {verified}" if verified else "—",
                f"{100 * on_pivot / accepted:.0f}%" if accepted else "—",
            ]
        )  # fmt: skip
    return markdown_table(header, body)


def extra_credit(runs: Runs) -> list[str]:
    """What negative credit debited and how many continuations were trained on, per arm at its best lr."""
    lines = []
    for name, by_lr in runs.items():
        lr = best_lr(by_lr)
        logs = [x for r in by_lr[lr] for x in r.logs]
        debited = sum(getattr(x, "debited", 0) for x in logs)
        on_mistake = sum(getattr(x, "debited_on_mistake", 0) for x in logs)
        rows = sum(getattr(x, "data_rows", 0) for x in logs)
        if debited:
            lines.append(
                f"{name} (lr {lr:g}): {debited} failed runs debited in {len(logs)} steps, {on_mistake} "
                f"({100 * on_mistake / debited:.0f}%) on a decision that made success impossible."
            )
        if rows:
            lines.append(
                f"{name} (lr {lr:g}): {rows} continuations trained on in {len(logs)} steps "
                f"({rows / len(logs):.1f} per step, next to the step's group samples)."
            )
    return lines


def sweep(runs: Runs) -> str:
    """Final held-out success (mean ± 95% CI over seeds) of every arm at every lr."""
    lrs = sorted({lr for by_lr in runs.values() for lr in by_lr})
    header = ["arm", *(f"lr {lr:g}" for lr in lrs), "G per lr"]
    body = []
    for name, by_lr in runs.items():
        best = best_lr(by_lr)
        cells = [
            format_ci(mean_ci([r.success[-1] for r in by_lr[lr]])) + (" *" if lr == best else "")
            if lr in by_lr
            else "—"
            for lr in lrs
        ]
        body.append([name, *cells, ", ".join(str(by_lr[lr][0].group_size) for lr in sorted(by_lr))])
    return markdown_table(header, body)


def curves(runs: Runs) -> str:
    """Held-out success at each evaluation step (mean over seeds) at each arm's best lr."""
    any_run = next(iter(next(iter(runs.values())).values()))[0]
    header = ["arm", *(f"step {s}" for s in any_run.eval_steps), "env steps at the end", "policy tokens at the end"]
    body = []
    for name, by_lr in runs.items():
        rs = by_lr[best_lr(by_lr)]
        means = np.mean([r.success for r in rs], axis=0)
        body.append(
            [name, *(f"{m:.3f}" for m in means), f"{np.mean([r.env_steps[-1] for r in rs]):.0f}",
             f"{np.mean([r.policy_tokens[-1] for r in rs]):.0f}"]
        )  # fmt: skip
    return markdown_table(header, body)


def markdown(runs: Runs, title: str, start: Sequence[float], minutes: float) -> str:
    lines = [f"## {title}", "", *(f"- {c}" for c in checks(runs)), ""]
    notes = [f"- {line}" for line in extra_credit(runs)]
    lines += [
        f"Start (behaviour cloning, held-out success per seed): {', '.join(f'{s:.3f}' for s in start)} "
        f"(mean {np.mean(start):.3f}). Wall time {minutes:.1f} min.",
        "",
        "Each arm at its best lr against GRPO at its best lr (paired by seed; mean ± 95% CI over seeds):",
        "",
        headline(runs),
        "",
        *notes,
        *([""] if notes else []),
        "Held-out success by step (mean over seeds, best lr):",
        "",
        curves(runs),
        "",
        "lr sweep (final held-out success; * = best lr):",
        "",
        sweep(runs),
    ]
    return "\n".join(lines)


LEARN_MARGIN = 0.05
"""The regime check's learning margin: GRPO's held-out success must rise by more than this (lower 95% bound)."""


def regime_check(
    runs: Runs, base: str = BASE, matched: str = MATCHED, margin: float = LEARN_MARGIN, min_lrs: int = 3
) -> tuple[bool, list[str]]:
    """The regime check of ``benchmarks/llm_regime.py``: ``(passed, lines)``, the first line ``regime check: pass``
    or ``regime check: fail (...)``, then the figures behind it. Runs carry ``success`` with the start first.

    It passes when all of these hold: (1) *GRPO learns*: at GRPO's best lr, final held-out success minus the
    start, paired over seeds, has its lower 95% bound above ``margin``; (2) *more samples help*: budget-matched
    GRPO at its best lr minus GRPO at its best lr, paired over seeds, has its lower 95% bound above 0; (3) *best
    lrs interior*: both best lrs lie strictly inside a grid of at least ``min_lrs`` lrs (an edge means the grid
    must be widened; the check fails until it is).
    """
    reasons, lines = [], []
    for name in (base, matched):
        if name not in runs or not runs[name]:
            return False, [f"regime check: fail (no {name} runs)"]
    b_lr, m_lr = best_lr(runs[base]), best_lr(runs[matched])
    b_runs, m_runs = _by_seed(runs[base][b_lr]), _by_seed(runs[matched][m_lr])
    if [r.seed for r in b_runs] != [r.seed for r in m_runs]:
        return False, ["regime check: fail (the two arms' seeds differ: no pairing)"]
    gain = mean_ci([r.success[-1] - r.success[0] for r in b_runs])
    learns = gain[0] - gain[1] > margin
    lines.append(
        f"GRPO learns: {'yes' if learns else 'no'}. At its best lr {b_lr:g} (G={b_runs[0].group_size}), held-out "
        f"success {np.mean([r.success[0] for r in b_runs]):.3f} at the start -> "
        f"{np.mean([r.success[-1] for r in b_runs]):.3f} at step {b_runs[0].eval_steps[-1]}; final minus start, "
        f"paired over {len(b_runs)} seeds: {format_pm(gain)} (lower bound {gain[0] - gain[1]:+.3f}; needs > "
        f"{margin:+.3f})."
    )
    if not learns:
        reasons.append("GRPO does not learn")
    diff = paired_difference([r.success[-1] for r in m_runs], [r.success[-1] for r in b_runs])
    helps = diff[0] - diff[1] > 0
    lines.append(
        f"More samples help: {'yes' if helps else 'no'}. Budget-matched GRPO (G={m_runs[0].group_size}) at its best lr "
        f"{m_lr:g} minus GRPO at its best lr {b_lr:g}, final held-out success paired over {len(b_runs)} seeds: "
        f"{format_pm(diff)} (lower bound {diff[0] - diff[1]:+.3f}; needs > 0)."
    )
    if not helps:
        reasons.append("budget-matched GRPO not above GRPO")
    interior = []
    for name, lr in ((base, b_lr), (matched, m_lr)):
        grid = sorted(runs[name])
        where = "too few lrs" if len(grid) < min_lrs else edge(runs[name])
        interior.append(where is None)
        lines.append(
            f"{name}: best lr {lr:g} of the grid [{', '.join(f'{x:g}' for x in grid)}]: "
            + ("interior." if where is None else f"not interior ({where}).")
        )
    if not all(interior):
        reasons.append("a best lr on the grid's edge")
    per_lr = []
    for lr in sorted(set(runs[base]) & set(runs[matched])):
        d = paired_difference(
            [r.success[-1] for r in _by_seed(runs[matched][lr])], [r.success[-1] for r in _by_seed(runs[base][lr])]
        )
        per_lr.append(f"lr {lr:g}: {format_pm(d)}")
    lines.append("Budget-matched minus GRPO at each lr (paired): " + "; ".join(per_lr) + ".")
    verdict = "regime check: pass" if not reasons else f"regime check: fail ({'; '.join(reasons)})"
    return not reasons, [verdict, *lines]


def fixed_lr_check(
    runs: Runs, lr: float, base: str = BASE, matched: str = MATCHED, margin: float = LEARN_MARGIN
) -> tuple[bool, list[str]]:
    """The ranking's stage 1 (issue 42), every arm at one shared ``lr``: ``(passed, lines)``, the first line
    ``regime check (fixed lr): pass`` or ``... fail (...)``. It passes when (1) GRPO learns: final held-out success
    minus the start, paired over seeds, has its lower 95% bound above ``margin``; and (2) budget-matched GRPO minus
    GRPO, final held-out success at the same ``lr`` paired over seeds, has its lower 95% bound above 0."""
    b_runs, m_runs = _by_seed(runs.get(base, {}).get(lr, ())), _by_seed(runs.get(matched, {}).get(lr, ()))
    if not b_runs or not m_runs:
        return False, [f"regime check (fixed lr): fail (no runs of both arms at lr {lr:g})"]
    if [r.seed for r in b_runs] != [r.seed for r in m_runs]:
        return False, ["regime check (fixed lr): fail (the two arms' seeds differ: no pairing)"]
    gain = mean_ci([r.success[-1] - r.success[0] for r in b_runs])
    diff = paired_difference([r.success[-1] for r in m_runs], [r.success[-1] for r in b_runs])
    learns, helps = gain[0] - gain[1] > margin, diff[0] - diff[1] > 0
    reasons = [why for ok, why in ((learns, "GRPO does not learn"), (helps, "budget-matched GRPO not above GRPO"))
               if not ok]  # fmt: skip
    verdict = "regime check (fixed lr): " + ("pass" if not reasons else f"fail ({'; '.join(reasons)})")
    return not reasons, [
        verdict,
        f"GRPO learns: {'yes' if learns else 'no'}. At lr {lr:g} (G={b_runs[0].group_size}), held-out success "
        f"{np.mean([r.success[0] for r in b_runs]):.3f} at the start -> {np.mean([r.success[-1] for r in b_runs]):.3f}"
        f" at step {b_runs[0].eval_steps[-1]}; final minus start, paired over {len(b_runs)} seeds: {format_pm(gain)} "
        f"(lower bound {gain[0] - gain[1]:+.3f}; needs > {margin:+.3f}).",
        f"More samples help: {'yes' if helps else 'no'}. Budget-matched GRPO (G={m_runs[0].group_size}) minus GRPO at "
        f"the same lr {lr:g}, final held-out success paired over {len(b_runs)} seeds: {format_pm(diff)} (lower bound "
        f"{diff[0] - diff[1]:+.3f}; needs > 0).",
    ]


def wall(run: Any) -> list[float]:
    """Seconds of training (rollouts, credit, update; not the evaluations) spent by each evaluation step."""
    cumulative = np.cumsum([0.0] + [x.seconds for x in run.logs])
    return [float(cumulative[s]) for s in run.eval_steps]


def success_at(run: Any, budget: float, by: str) -> float:
    """Held-out success once ``budget`` policy tokens (``by="tokens"``) or training seconds (``"time"``) are spent,
    interpolated linearly between evaluations (past the run's last evaluation: its last figure)."""
    xs = run.policy_tokens if by == "tokens" else wall(run)
    return float(np.interp(budget, xs, run.success))


def paired_at(x: Sequence[Any], y: Sequence[Any], by: str) -> tuple[float, float]:
    """``x`` minus ``y`` (runs paired by seed, in the same order), each pair compared at the smaller of its two
    final budgets (``"tokens"`` or ``"time"``); mean ± 95% CI half-width over the pairs."""
    diffs = []
    for a, b in zip(x, y, strict=True):
        if a.seed != b.seed:
            raise ValueError(f"unpaired runs: seed {a.seed} against seed {b.seed}")
        budget = min(a.policy_tokens[-1], b.policy_tokens[-1]) if by == "tokens" else min(wall(a)[-1], wall(b)[-1])
        diffs.append(success_at(a, budget, by) - success_at(b, budget, by))
    return mean_ci(diffs)


def rank_verdict(diff: tuple[float, float]) -> str:
    """The ranking's pre-registered verdict (issue 42) from a ProVer arm minus budget-matched GRPO at equal policy
    tokens (mean, 95% half-width): ``pays`` when the whole interval is above 0, ``loses`` when below, else ``ties at
    this size``."""
    low, high = diff[0] - diff[1], diff[0] + diff[1]
    return "pays" if low > 0 else "loses" if high < 0 else "ties at this size"
