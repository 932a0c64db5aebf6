"""What a one-turn judge could find on gymnasium's toy-text tables, under several policies.

    python benchmarks/gym_ceiling.py [--groups 16] [--batches 2] [--seed 0]

The judge harness's gymnasium tables (``prover bench judges``) play epsilon-greedy policies on the optimal
values, and on FrozenLake and CliffWalking it prints "nothing to find": no eligible successful run has a turn
whose choice moved its success probability by ``NO_EFFECT`` (0.05). Is that the policy or the table? For each
table (slippery FrozenLake 4x4 and 8x8, slippery CliffWalking, rainy Taxi, and FrozenLake 4x4 without slips
for contrast) and each policy (epsilon-greedy on ``Q*`` at several epsilons, Boltzmann ``exp(Q*/T)`` at
several temperatures), over the eligible groups (success rate in (0, 0.5)) of ``batches`` batches of
``groups`` groups of 8: the success rate, the eligible groups, the mean decision value ``Q_h - V_h`` of the
best admissible turn of the representative run (what a perfect one-turn judge nominates) and of a random
admissible turn, the share of groups where the best turn reaches ``NO_EFFECT`` (something to find), and the
default judge's (``ChoiceJudge``, asked as ``compute_bonus`` asks it) nominations: how many, and the mean decision
value of the nominated turn with, in brackets, a random admissible turn of the same runs. Exact values (dynamic
programming); proposals only, no verification. None of these policies but the harness's own (epsilon 0.1 on
FrozenLake 4x4, 0.2 on CliffWalking, 0.35 on Taxi) was run while the judge was written.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from prover_bench.judge_cases import (
    NO_EFFECT,
    TableMDP,
    TabularEnv,
    always_wins,
    boltzmann,
    epsilon_greedy,
    gym_table,
    tabular_case,
    wins_if_positive,
)
from prover_bench.judge_eval import eligible_groups, matched_decision
from prover_bench.oracle import BestTurn
from prover_bench.tabular import Compiled, FloatArray
from prover_core.config import ProverConfig
from prover_core.data import Proposal
from prover_core.judges.choice import ChoiceJudge

TABLES: dict[str, Callable[[], TableMDP]] = {
    "FrozenLake 4x4 slippery": lambda: gym_table("FrozenLake-v1", 40, wins_if_positive, is_slippery=True),
    "FrozenLake 8x8 slippery": lambda: gym_table(
        "FrozenLake-v1", 100, wins_if_positive, is_slippery=True, map_name="8x8"
    ),
    "CliffWalking slippery": lambda: gym_table("CliffWalking-v1", 60, always_wins, is_slippery=True),
    "Taxi rainy": lambda: gym_table("Taxi-v4", 40, wins_if_positive, is_rainy=True),
    "FrozenLake 4x4, no slips": lambda: gym_table("FrozenLake-v1", 40, wins_if_positive, is_slippery=False),
}
POLICIES: dict[str, Callable[[Compiled], FloatArray]] = {
    **{f"epsilon-greedy {e}": epsilon_greedy(e) for e in (0.1, 0.2, 0.35, 0.5, 0.8)},
    **{f"Boltzmann T={t}": boltzmann(t) for t in (0.02, 0.05, 0.1)},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = ProverConfig()
    print(
        "| table | policy | success | eligible groups | best turn (random turn) | groups with something to find "
        "| choice judge: nominated, value (random turn) |"
    )
    print("|---|---|---|---|---|---|---|")
    for table, build in TABLES.items():
        for policy, logits in POLICIES.items():
            env = TabularEnv(f"{table}, {policy}", "gymnasium", build, logits)
            wins: list[bool] = []
            best: list[float] = []
            typical: list[float] = []
            chosen: list[tuple[float, float]] = []
            for b in range(args.batches):
                case = tabular_case(env, args.groups, 8, args.seed * 1000 + b)
                assert case.decision is not None
                wins += [t.success for t in case.trajectories]
                oracle = BestTurn(case.decision)
                for run, failures, others in eligible_groups(case, config):
                    top = oracle.propose(run, failures, config.stages.propose.rules)
                    random_turn = matched_decision(case, run, 1, config)
                    if not isinstance(top, Proposal) or random_turn is None:
                        continue
                    best.append(case.decision[run.id][top.segment.start])
                    typical.append(random_turn)
                    answer = ChoiceJudge().propose(run, failures, config.stages.propose.rules, others=others)
                    if isinstance(answer, Proposal):
                        chosen.append((case.decision[run.id][answer.segment.start], random_turn))
            found = sum(v >= NO_EFFECT for v in best)
            cell = f"{np.mean(best):+.3f} ({np.mean(typical):+.3f})" if best else "-"
            judged = (
                f"{len(chosen)}, {np.mean([v for v, _ in chosen]):+.3f} ({np.mean([r for _, r in chosen]):+.3f})"
                if chosen
                else "0"
            )
            print(
                f"| {table} | {policy} | {np.mean(wins):.2f} | {len(best)} | {cell} | {found} of {len(best)} "
                f"| {judged} |"
            )


if __name__ == "__main__":
    main()
