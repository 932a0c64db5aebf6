"""Where credit assignment pays: a regime of the LLM-shaped benchmark where more samples per step help (issue 36).

    python benchmarks/llm_regime.py --calibrate local,adam [--workers 2] [--out /tmp/llm-regime]
    python benchmarks/llm_regime.py --regime R1 [--seeds 8] [--workers 2] [--out /tmp/llm-regime]
    python benchmarks/llm_regime.py --smoke                      # a tiny run of the whole path (about a minute)
    python benchmarks/llm_regime.py --rank R12 [--workers 2]     # ProVer ranked at one shared lr (issue 42; resumes)
    python benchmarks/llm_regime.py --rank R12 --report-only     # the report of the seeds finished so far

A credit-assignment method can only pay where the gradient's noise limits learning, that is where more samples
per step clearly help. The LLM-shaped benchmark (``prover bench --only llm``) is not such a regime: its first
self-check failed in every size, and its steps probe put 50% more samples per step at about +0.015 of held-out
success (docs/benchmarks.md). This script looks for a regime that is, *before* any ProVer arm runs there. It
reuses the benchmark whole (``prover_bench.llm``: the corridor tasks, the transformer, behaviour cloning,
``train_run``, ``evaluate``, the paired CIs) and changes only the levers below. Its output starts with
``regime check: pass`` or ``regime check: fail (...)``, then the figures behind it
(``prover_bench.llm.report.regime_check``).

Design (pre-registered 2026-12-04, written before this script's first training run; later changes are appended
below as dated notes, never edited in place)
--------------------------------------------------------------------------------------------------------------

**The check** (``report.regime_check``), on one regime's runs: two arms, GRPO with G members per group and
*budget-matched GRPO* with G' = round(1.5 G) members (50% more samples per step at equal optimizer steps),
everything else equal, each at every lr of a grid of at least 3 lrs, on the same paired seeds. It passes when
all three hold:

1. *GRPO learns*: at GRPO's best lr (the highest mean final held-out success; ties to the smaller lr), held-out
   success at the last step minus the start (the BC start, the same for every arm of a seed), paired over
   seeds, has the lower bound of its 95% Student-t interval above **0.05** (``report.LEARN_MARGIN``).
2. *More samples help*: budget-matched GRPO at its best lr minus GRPO at its best lr, final held-out success
   paired over seeds, has the lower bound of its 95% interval above 0.
3. *Interior lrs*: both best lrs lie strictly inside the grid. A best lr on an edge widens the grid once by a
   factor 3 beyond that edge (the low edge first), both arms at the new lr; if a best lr is still on an edge
   after that, the check fails.

**Fixed in every regime** (as the benchmark's Adam and SGD sizes unless named): the corridor tasks (64 training,
held-out ids from 100,000), the 2-layer d = 64 transformer, 200 BC steps on the noisy expert (take or skip a key
at 1/2) per seed and task variant, token-mean clipped loss on fresh samples, grad-norm clip 1.0, no KL, **40
optimizer steps**, held-out success at steps 20 and 40 on **128 held-out tasks x 2 episodes** (256 per
evaluation, evaluation seeds shared by every arm of a seed), **seeds 0-7** (8 paired seeds), 2 worker processes
of one torch thread each (results do not depend on the number of workers).

**Stage 0, calibration** (``--calibrate VARIANT,OPTIMIZER``; not a check, and on other seeds, 100 and 101, so that
the check's seeds stay fresh): GRPO with G = 4 and 4 tasks per step only, at Adam lrs {1e-4, 3e-4, 1e-3, 3e-3}
or SGD lrs {0.3, 1, 3, 10}, everything else as above. Its only use: a regime's grid is {b/3, b, 3b}, b the
calibration's best lr for the regime's (variant, optimizer) (highest mean step-40 success over the 2 seeds,
ties to the smaller). Calibrated only when a regime needing it is reached.

**The regimes, in order** (each runs only if every earlier one failed the check; the first that passes is the
one where the ProVer comparison is pre-registered and run):

* **R1 `local`, Adam, G = 4 vs 6, 4 tasks per step.** The cheapest lever: the task variant ``local``
  (``tasks.VARIANTS``) shows the goal colour in place of the room index in every observation, so a key room's
  decision (take iff the item's colour is the goal's) is read from the current observation rather than from
  the prefix ~200 tokens back; the pivot (take the goal key) and the later key rooms (skip, or lose it) are
  several decisions per episode among 13-18 hall turns that do not matter. Smaller groups than the benchmark's
  (16 episodes per step instead of 32): a noisier gradient, where more samples should matter more.
* **R2 `marked`, Adam, G = 4 vs 6, 4 tasks per step.** The variant ``marked``: the goal key's room shows the
  word ``goal`` as its item (no comparison: one token decides).
* **R3 `local`, SGD** (plain, no momentum), G = 4 vs 6, 4 tasks per step.
* **R4 `marked`, SGD**, G = 4 vs 6, 4 tasks per step.
* **R5 fewer tasks per step**: 2 tasks per step, G = 4 vs 6 (8 against 12 episodes per step), with the variant
  and optimizer of R1-R4 whose GRPO gained most (final minus start at its best lr), on the same grid as that
  regime.
* **R6 the benchmark's own task** (variant ``default``), Adam, G = 4 vs 6, 4 tasks per step: whether smaller
  groups alone make the existing task pass.

Levers the issue names that are not tried, and why: *longer horizons* (more turns that do not matter): the
episodes already run 20-34 turns and fill the transformer's 256-token context (the test of the task family
checks it); a longer corridor needs a larger context, which changes every existing run's initial weights.

**Cost** (measured before the first training run, on the shared 2-core machine with other jobs running): a BC
start 30 s (cached per seed and variant under ``--cache``), an optimizer step 0.6 s at 16-32 episodes (the
sampler's token loop dominates, so G' = 6 costs about what G = 4 does), an evaluation of 256 episodes 4 s. A
regime: 8 starts and 48 runs of 40 steps (about 32 s each), 2 workers: about 15 minutes, and 4-5 more if the
grid is widened. A calibration: 16 runs, about 5 minutes. ``scripts/gpu-llm-regime`` runs the same with many
more seeds in 16 processes within 8 minutes on a 16-core machine (its CPU cores: the model is too small for
the GPU to help); ``--smoke`` is its test.

Note, 2026-12-04, after the calibrations of (local, adam) and (marked, adam) and before any regime's check ran
-------------------------------------------------------------------------------------------------------------

*What was seen.* Both calibrations: GRPO does not learn in 40 Adam steps (best lr 3e-4 and 1e-4: final minus
start +0.035 and +0.025 over 2 seeds, below the 0.05 margin as means; lr 1e-3 and 3e-3 collapse to 0-0.18).
Traces of one calibration seed (``--trace``, the held-out action mix every 5 steps; figures in
docs/benchmarks.md) say why: (a) the start cannot tell the goal key in any variant (the expert takes every key at
1/2), so RL must build the feature "this key is the goal" from the outcome alone, and with G = 4 the policy moves
`take` up or down in every key room together (`marked`, SGD lr 3: take 0.48 -> 0.97 in the goal room and 0.55
-> 0.91 in the others) rather than apart; (b) 200 BC steps leave the format loose (19% invalid actions at the
door in the `marked` start) and Adam, which scales every parameter's step to the lr whatever its gradient,
breaks it within 20 steps at 1e-3 (invalid actions 20-70%).

*What changes* (a new lever, *the start*; everything above stands as registered):

* R1 and R2 are recorded as failing criterion 1 on their calibrations (the 8-seed check is run for R1 only, last,
  if time allows, to have its verdict printed); R3-R6, which share their start, are not run.
* **The start** of the new regimes: 1000 BC steps (a clean format: 0% invalid actions at the start) on an expert
  with *skill* 0.65 (``tasks.expert``: it takes the goal key with probability 0.65 and any other key with 0.35),
  so that the start represents the pivot's distinction weakly, as a pretrained model would, and RL has to sharpen
  it (held-out success at the start about 0.25). A trace of `marked`, SGD lr 1 from this start: 0.25 -> 0.56 at
  step 10, 0.83 at step 20, 0.97 at step 40, so the new regimes run **20 steps** (evaluations at 10 and 20) to
  stay on the steep part of the curve, where 50% more samples can show; at 40 both arms saturate.
* Each new regime is calibrated on its own settings (``--calibrate R7``: GRPO with its G, seeds 100 and 101, the
  optimizer's 4 lrs), its grid {b/3, b, 3b} as above. The check, its criteria, seeds 0-7 and evaluation size
  are unchanged.
* **The new regimes, in order** (each only if the earlier ones failed):
  R7 `marked`, SGD, G = 4 vs 6, 4 tasks per step; R8 `local`, SGD, the same; R9 `marked`, Adam, the same;
  R10 the benchmark's own task (`default`), SGD, the same.
* Cost: a BC start of 1000 steps takes about 110 s (cached per seed, variant and skill); a run of 20 steps with
  its two evaluations about 20 s; a regime about 12 minutes with 2 workers when the starts are cached, 20 when not.

Note, 2026-12-04, after R7's check (fail) and before any other regime ran
----------------------------------------------------------------------

*What R7 showed* (docs/benchmarks.md has its output): GRPO learns (+0.476 ± 0.058 in 20 steps at lr 1), and both
arms' best lr is 1, where budget-matched GRPO is +0.007 ± 0.097 over GRPO: fail. The runs say where the extra
samples went: at lr 3, GRPO (G = 4) collapsed before step 10 in 6 of 8 seeds (held-out success 0.000-0.273 at step
10) and budget-matched GRPO (G = 6) in 1 of 8 (the other 7 at 0.855-0.953 at step 10, against GRPO's best-lr 0.546
there); then 4 of those 7 collapsed between steps 10 and 20, after the policy had saturated (success above 0.85,
where most groups are all successes and a group's one failure carries the step). So in R7 more samples keep a
large step stable *while the policy learns*, and nothing keeps either arm stable once it has learned. That is a
hypothesis from R7's own seeds, so it is tested on fresh ones:

* **R11**: R7 (the `marked` variant, the skill-0.65 start of 1000 BC steps, SGD, G = 4 vs 6, 4 tasks per step)
  stopped at **10 steps** (evaluations at 5 and 10), while the policy is still learning, on **fresh seeds 8-15**;
  its grid is R7's {1/3, 1, 3} (the calibration's best lr at step 10 is 1 as well: 0.432, 0.637, 0.441, 0.002 at
  lr 0.3, 1, 3, 10), widened once as above. The check and its criteria are unchanged. R8-R10 keep their place
  after it.

Note, 2026-12-04, after R11's check (fail) and before any other regime ran
-----------------------------------------------------------------------

R11 failed too: GRPO learns (+0.209 ± 0.100 in 10 steps at lr 1), budget-matched GRPO at the same best lr 1 is
+0.050 ± 0.087 above it, and at lr 3 both arms collapsed in most seeds before step 10 this time. **R9 runs next,
before R8**: it reuses the cached starts of R7 and R11 (the same variant and start; R8 and R10 need 8-10 new BC
starts each, about 20 minutes of this machine), so it is the cheapest, and Adam is the other optimizer: its
per-parameter step has the lr's size whatever the gradient's, so the gradient's noise enters each step directly.
R9 is as registered: `marked`, the skill-0.65 start, Adam, G = 4 vs 6, 4 tasks per step, 20 steps, seeds 0-7, its
own calibration (Adam's 4 lrs, seeds 100 and 101).

Note, 2026-12-04, after R9's check (fail) and before any other regime ran
------------------------------------------------------------------------

R9 failed both criteria 1 and 2 on their lower bounds, and its runs show why in a way none before did: at its best
lr 3.33e-4 budget-matched GRPO ended at 0.68-0.82 in every seed (0.742 ± 0.034), GRPO at 0.00-0.75 (0.563 ± 0.209:
seed 7 collapsed to 0.00, seed 1 stalled at 0.42); at lr 1e-3 GRPO collapsed in 4 of 8 seeds, budget-matched in 1.
Budget-matched minus GRPO was positive at every lr (+0.025, +0.179, +0.299, +0.001 from 1.1e-4 to 3e-3) and the CIs
are wide because collapses are rare events. With Adam, whose step has the lr's size whatever the gradient's, a noisy
gradient does not slow learning but sends the policy off a cliff: a regime where more samples help by kept
stability. Eight seeds cannot size a rare event, so:

* **R12**: R9 unchanged (`marked`, the skill-0.65 start of 1000 BC steps, Adam, G = 4 vs 6, 4 tasks per step, 20
  steps, evaluations at 10 and 20) on **24 seeds, 8-31**, none of them ever run with Adam (8-15 ran R11 with SGD;
  their BC starts are the same and are reused); its grid {1.11e-4, 3.33e-4, 1e-3}, R9's best lr in the middle,
  widened once as above. The check and its criteria are unchanged.
* If R12 passes, the ProVer comparison designed in docs/benchmarks.md ("ProVer in the regime: design") runs there
  with one registered change for this machine's time: a budget of 45 minutes (``--budget 2700``), reporting the
  seeds that finished in every cell (seeds in order from 8); fewer than 8 seeds would be reported as too few to
  decide. ``scripts/gpu-llm-regime`` runs R12's check on 32 further seeds (32-63) on a 16-core machine.
* R8 and R10 keep their place after it.

Note, 2026-12-04, after R12, R8 and R10 (all fail) and before any other regime ran
----------------------------------------------------------------------------------

R12 failed criterion 2 (+0.056 ± 0.113; budget-matched above GRPO at every lr of its grid, but its best lr 1e-3 is
where 2 of 24 seeds collapse), R8 both (`local` with the weak start hardly learns: +0.055 ± 0.043 in 20 steps), and
R10 criterion 1 only: on the benchmark's own task from the weak start, budget-matched GRPO at its best lr is above
GRPO at its best lr (+0.018 ± 0.013, lower bound +0.005), but GRPO gains only +0.040 ± 0.019 in 20 steps (lower
bound +0.021, needs > 0.05). The registered list is done. One regime more, the last on this machine:

* **R13**: R10 unchanged (the benchmark's task `default`, the skill-0.65 start of 1000 BC steps, SGD, G = 4 vs 6, 4
  tasks per step) at **40 steps** (evaluations at 20 and 40, the step count of R1-R6), on R10's seeds 0-7 and its
  final grid {1/3, 1, 3, 9} (the calibration's best lr 3 and R10's widening), widened once more if a best lr is on
  an edge. The check and its criteria are unchanged.
* If R13 passes, the ProVer comparison runs there as registered, with a budget of 40 minutes (``--budget 2400``)
  and the rule of the note on R12 (fewer than 8 seeds finished: too few to decide).

Note, 2026-12-05, the ranking at one shared lr (issue 42), written before its first run
-------------------------------------------------------------------------------------

R13 failed as well (docs/benchmarks.md). The search above asks whether more samples help *when each arm takes its own
best lr*; a user adopting ProVer asks something else: keep a GRPO recipe that works and add ProVer at the same
settings, or spend the same extra compute on more samples? The paper compares every method at one shared set of
hyperparameters. R12 showed that question has a regime here (budget-matched minus GRPO at a fixed lr: +0.028 ± 0.015
at 1.1e-4, +0.040 ± 0.021 at 3.3e-4, 24 seeds). ``--rank R12`` ranks ProVer there:

* **Regime**: R12 unchanged (``marked``, the skill-0.65 start of 1000 BC steps, Adam, 4 tasks per step, 20 steps,
  G = 4, budget-matched G' = 6, held-out evaluation on 128 tasks x 2), with evaluations every 5 steps, as the
  comparison's design registered (docs/benchmarks.md "ProVer in the regime: design"), for the interpolation at equal
  tokens and time; the final figure (step 20) is the check's.
* **lr**: 3.33e-4 (``RANK_LR``, GRPO's best in R12) for every arm; secondary: 1.11e-4 for GRPO, budget-matched GRPO
  and the ProVer default only. No other lr is run.
* **Seeds** 32-79 (48 paired seeds, none used before). Each (seed, lr) is one job: the BC start, then every arm in
  turn; the worker writes it to ``benchmarks/results/llm-rank/R12-lr<lr>-seed<seed>.json`` when done, and a rerun
  skips the files there, so a stopped run resumes where it stopped. All primary seeds are queued before any
  secondary one (if the design does not fit, the secondary lr is cut first, never a primary seed).
* **Stage 1**, printed first: ``regime check (fixed lr): pass|fail (...)`` (``report.fixed_lr_check``): GRPO
  learns (final minus start, lower 95% bound above 0.05) and budget-matched GRPO minus GRPO at the same lr has its
  lower 95% bound above 0.
* **Stage 2, the arms** (whatever stage 1 shows): GRPO; budget-matched GRPO; ProVer default (``ChoiceJudge()``,
  ``ProverConfig()``: K = 4); the paper's K = 8; K = 2; the default with its continuations as training data
  (``Arm.continuation_data``); the default with an oracle judge that nominates the pivot (``credit.OracleJudge``).
* **Comparisons**: each ProVer arm against GRPO and against budget-matched GRPO, paired over seeds, mean ± 95% CI,
  per optimizer step, at equal policy tokens and at equal training time (``comparison_report``).
* **Verdict per arm** (``report.rank_verdict``), one line each: *pays* if above budget-matched GRPO at equal policy
  tokens with the 95% CI above 0; *loses* if below with the CI below 0; else *ties at this size*. Until all 48
  seeds are in, the report says it is provisional; the README states the verdict only from all 48.
* **The judge** at the default arm: the nomination table of the comparison (pivot, keep, random segments of the
  same lengths, two-decision episodes, credit on other turns).
* **Cost** (estimated before the run from the figures above: a BC start 110 s, a 20-step run with 4 evaluations
  about 28 s, a ProVer run about 35 s): a seed about 5.5 minutes of one core at the primary lr and 1.5 more at the
  secondary; 48 seeds about 5.5 hours of one core, 3-4 hours with 2 workers on this 2-core machine: more than one
  session, hence the per-seed files.

Note, 2026-12-06: each verdict and rule-control line now says what it compares before its verdict word (the same
figures and verdicts, reordered).

Note, 2026-12-05, after all 48 primary seeds were in: the report adds two figures and changes no rule. Each verdict
line also prints the arm minus GRPO at equal policy tokens, and a ``rule control:`` line applies the registered rule
to GRPO itself (against budget-matched GRPO at GRPO's tokens). The first 32 seeds had shown why: at equal tokens
plain GRPO is above budget-matched GRPO, whose extra samples have not yet paid where it is read, so an arm cheaper
than budget-matched GRPO starts ahead under the rule. Arms, seeds, lr, the rule and the verdicts are as registered.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prover_bench.llm import report
from prover_bench.llm.credit import OracleJudge
from prover_bench.llm.engine import threads
from prover_bench.llm.train import Arm, LLMRun, StepLog, behaviour_clone, evaluate, train_run
from prover_bench.progress import mean_ci
from prover_bench.tables import markdown_table
from prover_core.config import ProverConfig
from prover_core.judges import ChoiceJudge


@dataclass(frozen=True)
class Size:
    """How big a run is: its seeds, its evaluations, whether its grid may widen; ``tiny``: 2 steps and 5 BC
    steps whatever the regime (the smoke test)."""

    seeds: tuple[int, ...] = tuple(range(8))
    eval_tasks: int = 128
    eval_samples: int = 2
    widen: int = 1
    tiny: bool = False
    eval_every: int | None = None
    """Evaluate every this many steps instead of at the regime's ``eval_at`` (the ProVer comparison: 5)."""


