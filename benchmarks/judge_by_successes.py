"""The default judge's nominations split by how many successes their group had, and what the gymnasium tables hold.

    python benchmarks/judge_by_successes.py [--held-out] [--seed 0]

For every eligible group of the judge harness (``prover bench judges --quick``: 2 batches of 16 groups x 8 per
tabular environment, the same batches) the choice judge is asked as ``compute_bonus`` asks it (the group's other
successes as ``others``); its nominations are split by whether the group had one success or more, with the mean
exact decision value of the nominated turn and, in brackets, of a random turn of the same run. Then, per
gymnasium table: the mean over groups of the best single turn's decision value in the representative run (what a
perfect one-turn judge would find), and the mean value of the run's choices that are rare at their state (at most
a fifth of the group's choices there), and at the best turn's state how many of the failed runs that stood there
made the same choice (the best turn is findable by comparing choices at a state only where few did). No
verification: proposals only.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Hashable

from prover_bench.judge_eval import eligible_groups, matched_decision, quick_cases
from prover_core.config import ProverConfig
from prover_core.data import Proposal
from prover_core.judges.choice import ChoiceJudge
from prover_core.judges.keys import repeating_key, value_key


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--held-out", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = ProverConfig()
    split: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    tables: dict[str, list[float]] = collections.defaultdict(list)
    rare: dict[str, list[float]] = collections.defaultdict(list)
    copied: dict[str, list[float]] = collections.defaultdict(list)  # per group: failed runs at t*'s state choosing a_t*
    for case in quick_cases(args.held_out, args.seed):
        assert case.decision is not None
        for run, failures, others in eligible_groups(case, config):
            members = [run, *failures, *others]
            values = case.decision[run.id][: run.num_turns - 1]
            if case.kind == "gymnasium" and values:
                tables[case.name].append(max(values))
                key = repeating_key(members)
                best = run.turns[values.index(max(values))]
                o, a = key(best.observation), value_key(best.action)
                there = [[value_key(u.action) for u in f.turns if key(u.observation) == o] for f in failures]
                there = [acts for acts in there if acts]
                if there:
                    copied[case.name].append(sum(a in acts for acts in there) / len(there))
                chosen: collections.Counter[tuple[Hashable, Hashable]] = collections.Counter()
                at: collections.Counter[Hashable] = collections.Counter()
                for t in (turn for m in members for turn in m.turns):
                    chosen[(key(t.observation), value_key(t.action))] += 1
                    at[key(t.observation)] += 1
                for t, value in zip(run.turns, values, strict=False):
                    o = key(t.observation)
                    if chosen[(o, value_key(t.action))] <= at[o] / 5:
                        rare[case.name].append(value)
            answer = ChoiceJudge().propose(run, failures, config.stages.propose.rules, others=others)
            if not isinstance(answer, Proposal):
                continue
            same = matched_decision(case, run, 1, config)
            row = split[(case.kind, "one success" if not others else "more successes")]
            row[0] += 1
            row[1] += case.decision_value(run.id, answer.segment.start, answer.segment.end) or 0.0
            row[2] += same or 0.0
    print("| family | group | nominated | decision value (random turn of the run) |")
    print("|---|---|---|---|")
    for (kind, which), (n, value, same) in sorted(split.items()):
        print(f"| {kind} | {which} | {n:.0f} | {value / n:+.3f} ({same / n:+.3f}) |")
    print(
        "\n| gymnasium table | groups | best turn of the run | rare choices of the run (turns) "
        "| best turn: failed runs at its state that made the same choice (groups where any did) |"
    )
    print("|---|---|---|---|---|")
    for name, best in tables.items():
        r, c = rare[name], copied[name]
        print(
            f"| {name} | {len(best)} | {sum(best) / len(best):+.3f} | {sum(r) / len(r):+.3f} ({len(r)}) "
            f"| {sum(c) / len(c):.2f} ({sum(x > 0 for x in c)} of {len(c)}) |"
        )


if __name__ == "__main__":
    main()
