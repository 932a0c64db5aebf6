"""Can targeted credit move learning at all? A regime built from the method's own preconditions (issue 51).

    python benchmarks/llm_ceiling.py --calibrate [--workers 2]     # the shared lr and the token-matched share
    python benchmarks/llm_ceiling.py [--workers 2]                 # the run: resumes from the committed seeds
    python benchmarks/llm_ceiling.py --report-only                 # the report of the seeds finished so far
    python benchmarks/llm_ceiling.py --smoke                       # a tiny run of the whole path (a test)

The ranking at the paper's protocol (``llm_regime.py --rank R12``) found that nothing pays there, not even an oracle
judge, and why: the credit was about 0.2% of the update, the trigger band emptied as the policy learned, and in R12
the credited action (``take`` in the goal room) is the mistake in the later key rooms (a *keep*), where learning is
after step 10. This script asks the ceiling question first: where the pivot is the only decision that matters and
the groups stay inside the trigger band, does credit on the pivot, even from an oracle, move learning? It reuses the
LLM-shaped benchmark whole (``prover_bench.llm``) and the ranking's machinery (``llm_regime.py``: BC starts, the
worker pool, the per-seed files).

Design (pre-registered 2026-12-06, written before this script's first training step; later changes are appended
below as dated notes, never edited in place)
-----------------------------------------------------------------------------------------------------------------

**Regime C1** (:data:`C1`): the task variant ``last`` (``tasks.VARIANTS``): the ``marked`` observation (the goal key's
room shows ``goal``) and the goal key always in the *last* key room, so the three earlier key rooms are harmless
distractors (a key taken there is replaced by the goal key) and there is no keep: taking the goal key is the one
decision that matters. The start: 1000 BC steps on an expert of skill :data:`SKILL` = 0.35 (it takes the goal key
with probability 0.35, any other key with 0.65), chosen so that held-out success starts near 0.3, inside the trigger
band (at G = 4 the band (0, 0.5) is exactly one success in four, P = 0.41 at p = 0.3). Adam, 4 tasks per step,
G = 4, 20 steps, held-out evaluation every 5 steps on 128 tasks x 2 (the ranking's sizes).

**Stage 0, calibration** (``--calibrate``, seeds 300-303, never used for a verdict): GRPO (G = 4) at the Adam lrs
{1e-4, 3e-4, 1e-3}; the shared lr is the one with the highest mean step-20 held-out success (ties to the smaller).
Then the library default (choice judge, K = 4) at that lr on the same seeds: its extra policy tokens over the
rollout's, ``e``, sets the token-matched arm's extra group members per step, ``16 e`` (4 tasks x G = 4).
Its start success must lie in [0.2, 0.4]; if not, :data:`SKILL` changes once, with a dated note, before the run.
The lr and ``16 e`` are written into :data:`SHARED_LR` and :data:`MATCHED_EXTRA` with a dated note, before the
first result file.

**Seeds**: 400-447 (48 paired seeds, none used before). One job per seed: its BC start, then every arm in turn,
written by the worker to ``benchmarks/results/llm-ceiling/C1-seed<seed>.json`` when done; a rerun skips the files
there, so a stopped run resumes where it stopped. Then R12's part, one job per seed of the ranking's 32-79.

**Arms in C1** (every arm at the shared lr; every ProVer arm logs ``prover/credit_share`` and
``prover/trigger_share`` per step and trains a GRPO copy on its own batches for the diagnostic below):

* GRPO (G = 4); GRPO +50% (G' = 6, the ranking's budget-matched arm);
* **token-matched GRPO**: G = 4 plus ``MATCHED_EXTRA`` members per step spread over the step's tasks
  (``train.group_sizes``), the paper's budget-matched baseline: the same extra samples as rollouts;
* oracle judge (``credit.OracleJudge``: the pivot) at the paper's settings: band (0, 0.5), lambda 1, K 4;
* the oracle with the band widened to (0, 1); the oracle with lambda 3;
* the library default (``ChoiceJudge()``, ``ProverConfig()``);
* **contrastive credit**: negative credit on (``negative_credit=True``, its band (0.5, 1)) with an oracle that
  nominates the pivot on a success and a failed run's first mistake (``credit.ContrastiveOracleJudge``).

**R12 part** (the ranking's regime, its lr 3.33e-4, seeds 32-79): GRPO (rerun, the pairing's anchor), token-matched
GRPO (the ranking's default spent 15.4% more policy tokens over its 48 seeds: 2.47 members per step), and
contrastive credit. Where the late bottleneck is the keeps, both signs of credit on the decision are the one arm here
that can reach them.

**Stage 1**, printed first (``report.fixed_lr_check``): GRPO learns (final minus start, lower 95% bound above 0.05)
and GRPO +50% minus GRPO. GRPO learning is the gate: if it fails, the start or the steps change once, with a dated
note, before the rerun. "More samples help" is reported, not a gate: the ceiling question stands on its own.

**Verdicts** (:func:`ceiling_verdict`), one line per ProVer arm: (a) the arm minus token-matched GRPO, held-out
success at step 20 (equal steps, the paper's comparison) and (b) the arm minus GRPO at equal policy tokens
(``report.paired_at``), each mean ± 95% Student-t CI over the paired seeds. *pays* only when both lower bounds are
above 0; *loses* when either upper bound is below 0; else *ties at this size*.

**Collapses** (:func:`collapsed`, fixed in advance): a run collapses when its held-out success at any evaluation is
below half its start. Counted per arm, with an exact two-sided McNemar test against token-matched GRPO on the paired
seeds; every verdict figure is also printed over the seeds where neither run collapsed, beside the all-seeds figure
the verdict uses.

**Why, not only whether** (a within-seed diagnostic, not a verdict): ``train.decision_probs``, the exact
P(take | state) on 64 held-out tasks' optimal paths in the goal room (the pivot), the key rooms before it, and the
key rooms after it holding the goal key (where take is the mistake; none in C1), for the arm and for its GRPO copy
trained on the same batches; the report prints the arm minus its copy at step 20.

**Credit mass**: per ProVer arm, the mean ``credit_share`` (sum |bonus| / sum |A_GRPO| over the step's trainable
tokens) and ``trigger_share`` by quarter of the run.

**Cost** (estimated before the first run from the ranking's figures on a quiet machine, 14-20 s a run, and a BC
start of 110 s; the GRPO copy adds a backward pass and 10 probes a run): a C1 seed about 5 minutes of one core, an
R12 seed about 3; 48 + 48 seeds about 6.5 hours of one core, 3.5-4.5 hours with 2 workers: more than one session,
hence the per-seed files, committed as they come.

Note, 2026-12-06, after the calibration and before the first result file
------------------------------------------------------------------------

*What the calibration showed* (``--calibrate``, seeds 300-303): the start is 0.333 (0.305-0.363, inside [0.2, 0.4]:
:data:`SKILL` stands). GRPO's step-20 held-out success is 0.536 ± 0.071 at lr 1e-4, 0.783 ± 0.066 at 3e-4 and
0.895 ± 0.060 at 1e-3, so the registered rule picks 1e-3, the grid's *edge*; there GRPO is at 0.73 already at step 5
(0.68-0.73 per seed) and 0.85-0.94 at step 20. At p = 0.73 a group of 4 holds exactly one success with probability
0.06: from step 5 on the trigger band is nearly empty, which breaks the regime's own precondition (inside the band
for most of the run), and a step-20 figure near saturation could not show a difference between arms.

*What changes, once* (for every arm alike): the shared lr is **3e-4**, the grid's interior lr, where GRPO goes
0.333 -> 0.48 at step 5 -> 0.78 at step 20 (0.74-0.82 per seed), still rising at the end. The library default at
3e-4 on the same seeds spent 14.1% more policy tokens than its rollouts (at 1e-3: 8.5%), so token-matched GRPO adds
**2.26** members per step (``--calibrate --lrs 0.0003`` prints both). Nothing else changes: arms, seeds, verdict and
collapse rules as registered above. Where 1e-3 would have put the run is said beside the results: a regime where
GRPO saturates within 5 steps is one where no credit can show.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llm_regime as lr_
import numpy as np

from prover_bench.llm import report
from prover_bench.llm.credit import ContrastiveOracleJudge, OracleJudge
from prover_bench.llm.train import DECISIONS, Arm, LLMRun, StepLog
from prover_bench.neural_report import paired_difference
from prover_bench.progress import mean_ci
from prover_bench.tables import markdown_table
from prover_core.judges import ChoiceJudge

SKILL = 0.35
"""The BC expert's chance of taking the goal key (and 1 - SKILL of taking any other): a start near 0.3."""
C1 = lr_.Regime("C1", "last", "adam", skill=SKILL, bc_steps=1000, steps=20, eval_at=(10, 20),
                title="the goal key always last, no keep, a start inside the trigger band")  # fmt: skip