CHECK = Size()
CALIBRATION = Size(seeds=(100, 101), widen=0)
SMOKE = Size(seeds=(0, 1), eval_tasks=4, eval_samples=1, tiny=True)
"""A tiny run of the whole path (BC, both arms at 3 lrs, a widening, the verdict): a test, not a measurement."""

Runs = dict[str, dict[float, list[LLMRun]]]
CALIBRATION_LRS = {"adam": (1e-4, 3e-4, 1e-3, 3e-3), "sgd": (0.3, 1.0, 3.0, 10.0)}


@dataclass(frozen=True)
class Regime:
    """One regime of the search: the task variant, the optimizer, the group size G (budget-matched: round(1.5 G)),
    the tasks per step, the start (BC steps, the expert's skill) and the steps; its lr grid comes from its
    calibration (:data:`CALIBRATED`)."""

    name: str
    variant: str
    optimizer: str
    group_size: int = 4
    tasks_per_step: int = 4
    skill: float = 0.5
    bc_steps: int = 200
    steps: int = 40
    eval_at: tuple[int, ...] = (20, 40)
    title: str = ""
    seeds: tuple[int, ...] | None = None
    """The check's seeds when not the design's 0-7 (R11: fresh seeds 8-15)."""

    @property
    def matched(self) -> int:
        return round(1.5 * self.group_size)

    def shape(self, size: Size) -> tuple[int, tuple[int, ...], int]:
        """``(steps, eval_at, bc_steps)`` of a run of this regime at ``size``."""
        steps, eval_at, bc_steps = (2, (2,), 5) if size.tiny else (self.steps, self.eval_at, self.bc_steps)
        if size.eval_every:
            eval_at = tuple(range(size.eval_every, steps + 1, size.eval_every))
        return steps, eval_at, bc_steps


