"""Does ProVer pay for itself in training where the default judge finds the decisions? FrozenLake without slips.

    python benchmarks/delta_no_slips.py [--seeds 8] [--lrs 3 10 30]

Why these tables: on gymnasium's slippery tables no single choice is worth much (``benchmarks/gym_ceiling.py``:
"nothing to find"), so no credit method can show anything there; on FrozenLake *without* slips every eligible
group has a decisive turn, and the default judge's nominated turn carries +0.03 to +0.15 of decision value
against +0.02 to +0.04 for a random turn. Neither table was used by any earlier training run.

Design, fixed before the first run (this docstring was committed with the script, before its output was read):
the training benchmark of ``prover bench --only delta`` (:mod:`prover_bench.delta_training`, unchanged:
every arm, 2 groups x 8 per step, 30 SGD steps on the logits, each arm at its best lr of {0.3, 1, 3} widened
3x once at an edge, 8 paired seeds, the exact success averaged over the steps) on two tables it has never run:
FrozenLake 4x4 and 8x8 with ``is_slippery=False`` (horizons 40 and 100), starting from epsilon-greedy 0.1 on
the optimal values (the harness's development FrozenLake policy; success 0.23 and 0.09 at the start). The
questions, in order: (1) does the default (the choice judge at K = 4) beat GRPO per step, and (2) does it
beat GRPO budget-matched to its own measured extra turns at equal environment steps? (The method pays for
itself here only if (2) holds.) The command prints the same tables as ``prover bench --only delta``.

One change after the first run, for the reason the benchmark's own check gave: every arm's best lr sat on the
edge of the widened grid (9) in both tables (162 s), so the step size, not the credit, limited learning and
the comparison could not show a difference. The grid moved up to {3, 10, 30} (``--lrs``, now the default;
``--lrs 0.3 1 3`` reproduces the first run); nothing else changed. Its intervals on the 8x8 table were too wide to
answer, so a third run doubled the seeds (``--seeds 16``; seeds 0-7 are the same). Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from prover_bench.delta_training import DeltaSettings, markdown, run_environment
from prover_bench.judge_cases import TabularEnv, epsilon_greedy, gym_table, wins_if_positive

TABLES = (
    TabularEnv(
        "FrozenLake 4x4, no slips",
        "no slips",
        lambda: gym_table("FrozenLake-v1", 40, wins_if_positive, is_slippery=False),
        epsilon_greedy(0.1),
    ),
    TabularEnv(
        "FrozenLake 8x8, no slips",
        "no slips",
        lambda: gym_table("FrozenLake-v1", 100, wins_if_positive, is_slippery=False, map_name="8x8"),
        epsilon_greedy(0.1),
    ),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=DeltaSettings().seeds)
    parser.add_argument("--lrs", type=float, nargs="+", default=[3.0, 10.0, 30.0])
    args = parser.parse_args()
    settings = dataclasses.replace(DeltaSettings(), seeds=args.seeds, lrs=tuple(args.lrs))
    began = time.perf_counter()
    results = {env.name: run_environment(env, settings) for env in TABLES}
    print(markdown(results, {env.name: env.kind for env in TABLES}, settings))
    print(f"\n{time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