R12 = dataclasses.replace(lr_.REGIMES["R12"], title="the ranking's regime, on its seeds 32-79")
CALIBRATION_SEEDS = (300, 301, 302, 303)
CALIBRATION_LRS = (1e-4, 3e-4, 1e-3)
SHARED_LR: float | None = 3e-4
"""C1's shared lr, from ``--calibrate`` (the note of 2026-12-06; None would refuse to start)."""
MATCHED_EXTRA: float | None = 2.26
"""C1's token-matched extra members per step, ``16 e`` from ``--calibrate --lrs 0.0003``."""
R12_LR = lr_.RANK_LR
R12_MATCHED_EXTRA = 16 * 0.154
"""The ranking's default spent 15.4% more policy tokens than its rollouts (48 seeds at 3.33e-4)."""
SEEDS = tuple(range(400, 448))
R12_SEEDS = lr_.RANK_SEEDS
RESULTS = Path(__file__).resolve().parent / "results" / "llm-ceiling"
SIZE = dataclasses.replace(lr_.CHECK, widen=0, eval_every=5)
SMOKE = dataclasses.replace(lr_.SMOKE, widen=0, eval_every=1)

GRPO, PLUS50, MATCHED = report.BASE, "GRPO +50% (G'=6)", "GRPO token-matched"
ORACLE, WIDE, LAM3 = "oracle (paper: band (0, 0.5), lambda 1)", "oracle, band (0, 1)", "oracle, lambda 3"
DEFAULT, CONTRAST = "library default (choice judge)", "contrastive oracle (negative credit on)"
ARMS = (GRPO, PLUS50, MATCHED, ORACLE, WIDE, LAM3, DEFAULT, CONTRAST)
R12_ARMS = (GRPO, MATCHED, CONTRAST)
PROVER_ARMS = (ORACLE, WIDE, LAM3, DEFAULT, CONTRAST)