def _sharp(name: str, variant: str, optimizer: str, title: str) -> Regime:
    """R7-R10: 1000 BC steps on the expert of skill 0.65, 20 steps (the note of 2026-12-04 in the docstring)."""
    return Regime(name, variant, optimizer, skill=0.65, bc_steps=1000, steps=20, eval_at=(10, 20), title=title)


REGIMES = {
    r.name: r
    for r in (
        Regime("R1", "local", "adam", title="goal colour in every observation, Adam, G = 4 vs 6"),
        Regime("R2", "marked", "adam", title="the goal key's room marked `goal`, Adam, G = 4 vs 6"),
        Regime("R3", "local", "sgd", title="goal colour in every observation, SGD, G = 4 vs 6"),
        Regime("R4", "marked", "sgd", title="the goal key's room marked `goal`, SGD, G = 4 vs 6"),
        Regime("R6", "default", "adam", title="the benchmark's own task, Adam, G = 4 vs 6"),
        _sharp("R7", "marked", "sgd", "`marked`, a start that tells the goal key weakly, SGD, G = 4 vs 6"),
        _sharp("R8", "local", "sgd", "`local`, a start that tells the goal key weakly, SGD, G = 4 vs 6"),
        _sharp("R9", "marked", "adam", "`marked`, a start that tells the goal key weakly, Adam, G = 4 vs 6"),
        _sharp("R10", "default", "sgd", "the benchmark's task, a start that tells the goal key weakly, SGD"),
        dataclasses.replace(_sharp("R12", "marked", "adam", "R9 on 24 fresh seeds, 8-31"), seeds=tuple(range(8, 32))),
        dataclasses.replace(_sharp("R13", "default", "sgd", "R10 at 40 steps"), steps=40, eval_at=(20, 40)),
        dataclasses.replace(
            _sharp("R11", "marked", "sgd", "R7 stopped at 10 steps, on fresh seeds 8-15"),
            steps=10,
            eval_at=(5, 10),
            seeds=tuple(range(8, 16)),
        ),
    )
}
"""R5 (fewer tasks per step) was to take the variant and optimizer of R1-R4 whose GRPO gained most; not run (note)."""

