"""The judge against chance, live: ``prover/judge_lift`` on the exact tabular suites, and how many groups it needs.

    python benchmarks/judge_lift.py [--steps 4] [--groups 32] [--share 0.5] [--throttle-share 0.25]

Design (written before the first run). Each environment of the judge harness's corridors and luck corridors
(``prover_bench.judge_cases``: finite MDPs whose success probabilities are exact) is one training run of
``--steps`` steps; a step is a fresh batch of ``--groups`` groups of 8 from its tabular policy, put through
``compute_bonus`` with ``ProverConfig(control_share=share)`` and one :class:`~prover_core.chance.LiftWindow`
kept across the steps, as a host adapter keeps it. Two judges see the same batches: the oracle
(:class:`prover_bench.oracle.BestTurn`, the admissible turn with the largest exact decision value ``Q - V``:
a judge known to beat chance) and :class:`~prover_core.RandomJudge` (a uniformly random admissible segment: a
judge known to *be* chance). Expected: the oracle's lift interval above 0; the random judge's holding 0. Printed
per environment: the window's counts, ``judge_lift`` and its 95% interval, and ``credit_per_extra_turn`` (the
credit the steps added per continuation turn spent); then the same pooled over every environment.

Second table, no simulation: the decided groups (judge's and controls' together) a window needs before the
interval of a true lift excludes 0, at the paper's random-segment acceptance (19.5%) and the expected counts
(``Lift.interval`` on ``n (1 - share)`` judge and ``n share`` control groups). Divide by the groups verified per
step to get the steps.

Third table (added with ``lift_throttle``): verification's policy turns over the same steps (``control_share``
``--throttle-share``, 0.25) without and with ``lift_throttle``, per judge: a random judge's should fall, the
oracle's should not once its lift has shown.
"""

from __future__ import annotations

import argparse
import time

from prover_bench.judge_cases import CORRIDORS, LUCK, tabular_case
from prover_bench.methods import run_bonus_with
from prover_bench.oracle import BestTurn
from prover_core import ProverConfig, RandomJudge
from prover_core.chance import Lift, LiftWindow
from prover_core.protocols import Judge

CONTROL_RATE = 0.195
"""The paper's acceptance of random segments (its random-segment ablation)."""


def run(env_index: int, steps: int, groups: int, share: float) -> dict[str, tuple[Lift, float]]:
    """Per judge: the window's lift after ``steps`` steps on the environment, and the credit per extra turn."""
    env = (*CORRIDORS, *LUCK)[env_index]
    config = ProverConfig(control_share=share)
    windows = {"oracle": LiftWindow(steps), "random": LiftWindow(steps)}
    credit = dict.fromkeys(windows, 0.0)
    turns = dict.fromkeys(windows, 0.0)
    for step in range(steps):
        case = tabular_case(env, groups, 8, step)
        judges: dict[str, Judge] = {"oracle": BestTurn(case.decision or {}), "random": RandomJudge(step)}
        for name, judge in judges.items():
            report = run_bonus_with(case.trajectories, judge, config, **case.continuations).report.windowed(
                windows[name]
            )
            credit[name] += sum(g.credit for g in report.groups)
            turns[name] += report.metrics(prefix="")["policy_turns"]
    return {name: (w.total, credit[name] / turns[name] if turns[name] else 0.0) for name, w in windows.items()}


def throttled(env_index: int, steps: int, groups: int, share: float) -> dict[str, tuple[float, float]]:
    """Per judge: verification's policy turns over ``steps`` steps without and with ``lift_throttle``."""
    env = (*CORRIDORS, *LUCK)[env_index]
    out = {}
    for name in ("oracle", "random"):
        turns = []
        for throttle in (False, True):
            config, window, spent = ProverConfig(control_share=share, lift_throttle=throttle), LiftWindow(steps), 0.0
            for step in range(steps):
                case = tabular_case(env, groups, 8, step)
                judge: Judge = BestTurn(case.decision or {}) if name == "oracle" else RandomJudge(step)
                report = run_bonus_with(case.trajectories, judge, config, window, **case.continuations).report
                spent += report.metrics(prefix="")["policy_turns"]
            turns.append(spent)
        out[name] = (turns[0], turns[1])
    return out


def needed(lift: float, share: float, control_rate: float = CONTROL_RATE, most: int = 100_000) -> int:
    """The fewest decided groups whose expected counts give an interval of ``lift`` above 0."""
    n = 2
    while n <= most:
        nc = max(1, round(n * share))
        nj = n - nc
        low, _ = Lift(round(nj * (control_rate + lift)), nj, round(nc * control_rate), nc).interval()
        if low > 0:
            return n
        n += 1
    return most


def cell(lift: Lift) -> str:
    low, high = lift.interval()
    return (
        f"{lift.lift:+.2f} [{low:+.2f}, {high:+.2f}] ({lift.judge_accepted}/{lift.judge_verified} vs "
        f"{lift.control_accepted}/{lift.control_verified})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--share", type=float, default=0.5)
    parser.add_argument("--throttle-share", type=float, default=0.25)
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"judge_lift: {args.steps} steps of {args.groups} groups of 8, control_share={args.share}, K = 4\n")
    print("| environment | oracle: lift [95% CI] (accepted/decided, judge vs control) | credit/turn | "
          "random judge: lift [95% CI] | credit/turn |")  # fmt: skip
    print("|---|---|---|---|---|")
    pooled = {"oracle": Lift(), "random": Lift()}
    for i, env in enumerate((*CORRIDORS, *LUCK)):
        out = run(i, args.steps, args.groups, args.share)
        for name in pooled:
            pooled[name] += out[name][0]
        o, r = out["oracle"], out["random"]
        print(f"| {env.name} | {cell(o[0])} | {o[1]:.3f} | {cell(r[0])} | {r[1]:.3f} |", flush=True)
    print(f"| **pooled** | {cell(pooled['oracle'])} | | {cell(pooled['random'])} | |")
    print(f"\nDecided groups a window needs before a true lift's interval excludes 0 (control acceptance "
          f"{CONTROL_RATE:.1%}):\n")  # fmt: skip
    shares = (0.1, 0.25, 0.5)
    print("| true lift | " + " | ".join(f"control_share {s}" for s in shares) + " |")
    print("|---|" + "---|" * len(shares))
    for lift in (0.1, 0.2, 0.3, 0.4):
        print(f"| {lift:+.1f} | " + " | ".join(str(needed(lift, s)) for s in shares) + " |")
    print(f"\nTurning itself down (lift_throttle, control_share {args.throttle_share}): verification's policy turns "
          f"over {args.steps} steps, without -> with")  # fmt: skip
    print("\n| environment | oracle | random judge |")
    print("|---|---|---|")
    for i, env in enumerate((*CORRIDORS, *LUCK)):
        t = throttled(i, args.steps, args.groups, args.throttle_share)
        cells = [f"{a:.0f} -> {b:.0f} ({b / a - 1:+.0%})" for a, b in (t["oracle"], t["random"])]
        print(f"| {env.name} | {cells[0]} | {cells[1]} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