def make_arm(name: str, extra: float) -> Arm:
    """An arm by name (judges are built in the worker); ``extra``: the token-matched arm's members per step."""
    common = {"optimizer": "adam", "group_size": 4}
    prover = {"credit": "prover", "k": 4, "diagnose": True, **common}
    arms = {
        GRPO: Arm(GRPO, **common),
        PLUS50: Arm(PLUS50, optimizer="adam", group_size=6),
        MATCHED: Arm(MATCHED, extra_members=extra, **common),
        ORACLE: Arm(ORACLE, judge=lambda s: OracleJudge(), **prover),
        WIDE: Arm(WIDE, judge=lambda s: OracleJudge(), trigger=(0.0, 1.0), **prover),
        LAM3: Arm(LAM3, judge=lambda s: OracleJudge(), lam=3.0, **prover),
        DEFAULT: Arm(DEFAULT, judge=lambda s: ChoiceJudge(), **prover),
        CONTRAST: Arm(CONTRAST, judge=lambda s: ContrastiveOracleJudge(), negative=True, **prover),
    }
    return arms[name]


def seed_job(regime: lr_.Regime, seed: int, lr: float, arms: Sequence[str], extra: float, size: lr_.Size,
             cache: str | None, path: str) -> str:  # fmt: skip
    """One seed: its BC start, then each arm at ``lr``; written to ``path`` atomically by the worker itself."""
    from prover_bench.llm.train import train_run

    params, success = lr_.start(regime, seed, size, cache)
    steps, eval_at, _ = regime.shape(size)
    runs = []
    for name in arms:
        lr_.threads()
        runs.append(train_run(make_arm(name, extra), params, seed, lr, steps, eval_at, size.eval_tasks,
                              size.eval_samples, success, regime.tasks_per_step, variant=regime.variant))  # fmt: skip
    lr_.write_seed(path, {"regime": regime.name, "seed": seed, "lr": lr, "start": success,
                          "runs": [compact(r) for r in runs]})  # fmt: skip
    return path