CALIBRATED: dict[str, float] = {
    "R1": 3e-4,  # --calibrate local,adam (2026-12-04): best of {1e-4, 3e-4, 1e-3, 3e-3}
    "R2": 1e-4,  # --calibrate marked,adam (2026-12-04)
    "R7": 1.0,  # --calibrate R7 (2026-12-04): best of {0.3, 1, 3, 10}
    "R11": 1.0,  # R7's calibration, its step-10 column (the note on R11)
    "R9": 1e-3,  # --calibrate R9 (2026-12-04): best of {1e-4, 3e-4, 1e-3, 3e-3}
    "R12": 1e-3 / 3,  # R9's best lr after its widening (the note on R12)
    "R8": 1.0,  # --calibrate R8 (2026-12-04): best of {0.3, 1, 3, 10}
    "R10": 3.0,  # --calibrate R10 (2026-12-04): best of {0.3, 1, 3, 10}
    "R13": 3.0,  # R10's calibration (the note on R13; its grid is given with --lrs: R10's final grid)
}
"""The calibration's best GRPO lr per regime, filled in from ``--calibrate`` runs (dated in the comments)."""


def grid(regime: Regime) -> tuple[float, ...]:
    """{b/3, b, 3b}, b the calibrated best lr of the regime."""
    if regime.name not in CALIBRATED:
        raise SystemExit(f"{regime.name}: not calibrated; run --calibrate {regime.name} first")
    b = CALIBRATED[regime.name]
    return (b / 3, b, b * 3)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --- jobs (run in worker processes: module-level functions of picklable arguments) -------------------------------


def private_dir(path: str) -> str:
    """``path``, created with mode 0o700 if missing; refused (``SystemExit``) unless it is a directory owned by this
    user that no one else may write to: the BC starts cached there are loaded back (as tensors only), and a shared
    path under /tmp is one another user could have made first."""
    where = Path(path)
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = where.lstat()
    if where.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise SystemExit(
            f"--cache {path}: not a private directory (a link, another user's, or writable by others); "
            "pass a directory of your own, e.g. --cache ~/.cache/llm-regime-starts"
        )
    return path


def start(regime: Regime, seed: int, size: Size, cache: str | None) -> tuple[Any, float]:
    """The BC start of ``seed`` for ``regime`` (from ``cache`` when there) and its held-out success."""
    import torch

    threads()
    bc_steps = regime.shape(size)[2]
    name = f"bc-{regime.variant}-{seed}-{bc_steps}" + (f"-skill{regime.skill:g}" if regime.skill != 0.5 else "")
    path = Path(cache) / f"{name}.pt" if cache else None
    if path is not None and path.exists():
        params = {k: v.requires_grad_() for k, v in torch.load(path, weights_only=True).items()}
    else:
        params = behaviour_clone(seed, steps=bc_steps, variant=regime.variant, skill=regime.skill)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save({k: v.detach() for k, v in params.items()}, path)
    return params, evaluate(params, size.eval_tasks, size.eval_samples, seed, regime.variant)


DEFAULT = f"ProVer, library default (choice judge, K={ProverConfig().k})"
PAPER = "ProVer, paper's K=8 (choice judge)"
CHEAPEST = "ProVer, K=2 (choice judge)"
PROVER_K = {DEFAULT: ProverConfig().k, PAPER: 8, CHEAPEST: 2}
"""The ProVer arms of the comparison (issue 36, item 2): the library's default, the paper's K, the cheapest K; the
default judge (``ChoiceJudge``) and everything else ``ProverConfig()``'s (curtailment included)."""


DATA = "ProVer default, continuations as training data"
ORACLE = "ProVer default, oracle judge (the pivot)"
"""The ranking's two further ProVer arms (issue 42): the default with every continuation trained on as well
(``Arm.continuation_data``), and the default's K with a judge that nominates the decision the task defines as the
pivot (``credit.OracleJudge``: the mechanism's upper bound)."""


def make_arm(name: str, group: int, optimizer: str) -> Arm:
    """An arm by name (judges are built in the worker: they are not picklable)."""
    if name in PROVER_K:
        return Arm(name, credit="prover", judge=lambda s: ChoiceJudge(), k=PROVER_K[name], group_size=group,
                   optimizer=optimizer)  # fmt: skip
    if name == DATA:
        return Arm(name, credit="prover", judge=lambda s: ChoiceJudge(), k=ProverConfig().k, group_size=group,
                   optimizer=optimizer, continuation_data=True)  # fmt: skip
    if name == ORACLE:
        return Arm(name, credit="prover", judge=lambda s: OracleJudge(), k=ProverConfig().k, group_size=group,
                   optimizer=optimizer)  # fmt: skip
    return Arm(name, group_size=group, optimizer=optimizer)


def job(regime: Regime, arm: str, group: int, lr: float, seed: int, params: Any, success: float, size: Size) -> LLMRun:
    """One training run of ``arm`` (GRPO with ``group`` members per task, or a ProVer arm of :data:`PROVER_K`)."""
    threads()
    steps, eval_at, _ = regime.shape(size)
    return train_run(
        make_arm(arm, group, regime.optimizer), params, seed, lr, steps, eval_at,
        size.eval_tasks, size.eval_samples, success, regime.tasks_per_step, variant=regime.variant,
    )  # fmt: skip


class Pool:
    """``workers`` spawned processes (or this one for 1), with an optional deadline: ``map`` returns what finished
    by then (``None`` for the rest) and ends the workers still running."""

    def __init__(self, workers: int, deadline: float | None = None) -> None:
        self.deadline = deadline
        self.pool = multiprocessing.get_context("spawn").Pool(workers) if workers > 1 else None

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def map(self, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]]) -> Iterator[Any]:
        """``fn(*call)`` for each call, in order, as each is ready; ``None`` for what the deadline cut off."""
        if self.pool is None:
            for args in calls:
                left = self.left()
                yield fn(*args) if left is None or left > 0 else None
            return
        pending = [self.pool.apply_async(fn, args) for args in calls]
        cut = False
        for p in pending:
            left = self.left()
            try:
                yield p.get(None if left is None else max(left, 0.0))
            except multiprocessing.TimeoutError:
                cut = True
                yield None
        if cut:  # the deadline passed: what finished was kept, end the rest
            self.close(terminate=True)

    def close(self, terminate: bool = False) -> None:
        if self.pool is not None:
            if terminate:
                self.pool.terminate()
            else:
                self.pool.close()
            self.pool.join()
            self.pool = None


