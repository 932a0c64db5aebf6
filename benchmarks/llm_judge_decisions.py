"""What the choice and anchor judges nominate on the LLM-shaped tasks: the pivot, or the other decisive choice.

    python benchmarks/llm_judge_decisions.py [--groups 400] [--seed 0]

The LLM-shaped benchmark counts an accepted segment as "on the pivot" when it holds the take of the goal key.
Success has a second decisive kind of choice: once holding the goal key, *not* taking another key (which would
replace it; ``tasks.is_mistake``). This script draws groups of 8 episodes of the noisy expert (the BC start's
teacher: take or skip a key at 1/2), keeps those the trigger admits (1-3 successes), and counts, for each judge's
proposal on the shortest success, whether it holds the pivot, or the pivot or a kept key, and its length. No
verification and no transformer: the judges' nominations on the BC teacher's groups, not on a trained policy's.
"""

from __future__ import annotations

import argparse
import asyncio
import collections

import numpy as np

from prover_bench.llm import tasks as T
from prover_bench.llm.credit import trajectory
from prover_core.data import Proposal, SegmentRules
from prover_core.judges import AnchorJudge, ChoiceJudge
from prover_core.propose import propose


def kept_key(task: T.Task, state: T.State, action: T.Action) -> bool:
    """Holding the goal key in another key room and not taking that room's key."""
    item = task.rooms[state.room]
    return item >= 0 and item != task.goal and state.held == task.goal and action[0] != "take"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--groups", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rules = SegmentRules()
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for _ in range(args.groups):
        task = T.make_task(int(rng.integers(64)))
        records = [T.simulate(task, "expert", rng) for _ in range(8)]
        if not 0 < sum(r.success for r in records) < 4:
            continue
        trajectories = [trajectory(r, f"e{j}", "g") for j, r in enumerate(records)]
        success = min((t for t in trajectories if t.success), key=lambda t: t.num_turns)
        record = records[trajectories.index(success)]
        failures = [t for t in trajectories if not t.success]
        others = [t for t in trajectories if t.success and t is not success]
        for name, judge in (("ChoiceJudge", ChoiceJudge()), ("AnchorJudge", AnchorJudge())):
            proposal = asyncio.run(propose(judge, success, failures, rules, others))  # as compute_bonus asks it
            if not isinstance(proposal, Proposal):
                counts[(name, "declined")] += 1
                continue
            turns = range(proposal.segment.start, proposal.segment.end + 1)
            pivot = any(T.is_pivot(task, record.states[x], record.actions[x]) for x in turns)
            kept = any(kept_key(task, record.states[x], record.actions[x]) for x in turns)
            counts[(name, "proposed")] += 1
            counts[(name, "pivot")] += pivot
            counts[(name, "pivot or kept key")] += pivot or kept
            counts[(name, "turns")] += len(turns)
    print("| judge | proposals (declined) | on the pivot | on the pivot or a kept key | mean turns |")
    print("|---|---|---|---|---|")
    for name in ("ChoiceJudge", "AnchorJudge"):
        n = counts[(name, "proposed")]
        share = {k: f"{100 * counts[(name, k)] / n:.0f}%" for k in ("pivot", "pivot or kept key")}
        print(f"| {name} | {n} ({counts[(name, 'declined')]}) | {share['pivot']} | {share['pivot or kept key']} | "
              f"{counts[(name, 'turns')] / n:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