def compact(run: LLMRun) -> dict[str, Any]:
    """The ranking's compact form, probes rounded to 1e-5."""
    raw = lr_.compact(run)
    raw["probes"] = [{k: round(v, 5) for k, v in p.items()} for p in raw["probes"]]
    return raw


def load(results: Path, regime: str, seeds: Sequence[int]) -> tuple[dict[str, list[LLMRun]], dict[int, float]]:
    """Each arm's finished runs in seed order, and each finished seed's start."""
    runs: dict[str, list[LLMRun]] = {}
    starts: dict[int, float] = {}
    for seed in seeds:
        path = results / f"{regime}-seed{seed}.json"
        if not path.exists():
            continue
        raw = json.loads(path.read_text())
        starts[seed] = raw["start"]
        for r in raw["runs"]:
            run = LLMRun(**(r | {"logs": [StepLog(**x) for x in r["logs"]]}))
            runs.setdefault(run.arm, []).append(run)
    return runs, starts


# --- the rules (fixed with the design) -----------------------------------------------------------------------------


def collapsed(run: Any) -> bool:
    """The collapse rule: held-out success at some evaluation after the start below half the start's."""
    return any(s < run.success[0] / 2 for s in run.success[1:])


def ceiling_verdict(steps: tuple[float, float], tokens: tuple[float, float]) -> str:
    """``pays`` when both lower 95% bounds are above 0 (minus token-matched GRPO at equal steps, minus GRPO at equal
    policy tokens), ``loses`` when either upper bound is below 0, else ``ties at this size``."""
    lows, highs = [m - h for m, h in (steps, tokens)], [m + h for m, h in (steps, tokens)]
    return "pays" if min(lows) > 0 else "loses" if min(highs) < 0 else "ties at this size"


def mcnemar(x: Sequence[bool], y: Sequence[bool]) -> tuple[int, int, float]:
    """Exact two-sided McNemar test on paired booleans: ``(only x, only y, p)``, p from the binomial (n, 1/2) of the
    discordant pairs (1 when there are none)."""
    b = sum(a and not c for a, c in zip(x, y, strict=True))
    c = sum(c and not a for a, c in zip(x, y, strict=True))
    n, k = b + c, min(b, c)
    p = 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)
    return b, c, p


# --- the report ----------------------------------------------------------------------------------------------------


def _pm(v: tuple[float, float]) -> str:
    return report.format_pm(v) if not math.isnan(v[0]) else "n/a"


def _final_diff(a: Sequence[Any], b: Sequence[Any]) -> tuple[float, float]:
    return paired_difference([r.success[-1] for r in a], [r.success[-1] for r in b])


def _tokens_diff(a: Sequence[Any], b: Sequence[Any]) -> tuple[float, float]:
    return report.paired_at(a, b, "tokens")