# --- the search -------------------------------------------------------------------------------------------------


def starts(pool: Pool, regime: Regime, size: Size, cache: str | None) -> dict[int, tuple[Any, float]]:
    out = {}
    for s, got in zip(size.seeds, pool.map(start, [(regime, s, size, cache) for s in size.seeds]), strict=True):
        if got is not None:
            out[s] = got
            _say(f"seed {s}: BC start ({regime.variant}, skill {regime.skill:g}), held-out success {got[1]:.3f}")
    return out


def train(
    pool: Pool, regime: Regime, arms: Sequence[tuple[str, int]], lrs: Sequence[float], begun: dict[int, Any],
    size: Size, runs: Runs,
) -> None:  # fmt: skip
    """Every (arm, lr) on every seed with a start, seed by seed (so that a deadline leaves whole seeds)."""
    calls = [(regime, a, g, lr, s, *begun[s], size) for s in sorted(begun) for lr in lrs for a, g in arms]
    for (_, a, _g, lr, s, *_), r in zip(calls, pool.map(job, calls), strict=True):
        if r is not None:
            runs.setdefault(a, {}).setdefault(lr, []).append(r)
            _say(f"{a} lr {lr:g} seed {s}: {', '.join(f'{x:.3f}' for x in r.success)} ({r.seconds:.0f} s)")


def complete(runs: Runs) -> Runs:
    """Only the seeds that every (arm, lr) cell holds (a deadline can leave some cells short)."""
    cells = [by_lr[lr] for by_lr in runs.values() for lr in by_lr]
    seeds = set.intersection(*({r.seed for r in c} for c in cells)) if cells else set()
    return {a: {lr: [r for r in rs if r.seed in seeds] for lr, rs in by_lr.items()} for a, by_lr in runs.items()}


def search(regime: Regime, lrs: Sequence[float], size: Size, pool: Pool, cache: str | None) -> tuple[Runs, list[float]]:
    """Both arms over the grid, widened ``size.widen`` times while a best lr is on an edge."""
    arms = [(report.BASE, regime.group_size), (report.MATCHED, regime.matched)]
    begun = starts(pool, regime, size, cache)
    runs: Runs = {}
    train(pool, regime, arms, lrs, begun, size, runs)
    for _ in range(size.widen):
        runs = complete(runs)
        where = {report.edge(by_lr) for by_lr in runs.values()}
        grid_now = sorted(runs[report.BASE])
        new = grid_now[0] / 3 if "lowest" in where else grid_now[-1] * 3 if "highest" in where else None
        left = pool.left()
        if new is None or (left is not None and left <= 0):
            break
        _say(f"a best lr is on an edge of {grid_now}: widening to lr {new:g}")
        train(pool, regime, arms, [new], begun, size, runs)
    runs = complete(runs)
    some = next(iter(runs.values()), {})
    seeds = sorted({r.seed for rs in some.values() for r in rs})
    return runs, [begun[s][1] for s in seeds]


def regime_report(regime: Regime, runs: Runs, start_success: Sequence[float], command: str, minutes: float) -> str:
    _, lines = report.regime_check(runs)
    first, *figures = lines
    text = [
        first,
        *(f"- {line}" for line in figures),
        "",
        f"### {regime.name}: {regime.title or regime.name} (`{command}`)",
        "",
        f"Variant `{regime.variant}`, {regime.optimizer}, G = {regime.group_size} against G' = {regime.matched}, "
        f"{regime.tasks_per_step} tasks per step. BC start, held-out success per seed: "
        f"{', '.join(f'{s:.3f}' for s in start_success)} (mean {np.mean(start_success):.3f}). "
        f"Wall time {minutes:.1f} min.",
        "",
        "Held-out success by step (mean over seeds, each arm at its best lr):",
        "",
        report.curves(runs),
        "",
        "lr sweep (final held-out success, mean ± 95% CI over seeds; * = best lr):",
        "",
        report.sweep(runs),
    ]
    return "\n".join(text)


def calibration_report(regime: Regime, runs: Runs, start_success: Sequence[float], minutes: float) -> str:
    by_lr = runs[report.BASE]
    best = report.best_lr(by_lr)
    header = ["lr", *(f"step {s}" for s in next(iter(by_lr.values()))[0].eval_steps), "final minus start"]
    body = []
    for lr in sorted(by_lr):
        rs = by_lr[lr]
        means = np.mean([r.success for r in rs], axis=0)
        gain = mean_ci([r.success[-1] - r.success[0] for r in rs])
        body.append([f"{lr:g}" + (" *" if lr == best else ""), *(f"{m:.3f}" for m in means), report.format_pm(gain)])
    return "\n".join(
        [
            f"calibration of {regime.name} ({regime.variant}, {regime.optimizer}, skill {regime.skill:g}, "
            f"{regime.bc_steps} BC steps, GRPO G = {regime.group_size}, seeds {CALIBRATION.seeds}): best lr {best:g}; "
            f"grid {{{best / 3:g}, {best:g}, {best * 3:g}}}",
            "",
            f"BC start per seed: {', '.join(f'{s:.3f}' for s in start_success)}. Wall time {minutes:.1f} min.",
            "",
            markdown_table(header, body),
        ]
    )


def action_mix(params: Any, variant: str, seed: int, tasks: int = 64) -> str:
    """Held-out success and the share of each action by kind of room (hall, the goal key's room, another key
    room, the door) over ``tasks`` held-out episodes (``invalid``: a token sequence that names no action)."""
    from prover_bench.llm.engine import Engine, episodes, run
    from prover_bench.llm.tasks import HALL, make_task
    from prover_bench.llm.train import HELD_OUT

    ts = [make_task(HELD_OUT + j, variant) for j in range(tasks)]
    recs = run(episodes(Engine(params, slots=tasks), ts, [[seed, 99_999, i] for i in range(tasks)]))
    counts: dict[str, dict[str, int]] = {}
    for r in recs:
        for s, a in zip(r.states, r.actions, strict=True):
            item = r.task.rooms[s.room]
            kind = (
                "hall" if item == HALL else "door" if item < 0 else "goal key" if item == r.task.goal else "other key"
            )
            counts.setdefault(kind, {}).setdefault(a[0], 0)
            counts[kind][a[0]] += 1
    parts = []
    for kind in ("hall", "goal key", "other key", "door"):
        n = sum(counts.get(kind, {}).values())
        mix = " ".join(f"{a} {c / n:.2f}" for a, c in sorted(counts.get(kind, {}).items())) if n else "(never reached)"
        parts.append(f"{kind}: {mix}")
    return f"success {np.mean([r.success for r in recs]):.2f}; " + "; ".join(parts)


def trace(regime: Regime, lr: float, seed: int, steps: int, cache: str | None) -> str:
    """GRPO (the regime's G) from the regime's start of ``seed`` at ``lr``: the held-out action mix every 5 steps."""
    params, _ = start(regime, seed, CHECK, cache)
    lines = [f"trace of {regime.name} ({regime.variant}, {regime.optimizer} lr {lr:g}, skill {regime.skill:g}, "
             f"{regime.bc_steps} BC steps, G = {regime.group_size}, seed {seed})", "",
             f"- start: {action_mix(params, regime.variant, seed)}"]  # fmt: skip

    def seen(step: int, p: Any) -> None:
        lines.append(f"- step {step}: {action_mix(p, regime.variant, seed)}")
        _say(lines[-1])

    arm = Arm(report.BASE, group_size=regime.group_size, optimizer=regime.optimizer)
    r = train_run(arm, params, seed, lr, steps, tuple(range(5, steps + 1, 5)), 1, 1, 0.0, regime.tasks_per_step,
                  variant=regime.variant, on_eval=seen)  # fmt: skip
    lines.append(f"- training-batch success by step: {' '.join(f'{x.train_success:.2f}' for x in r.logs)}")
    return "\n".join(lines)


def comparison_report(
    runs: Runs, title: str, start_success: Sequence[float], minutes: float, at: str = "its best lr"
) -> str:
    """Item 2: each arm at its best lr against GRPO and budget-matched GRPO at their best lrs, per step, at equal
    policy tokens and at equal training time; item 3: what the default judge's nominations hold."""
    best = {name: sorted(by_lr[report.best_lr(by_lr)], key=lambda r: r.seed) for name, by_lr in runs.items()}
    base, matched = best[report.BASE], best[report.MATCHED]
    header = ["arm", "best lr", "G", "held-out success, step budget", "minus GRPO per step", "minus GRPO, equal tokens",
              "minus GRPO, equal time", "minus budget-matched per step", "minus budget-matched, equal tokens",
              "minus budget-matched, equal time", "extra policy tokens", "s / step", "accepted / verified"]  # fmt: skip
    body = []
    for name, rs in best.items():
        final = [r.success[-1] for r in rs]
        verified = sum(x.verified for r in rs for x in r.logs)
        accepted = sum(x.accepted for r in rs for x in r.logs)
        body.append([
            name, f"{rs[0].lr:g}", str(rs[0].group_size), report.format_ci(mean_ci(final)),
            report.format_pm(mean_ci([a - b for a, b in zip(final, [r.success[-1] for r in base], strict=True)])),
            *(report.format_pm(report.paired_at(rs, base, by)) for by in ("tokens", "time")),
            report.format_pm(mean_ci([a - b for a, b in zip(final, [r.success[-1] for r in matched], strict=True)])),
            *(report.format_pm(report.paired_at(rs, matched, by)) for by in ("tokens", "time")),
            f"{100 * np.mean([r.extra_token_share() for r in rs]):.1f}%",
            f"{np.mean([x.seconds for r in rs for x in r.logs]):.2f}",
            f"{accepted} / {verified}" if verified else "—",
        ])  # fmt: skip
    judge_header = ["arm (best lr)", "nominations", "mean turns", "hold the pivot", "hold a keep", "pivot or keep",
                    "random segment: pivot", "random: keep", "two-decision successes: pivot", "two-decision: keep",
                    "steps with both found", "credit on other turns"]  # fmt: skip
    judge_body = []
    for name, rs in best.items():
        logs = [x for r in rs for x in r.logs]
        n = sum(x.proposed for x in logs)
        if not n:
            continue
        two = sum(x.two_decisions for x in logs)
        with_two = [x for x in logs if x.two_decisions]
        both = sum(x.proposed_pivot > 0 and x.proposed_keep > 0 for x in with_two)
        credit = sum(x.credit for x in logs)

        def share(k: int, of: int) -> str:
            return f"{100 * k / of:.0f}%" if of else "—"

        judge_body.append([
            f"{name} ({rs[0].lr:g})", str(n), f"{sum(x.proposed_turns for x in logs) / n:.2f}",
            share(sum(x.proposed_pivot for x in logs), n), share(sum(x.proposed_keep for x in logs), n),
            share(sum(x.proposed_pivot for x in logs) + sum(x.proposed_keep for x in logs), n),
            share(sum(x.random_pivot for x in logs), n), share(sum(x.random_keep for x in logs), n),
            share(sum(x.two_pivot for x in logs), two), share(sum(x.two_keep for x in logs), two),
            f"{both} / {len(with_two)}",
            f"{100 * sum(x.credit_elsewhere for x in logs) / credit:.0f}%" if credit else "—",
        ])  # fmt: skip
    curves = report.curves(runs)
    return "\n".join([
        f"## {title}", "",
        f"BC start per seed: {', '.join(f'{s:.3f}' for s in start_success)} (mean {np.mean(start_success):.3f}). "
        f"Wall time {minutes:.1f} min.", "",
        f"Each arm at {at}; differences paired by seed (mean ± 95% CI); *equal tokens* and *equal time*: both "
        "runs' held-out success at the smaller of their final policy tokens (or training seconds), interpolated "
        "between evaluations:", "",
        markdown_table(header, body), "",
        f"What the judge's nominations hold (each arm at {at}; a *keep* is not taking a later key while holding "
        "the goal key, the second decision of a success whose goal key room is not the last; *random*: a uniformly "
        "random admissible segment of the same length on the same success; *steps with both found*: steps, among "
        "those with a two-decision nomination, where some nomination held the pivot and another a keep; *credit on "
        "other turns*: the share of accepted credit, lam x Delta per turn, on turns that are neither):", "",
        markdown_table(judge_header, judge_body) if judge_body else "(no nominations)", "",
        f"Held-out success by step (mean over seeds, each arm at {at}):", "", curves, "",
        "lr sweep (final held-out success; * = best lr):", "", report.sweep(runs),
    ])  # fmt: skip


def seeded(size: Size, regime: Regime, n: int | None, first: int | None, own: bool = True) -> Size:
    """``size`` on the regime's own seeds (when it has them and ``own``), or ``n`` seeds from ``first`` (default:
    the first of those)."""
    if regime.seeds and own:
        size = dataclasses.replace(size, seeds=regime.seeds)
    if n:
        start = size.seeds[0] if first is None else first
        size = dataclasses.replace(size, seeds=tuple(range(start, start + n)))
    return size


def pooled(paths: Sequence[str | Path]) -> Runs:
    """The runs of several ``regime-*.json`` files of one regime (each call of ``scripts/gpu-llm-regime`` writes one,
    on its own seeds) as one set: lrs read to 6 significant digits (``--lrs 0.000333333`` and the grid's 1e-3 / 3
    are one lr), a run of the same (arm, lr, seed) in two files refused, only the seeds every cell holds kept."""
    runs: Runs = {}
    seen: set[tuple[str, float, int]] = set()
    for path in paths:
        for raw in json.loads(Path(path).read_text())["runs"]:
            lr = float(f"{raw['lr']:.6g}")
            key = (raw["arm"], lr, raw["seed"])
            if key in seen:
                raise SystemExit(f"{path}: {key[0]} lr {lr:g} seed {key[2]} is in two of the files: pool other seeds")
            seen.add(key)
            run = LLMRun(**(raw | {"lr": lr, "logs": [StepLog(**log) for log in raw["logs"]]}))
            runs.setdefault(run.arm, {}).setdefault(lr, []).append(run)
    return complete(runs)


def dump(path: Path, runs: Runs, extra: dict[str, Any]) -> None:
    path.write_text(
        json.dumps(
            extra | {"runs": [dataclasses.asdict(r) for by_lr in runs.values() for rs in by_lr.values() for r in rs]},
            indent=1,
        )
    )