def _kept(a: Sequence[Any], b: Sequence[Any], c: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """The seeds where none of the three runs collapsed."""
    keep = [i for i in range(len(a)) if not (collapsed(a[i]) or collapsed(b[i]) or collapsed(c[i]))]
    return [a[i] for i in keep], [b[i] for i in keep], [c[i] for i in keep]


def _safe(fn: Any, *args: Any) -> tuple[float, float]:
    return fn(*args) if len(args[0]) >= 2 else (math.nan, math.nan)


def section(results: Path, regime: lr_.Regime, lr: float, arms: Sequence[str], seeds: Sequence[int]) -> list[str]:
    """One regime's report: stage 1, the verdicts, collapses, credit mass, the diagnostic."""
    runs, starts = load(results, regime.name, seeds)
    done = len(starts)
    head = f"{regime.name} ({regime.title}), every arm at lr {lr:g}"
    if done < 2:
        return [f"## {head}", "", f"regime check (fixed lr): not run yet ({done} of {len(seeds)} seeds)"]
    grpo, matched = runs[GRPO], runs[MATCHED]
    lines = [f"## {head}", ""]
    if PLUS50 in runs:
        _, check = report.fixed_lr_check({GRPO: {lr: grpo}, report.MATCHED: {lr: runs[PLUS50]}}, lr)
        lines += [check[0] + " (the gate: GRPO learns; more samples helping is reported, not a gate)",
                  *(f"- {x}" for x in check[1:])]  # fmt: skip
    else:
        gain = mean_ci([r.success[-1] - r.success[0] for r in grpo])
        lines.append(f"GRPO learns: final minus start {_pm(gain)} over {done} seeds (lower bound "
                     f"{gain[0] - gain[1]:+.3f}; needs > {report.LEARN_MARGIN:+.3f})")  # fmt: skip
    share = [m.policy_tokens[-1] / g.policy_tokens[-1] - 1 for m, g in zip(matched, grpo, strict=True)]
    lines.append(f"- extra policy tokens over GRPO's: token-matched GRPO {100 * np.mean(share):.1f}%"
                 + "".join(f"; {name} {100 * np.mean([r.extra_token_share() for r in runs[name]]):.1f}%"
                           for name in arms if name in PROVER_ARMS and name in runs))  # fmt: skip
    status = f"{done} of {len(SEEDS)} seeds finished" + ("" if done == len(SEEDS) else ": provisional")
    lines += [f"- {status}.", ""]
    rows, mass, probes = [], [], []
    for name in arms:
        if name not in PROVER_ARMS or name not in runs:
            continue
        arm = runs[name]
        steps, tokens = _final_diff(arm, matched), _tokens_diff(arm, grpo)
        lines.append(f"verdict: {name} in {regime.name}, minus token-matched GRPO at step {arm[0].eval_steps[-1]} "
                     f"{_pm(steps)} and minus GRPO at equal policy tokens {_pm(tokens)} ({done} paired seeds; pays "
                     f"only when both lower bounds are above 0): {ceiling_verdict(steps, tokens)}")  # fmt: skip
        ka, km, kg = _kept(arm, matched, grpo)
        b, c, p = mcnemar([collapsed(r) for r in arm], [collapsed(r) for r in matched])
        rows.append([name, str(sum(map(collapsed, arm))), str(sum(map(collapsed, matched))), f"{b} / {c}",
                     f"{p:.2f}", str(len(ka)), _pm(_safe(_final_diff, ka, km)),
                     _pm(_safe(_tokens_diff, ka, kg))])  # fmt: skip
        quarters = [[x for r in arm for x in r.logs[q * 5 : q * 5 + 5]] for q in range(4)]
        mass.append([name, *(f"{100 * np.mean([x.credit_share for x in qs]):.2f}%" if qs else "—" for qs in quarters),
                     f"{100 * np.mean([x.credit_share for r in arm for x in r.logs]):.2f}%",
                     f"{np.mean([x.trigger_share for r in arm for x in r.logs]):.2f}",
                     f"{sum(x.accepted for r in arm for x in r.logs)} / {sum(x.verified for r in arm for x in r.logs)}",
                     f"{sum(x.debited for r in arm for x in r.logs)}"])  # fmt: skip
        if arm[0].probes:
            cells = [name]
            for kind in DECISIONS:
                d = [r.probes[-1][kind] - r.probes[-1][f"grpo_{kind}"] for r in arm]
                move = [r.probes[-1][kind] - r.probes[0][kind] for r in arm]
                cells += ["n/a" if any(map(math.isnan, d)) else f"{_pm(mean_ci(d))} (moved {np.mean(move):+.3f})"]
            probes.append(cells)
    lines += ["", "Collapses (held-out success below half the start at an evaluation), against token-matched GRPO, "
              "and the verdict's two figures over the seeds where neither run collapsed:", "",
              markdown_table(["arm", "collapsed", "token-matched collapsed", "only arm / only matched", "McNemar p",
                              "seeds kept", "minus token-matched at the end", "minus GRPO at equal tokens"], rows), "",
              "Credit mass: mean `prover/credit_share` (sum |bonus| / sum |A_GRPO| over the step's trainable tokens) "
              "by quarter of the run, and `prover/trigger_share`:", "",
              markdown_table(["arm", "steps 1-5", "6-10", "11-15", "16-20", "all", "trigger share",
                              "accepted / verified", "debited"], mass), ""]  # fmt: skip
    if probes:
        lines += ["Why (within seed, not a verdict): P(take) at step 20, the arm minus its GRPO copy trained on the "
                  "same batches (mean ± 95% CI; in brackets the arm's own move from its start), in the goal room (the "
                  "pivot), the key rooms before it, and after it holding the goal key (where take is the mistake):",
                  "", markdown_table(["arm", *DECISIONS], probes), ""]  # fmt: skip
    curves = [[name, *(f"{m:.3f}" for m in np.mean([r.success for r in runs[name]], axis=0)),
               f"{np.mean([r.policy_tokens[-1] for r in runs[name]]):.0f}"]
              for name in arms if name in runs]  # fmt: skip
    start = np.mean(list(starts.values()))
    lines += ["Held-out success by evaluation step (mean over seeds) and policy tokens at the end:", "",
              markdown_table(["arm", *(f"step {s}" for s in grpo[0].eval_steps), "policy tokens"], curves), "",
              f"Start (BC, held-out success): mean {start:.3f} over {done} seeds."]  # fmt: skip
    return lines


def full_report(results: Path, seeds: Sequence[int], r12_seeds: Sequence[int], lrs: tuple[float | None, float]) -> str:
    """C1's section, then R12's (``lrs``: theirs)."""
    c1 = lrs[0]
    parts = ["C1: not calibrated yet (run --calibrate)"] if c1 is None else section(results, C1, c1, ARMS, seeds)
    parts += ["", *section(results, R12, lrs[1], R12_ARMS, r12_seeds)]
    return "\n".join(parts).rstrip() + "\n"


# --- calibration and the run -----------------------------------------------------------------------------------------


def calibrate(workers: int, cache: str | None, size: lr_.Size, lrs: Sequence[float] = CALIBRATION_LRS) -> str:
    """Stage 0: GRPO at each of ``lrs``, then the default at the best; the lr and the token-matched share."""
    pool = lr_.Pool(workers)
    try:
        begun = lr_.starts(pool, C1, size, cache)
        runs: lr_.Runs = {}
        lr_.train(pool, C1, [(GRPO, 4)], lrs, begun, size, runs)
        best = report.best_lr(lr_.complete(runs)[GRPO])
        calls = [(s, begun[s]) for s in sorted(begun)]
        default = [r for r in pool.map(_default_job, [(best, s, *b, size) for s, b in calls]) if r is not None]
    finally:
        pool.close()
    share = sum(sum(x.extra_tokens for x in r.logs) for r in default) / sum(
        sum(x.rollout_tokens for x in r.logs) for r in default
    )
    table = markdown_table(
        ["lr", "held-out success at the end (mean ± 95% CI)", "per seed"],
        [[f"{lr:g}", report.format_ci(mean_ci([r.success[-1] for r in rs])),
          ", ".join(f"{r.success[-1]:.3f}" for r in sorted(rs, key=lambda r: r.seed))]
         for lr, rs in sorted(runs[GRPO].items())],
    )  # fmt: skip
    starts = [begun[s][1] for s in sorted(begun)]
    return "\n".join([
        f"C1 calibration (seeds {', '.join(map(str, sorted(begun)))}): start {np.mean(starts):.3f} "
        f"({', '.join(f'{s:.3f}' for s in starts)}; needs [0.2, 0.4])", "", table, "",
        f"shared lr: {best:g}; the default at it spent {100 * share:.1f}% more policy tokens than its rollouts: "
        f"token-matched extra members per step {16 * share:.2f}",
    ])  # fmt: skip


def _default_job(lr: float, seed: int, params: Any, success: float, size: lr_.Size) -> LLMRun:
    from prover_bench.llm.train import train_run

    lr_.threads()
    steps, eval_at, _ = C1.shape(size)
    arm = dataclasses.replace(make_arm(DEFAULT, 0.0), diagnose=False)
    return train_run(arm, params, seed, lr, steps, eval_at, size.eval_tasks, size.eval_samples, success,
                     C1.tasks_per_step, variant=C1.variant)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--calibrate", action="store_true", help="stage 0 on seeds 300-303")
    what.add_argument("--report-only", action="store_true", help="report the finished seeds, train none")
    what.add_argument("--smoke", action="store_true", help="a tiny run of the whole path into --results (a test)")
    parser.add_argument("--results", default=str(RESULTS), help="the per-seed JSON files' folder")
    parser.add_argument("--seeds", type=int, help="only the first N seeds of each part")
    parser.add_argument("--lrs", help="--calibrate: comma-separated lrs instead of the design's grid")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget", type=float, help="seconds; stop there (what finished is kept)")
    parser.add_argument("--cache", default="/tmp/llm-regime-starts", help="BC starts by seed ('' = none)")
    args = parser.parse_args(argv)
    cache = lr_.private_dir(args.cache) if args.cache and not args.smoke else None
    if args.calibrate:
        lrs = [float(x) for x in args.lrs.split(",")] if args.lrs else CALIBRATION_LRS
        print(calibrate(args.workers, cache, dataclasses.replace(SIZE, seeds=CALIBRATION_SEEDS), lrs))
        return 0
    seeds, r12_seeds = SEEDS[: args.seeds], R12_SEEDS[: args.seeds]
    results = Path(args.results)
    size, lr = (SMOKE, 1e-3) if args.smoke else (SIZE, SHARED_LR)
    if not args.report_only:
        extra = 2.0 if args.smoke else MATCHED_EXTRA
        if lr is None or extra is None:
            raise SystemExit("C1 is not calibrated: run --calibrate and register its lr and share first")
        results.mkdir(parents=True, exist_ok=True)
        plan = [(C1, s, lr, ARMS, extra) for s in seeds] + [
            (R12, s, 1e-3 if args.smoke else R12_LR, R12_ARMS, R12_MATCHED_EXTRA) for s in r12_seeds
        ]
        calls = [(r, s, x, arms, extra, size, cache, str(results / f"{r.name}-seed{s}.json"))
                 for r, s, x, arms, extra in plan if not (results / f"{r.name}-seed{s}.json").exists()]  # fmt: skip
        print(f"{len(calls)} seed jobs to do ({len(plan) - len(calls)} already in {results})", file=sys.stderr)
        pool = lr_.Pool(args.workers, time.monotonic() + args.budget if args.budget else None)
        try:
            for got in pool.map(seed_job, calls):
                if got is not None:
                    print(f"finished: {got}", file=sys.stderr, flush=True)
        finally:
            pool.close()
    print(full_report(results, seeds, r12_seeds, (lr, 1e-3 if args.smoke else R12_LR)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