# --- the ranking at one shared lr (issue 42) ----------------------------------------------------------------------

RANK_LR = 1e-3 / 3
"""The primary lr of every arm: GRPO's best in R12 (its grid {1.11e-4, 3.33e-4, 1e-3})."""
RANK_SECONDARY_LR = 1e-3 / 9
RANK_SEEDS = tuple(range(32, 80))
"""48 paired seeds that no earlier run used."""
RANK_ARMS = (report.BASE, report.MATCHED, DEFAULT, PAPER, CHEAPEST, DATA, ORACLE)
RANK_SECONDARY_ARMS = (report.BASE, report.MATCHED, DEFAULT)
RANK_RESULTS = Path(__file__).resolve().parent / "results" / "llm-rank"
"""Where each finished seed's runs are written (one small JSON per seed and lr, committed; a rerun skips them)."""
RANK = dataclasses.replace(CHECK, widen=0, eval_every=5)


def rank_file(results: Path, regime: Regime, lr: float, seed: int) -> Path:
    return results / f"{regime.name}-lr{lr:.6g}-seed{seed}.json"


def group_of(regime: Regime, arm: str) -> int:
    return regime.matched if arm == report.MATCHED else regime.group_size


def rank_seed(
    regime: Regime, seed: int, lr: float, arms: Sequence[str], size: Size, cache: str | None, path: str
) -> str:
    """One seed of the ranking: its BC start, then each of ``arms`` at ``lr`` in turn, written to ``path`` by the
    worker itself (atomically), so that a stopped run keeps every seed it finished."""
    params, success = start(regime, seed, size, cache)
    runs = [job(regime, a, group_of(regime, a), lr, seed, params, success, size) for a in arms]
    write_seed(path, {"regime": regime.name, "seed": seed, "lr": lr, "start": success,
                      "runs": [compact(r) for r in runs]})  # fmt: skip
    return path


def write_seed(path: str, record: dict[str, Any]) -> None:
    """``record`` as compact JSON at ``path``, atomically (a temporary file, then a rename), so that a stopped run
    never leaves half a seed behind."""
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(record, separators=(",", ":")) + "\n")
    tmp.replace(out)


REQUIRED_LOG_FIELDS = ("rollout_turns", "extra_turns", "rollout_tokens", "extra_tokens", "train_success")


def compact(run: LLMRun) -> dict[str, Any]:
    """``run`` as a JSON-ready dict whose step logs leave out the counters that are 0 (``StepLog``'s defaults) and
    keep seconds to 0.1 ms: ``LLMRun(**raw, logs=[StepLog(**x) ...])`` reads it back unchanged but for that rounding."""
    raw = dataclasses.asdict(run)
    raw["logs"] = [
        {k: round(v, 4) if k == "seconds" else v for k, v in log.items() if v != 0 or k in REQUIRED_LOG_FIELDS}
        for log in raw["logs"]
    ]
    raw["seconds"] = round(raw["seconds"], 2)
    return raw


def rank_runs(results: Path, regime: Regime, lr: float, seeds: Sequence[int]) -> tuple[Runs, dict[int, float]]:
    """The finished seeds' runs at ``lr`` (only seeds of ``seeds``) and each seed's start."""
    runs: Runs = {}
    starts_by_seed: dict[int, float] = {}
    for seed in seeds:
        path = rank_file(results, regime, lr, seed)
        if not path.exists():
            continue
        raw = json.loads(path.read_text())
        starts_by_seed[seed] = raw["start"]
        for r in raw["runs"]:
            run = LLMRun(**(r | {"logs": [StepLog(**x) for x in r["logs"]]}))
            runs.setdefault(run.arm, {}).setdefault(lr, []).append(run)
    return complete(runs), starts_by_seed


def rank_section(
    results: Path, regime: Regime, lr: float, arms: Sequence[str], seeds: Sequence[int], label: str, command: str
) -> tuple[list[str], str]:
    """One lr of the ranking: its head (the fixed-lr check, a verdict line per ProVer arm, the figures behind the
    check) and its comparison tables."""
    runs, starts_by_seed = rank_runs(results, regime, lr, seeds)
    if report.BASE not in runs:
        return [f"regime check (fixed lr): not run yet at the {label} lr {lr:g} (0 of {len(seeds)} seeds)"], ""

    def by_seed(arm: str) -> list[LLMRun]:
        return sorted(runs[arm][lr], key=lambda r: r.seed)

    grpo, matched = by_seed(report.BASE), by_seed(report.MATCHED)
    done = [r.seed for r in grpo]
    _, check = report.fixed_lr_check(runs, lr)
    head = [f"{check[0]} [{label} lr {lr:g}]"]
    for name in arms:
        if name in (report.BASE, report.MATCHED) or name not in runs:
            continue
        arm = by_seed(name)
        diff, over_grpo = report.paired_at(arm, matched, "tokens"), report.paired_at(arm, grpo, "tokens")
        head.append(f"verdict: {name} at lr {lr:g}, minus budget-matched GRPO at equal policy tokens "
                    f"{report.format_pm(diff)} ({len(done)} paired seeds; minus GRPO at equal policy tokens "
                    f"{report.format_pm(over_grpo)}): {report.rank_verdict(diff)}")  # fmt: skip
    control = report.paired_at(grpo, matched, "tokens")
    verdict = report.rank_verdict(control)
    caution = ("; the rule favours any arm cheaper than budget-matched GRPO, so read each verdict beside its arm "
               "minus GRPO")  # fmt: skip
    head.append(f"rule control: GRPO (G={grpo[0].group_size}) itself at lr {lr:g}, minus budget-matched GRPO at "
                f"equal policy tokens {report.format_pm(control)}, under the same rule: {verdict}"
                f"{caution if verdict == 'pays' else ''}")  # fmt: skip
    status = f"{len(done)} of {len(seeds)} seeds finished"
    if len(done) < len(seeds):
        status += ": provisional, the design's seeds are not all in"
    head += [f"- {line}" for line in check[1:]] + [f"- {status}."]
    minutes = sum(r.seconds for by_lr in runs.values() for rs in by_lr.values() for r in rs) / 60
    title = f"{regime.name} at the {label} lr {lr:g}, every arm at that lr: `{command}`"
    return head, comparison_report(runs, title, [starts_by_seed[s] for s in done], minutes, f"the shared lr {lr:g}")


def rank_report(results: Path, regime: Regime, seeds: Sequence[int], primary_only: bool, command: str) -> str:
    """The ranking's report: the primary lr's check and verdicts first, then the secondary's, then the tables."""
    plan = [(RANK_LR, RANK_ARMS, "primary")] + ([] if primary_only else [(RANK_SECONDARY_LR, RANK_SECONDARY_ARMS,
                                                                          "secondary")])  # fmt: skip
    heads, tables = [], []
    for lr, arms, label in plan:
        head, table = rank_section(results, regime, lr, arms, seeds, label, command)
        heads += [*head, ""]
        tables += [table, ""] if table else []
    return "\n".join([*heads, *tables]).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--regime", choices=sorted(REGIMES, key=lambda n: int(n[1:])))
    what.add_argument("--calibrate", metavar="REGIME|VARIANT,OPTIMIZER", help="a regime, or (R1-R6) its pair")
    what.add_argument("--trace", choices=sorted(REGIMES), help="one GRPO run's held-out action mix every 5 steps")
    what.add_argument("--smoke", nargs="?", const="R7", help="a tiny run of a regime's whole path (a test)")
    what.add_argument("--compare", choices=sorted(REGIMES), help="the ProVer comparison in a regime (item 2, 3)")
    what.add_argument("--pool", nargs="+", metavar="JSON", help="the check over several runs' regime-*.json files")
    what.add_argument("--rank", choices=sorted(REGIMES), help="ProVer ranked at one shared lr (issue 42: R12)")
    parser.add_argument("--results", default=str(RANK_RESULTS), help="--rank: the per-seed JSON files' folder")
    parser.add_argument("--report-only", action="store_true", help="--rank: report the finished seeds, train none")
    parser.add_argument("--primary-only", action="store_true", help="--rank: leave the secondary lr out")
    parser.add_argument("--tiny", action="store_true", help="--compare at the smoke size (a test)")
    parser.add_argument("--seeds", type=int, help="N seeds from --first-seed (default: the regime's 8)")
    parser.add_argument("--first-seed", type=int, help="the first of --seeds (default: the regime's first)")
    parser.add_argument("--lrs", help="comma-separated lr grid instead of the calibrated one (--trace: one lr)")
    parser.add_argument("--no-widen", action="store_true", help="do not widen the grid (a GPU rerun of a known grid)")
    parser.add_argument("--seed", type=int, default=100, help="--trace: the seed")
    parser.add_argument("--steps", type=int, default=40, help="--trace: the steps")
    parser.add_argument("--bc-steps", type=int, help="--trace: BC steps instead of the regime's")
    parser.add_argument("--skill", type=float, help="--trace: the expert's skill instead of the regime's")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget", type=float, help="seconds; stop there and report the seeds that finished")
    parser.add_argument("--cache", default="/tmp/llm-regime-starts", help="BC starts by seed and variant ('' = none)")
    parser.add_argument("--out", default="/tmp/llm-regime")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    deadline = time.monotonic() + args.budget if args.budget else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = private_dir(args.cache) if args.cache else None
    command = "python benchmarks/llm_regime.py " + " ".join(sys.argv[1:] if argv is None else argv)
    runs: Runs = {}
    if args.pool:
        runs = pooled(args.pool)
        _, lines = report.regime_check(runs)
        seeds = sorted({r.seed for rs in runs.get(report.BASE, {}).values() for r in rs})
        text = "\n".join([lines[0], *(f"- {line}" for line in lines[1:]), "", f"Pooled from {len(args.pool)} files, "
                          f"{len(seeds)} seeds ({', '.join(map(str, seeds))}): `{command}`"])  # fmt: skip
        (out / "pooled.md").write_text(text + "\n")
        print(text)
        return 0
    if args.rank:  # torch's threads are set in the workers (a report-only run needs no torch)
        return rank_main(args, REGIMES[args.rank], deadline, cache, out, command)
    threads()
    if args.trace:
        regime = REGIMES[args.trace]
        regime = dataclasses.replace(regime, bc_steps=args.bc_steps or regime.bc_steps,
                                     skill=regime.skill if args.skill is None else args.skill)  # fmt: skip
        text = trace(regime, float(args.lrs), args.seed, args.steps, cache)
        name = f"trace-{regime.name}-{args.lrs}-{args.seed}-{regime.bc_steps}-{regime.skill:g}"
        (out / f"{name}.md").write_text(text + "\n")
        print(text)
        return 0
    pool = Pool(args.workers, deadline)
    try:
        if args.calibrate:
            if "," in args.calibrate:  # R1-R6: the pair's default start
                variant, optimizer = args.calibrate.split(",")
                regime = Regime(f"({variant}, {optimizer})", variant, optimizer)
            else:
                regime = REGIMES[args.calibrate]
            begun = starts(pool, regime, CALIBRATION, cache)
            train(pool, regime, [(report.BASE, regime.group_size)], CALIBRATION_LRS[regime.optimizer], begun,
                  CALIBRATION, runs)  # fmt: skip
            text = calibration_report(regime, complete(runs), [begun[s][1] for s in sorted(begun)],
                                      (time.perf_counter() - t0) / 60)  # fmt: skip
            name = f"calibration-{args.calibrate.replace(',', '-')}"
        elif args.compare:
            regime = REGIMES[args.compare]
            size = dataclasses.replace(SMOKE if args.tiny else CHECK, widen=0, eval_every=1 if args.tiny else 5)
            size = seeded(size, regime, args.seeds, args.first_seed, own=not args.tiny)
            lrs = [float(x) for x in args.lrs.split(",")] if args.lrs else grid(regime)
            arms = [(report.BASE, regime.group_size), (report.MATCHED, regime.matched),
                    *((name, regime.group_size) for name in PROVER_K)]  # fmt: skip
            begun = starts(pool, regime, size, None if args.tiny else cache)
            train(pool, regime, arms, lrs, begun, size, runs)
            runs = complete(runs)
            seeds = sorted({r.seed for rs in runs[report.BASE].values() for r in rs})
            text = comparison_report(runs, f"ProVer in {regime.name}: `{command}`", [begun[s][1] for s in seeds],
                                     (time.perf_counter() - t0) / 60)  # fmt: skip
            name = f"compare-{regime.name}"
        else:
            regime = REGIMES[args.smoke or args.regime]
            size = SMOKE if args.smoke else CHECK
            size = seeded(size, regime, args.seeds, args.first_seed, own=not args.smoke)
            if args.no_widen:
                size = dataclasses.replace(size, widen=0)
            if args.lrs:
                lrs: Sequence[float] = [float(x) for x in args.lrs.split(",")]
            else:
                lrs = CALIBRATION_LRS[regime.optimizer][:3] if args.smoke else grid(regime)
            runs, start_success = search(regime, lrs, size, pool, None if args.smoke else cache)
            text = regime_report(regime, runs, start_success, command, (time.perf_counter() - t0) / 60)
            name = "smoke" if args.smoke else f"regime-{regime.name}"
    finally:
        pool.close()
    (out / f"{name}.md").write_text(text + "\n")
    dump(out / f"{name}.json", runs, {"command": command})
    print(text)
    print(f"written to {out}/{name}.md and {name}.json", file=sys.stderr)
    return 0


def rank_main(
    args: argparse.Namespace, regime: Regime, deadline: float | None, cache: str | None, out: Path, command: str
) -> int:
    """``--rank``: train the seeds not yet in ``--results`` (primary lr first, seed by seed), then report all."""
    size = dataclasses.replace(SMOKE, widen=0, eval_every=1) if args.tiny else RANK
    size = seeded(dataclasses.replace(size, seeds=RANK_SEEDS), regime, args.seeds, args.first_seed, own=False)
    seeds = size.seeds
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    plan = [(RANK_LR, RANK_ARMS)] + ([] if args.primary_only else [(RANK_SECONDARY_LR, RANK_SECONDARY_ARMS)])
    if not args.report_only:
        calls = [(regime, s, lr, arms, size, None if args.tiny else cache, str(rank_file(results, regime, lr, s)))
                 for lr, arms in plan for s in seeds if not rank_file(results, regime, lr, s).exists()]  # fmt: skip
        _say(f"{len(calls)} seed runs to do ({sum(len(seeds) for _ in plan) - len(calls)} already in {results})")
        pool = Pool(args.workers, deadline)
        try:
            for got in pool.map(rank_seed, calls):
                if got is not None:
                    _say(f"finished: {got}")
        finally:
            pool.close()
    text = rank_report(results, regime, seeds, args.primary_only, command)
    (out / f"rank-{regime.name}.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
