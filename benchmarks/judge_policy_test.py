"""The choice judge's statistic against a test on the policy's own probabilities, on the judge harness.

    python benchmarks/judge_policy_test.py [--held-out] [--seed 0]

``ChoiceJudge`` asks whether the successes are concentrated among the runs that made the choice (the exact
one-sided Fisher test, conditional on how many runs made it): a choice that only the success made gets
``p = 1/(m+1)`` however rarely the policy makes it. Real trajectories also carry the policy's probability of
each action (an RL stack records the log-probabilities), which allows the other conditioning. If the choice
``a`` at anchor ``o`` does not matter, the failed runs' choices there are the policy's: a failed run that
stood at ``o`` ``v_r`` times chose ``a`` there with probability ``q_r = 1 - (1 - pi(a | o))^{v_r}``, and

    p_pi = P(at most k of the m failed runs chose a) = P(sum_r Bernoulli(q_r) <= k)     (Poisson-binomial)

is small only when the failed runs avoided ``a`` more than the policy would: a choice the policy rarely makes
is no evidence that they avoided it. ``pi(a | o)`` is read from the successful run's ``turn.info["logprob"]``
at that turn (exact here: the harness's policies are tabular).

Four judges, with the same levels, ties and threshold as ``ChoiceJudge`` (its ``p`` replaced): ``choice``
(the Fisher ``p``), ``policy`` (``p_pi``), ``both`` (``max`` of the two: both tests must reject) and ``both,
no divergence`` (the same without the divergence level, which needs no ``p``: every nomination passed both
tests). For every
eligible group of the harness's batches (``prover bench judges --quick``: 2 batches of 16 groups x 8 per
tabular environment), asked as ``compute_bonus`` asks (the group's other successes as ``others``): groups
nominated, the mean exact decision value of the nominated turn and, in brackets, of a random turn of the same
run, and the share of nominated turns without effect (``|Q - V| < 0.05``). Proposals only, no verification.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from prover_bench.judge_cases import NO_EFFECT
from prover_bench.judge_eval import eligible_groups, matched_decision, quick_cases
from prover_core.config import ProverConfig
from prover_core.data import Proposal, Trajectory
from prover_core.judges.choice import ChoiceEvidence, ChoiceJudge
from prover_core.judges.keys import Key, repeating_key, value_key


def at_most(probabilities: Sequence[float], k: int) -> float:
    """``P(sum_r Bernoulli(q_r) <= k)``: the Poisson-binomial CDF, by the exact recursion over runs."""
    dist = np.zeros(len(probabilities) + 1)
    dist[0] = 1.0
    for q in probabilities:
        dist[1:] = dist[1:] * (1 - q) + dist[:-1] * q
        dist[0] *= 1 - q
    return float(dist[: k + 1].sum())


def _check_at_most() -> None:
    """The recursion against the sum over every outcome of the runs (the script checks itself first)."""
    rng = np.random.default_rng(0)
    for m in range(6):
        qs = rng.uniform(0, 1, m).tolist()
        for k in range(m + 1):
            brute = sum(
                math.prod(q if x else 1 - q for q, x in zip(qs, xs, strict=True))
                for xs in itertools.product((0, 1), repeat=m)
                if sum(xs) <= k
            )
            assert abs(at_most(qs, k) - brute) < 1e-12, (qs, k)


def policy_p(success: Trajectory, failures: Sequence[Trajectory], t: int, key: Key) -> float:
    """``p_pi`` of turn ``t`` (module docstring); 1 where no failed run stood at its anchor."""
    turn = success.turns[t]
    o, a, pi = key(turn.observation), value_key(turn.action), math.exp(turn.info["logprob"])
    qs, k = [], 0
    for run in failures:
        here = [u for u in run.turns if key(u.observation) == o]
        if here:
            qs.append(1 - (1 - pi) ** len(here))
            k += any(value_key(u.action) == a for u in here)
    return at_most(qs, k) if qs else 1.0


@dataclass(frozen=True)
class PolicyEvidence(ChoiceEvidence):
    """:class:`ChoiceEvidence` whose ``p`` is ``p_pi`` (``policy``), or the larger of it and Fisher's (``both``)."""

    fisher: float = 1.0
    pi_p: float = 1.0
    both: bool = False

    @property
    def p(self) -> float:
        return max(self.pi_p, self.fisher) if self.both else self.pi_p


class PolicyTestJudge(ChoiceJudge):
    """``ChoiceJudge`` with ``p`` replaced (:class:`PolicyEvidence`); levels, ties and ``alpha`` unchanged."""

    def __init__(self, both: bool, divergence: bool = True) -> None:
        super().__init__(divergence=divergence)
        self.both = both

    def evidence(
        self, success: Trajectory, failures: Sequence[Trajectory], last: int, others: Sequence[Trajectory] = ()
    ) -> list[ChoiceEvidence]:
        key = repeating_key([success, *failures, *others])
        out: list[ChoiceEvidence] = []
        for e in super().evidence(success, failures, last, others):
            plain = {f.name: getattr(e, f.name) for f in fields(ChoiceEvidence)}
            pi_p = policy_p(success, failures, e.turn, key)
            out.append(PolicyEvidence(**plain, fisher=e.p, pi_p=pi_p, both=self.both))
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--held-out", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    _check_at_most()
    config = ProverConfig()
    judges = {
        "choice": ChoiceJudge(),
        "policy": PolicyTestJudge(both=False),
        "both": PolicyTestJudge(both=True),
        "both, no divergence": PolicyTestJudge(both=True, divergence=False),
    }
    rows: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0, 0.0, 0.0, 0])
    for case in quick_cases(args.held_out, args.seed, logprobs=True):
        for run, failures, others in eligible_groups(case, config):
            for name, judge in judges.items():
                row = rows[(case.kind, name)]
                row[1] += 1
                answer = judge.propose(run, failures, config.stages.propose.rules, others=others)
                if not isinstance(answer, Proposal):
                    continue
                value = case.decision_value(run.id, answer.segment.start, answer.segment.end) or 0.0
                row[0] += 1
                row[2] += value
                row[3] += matched_decision(case, run, 1, config) or 0.0
                row[4] += abs(value) < NO_EFFECT
    print("| family | judge | nominated / eligible | decision value (random turn of the run) | no effect |")
    print("|---|---|---|---|---|")
    for (kind, name), (n, eligible, value, same, none) in sorted(rows.items()):
        m = max(n, 1)
        print(f"| {kind} | {name} | {n:.0f} / {eligible:.0f} | {value / m:+.3f} ({same / m:+.3f}) | {none / m:.2f} |")


if __name__ == "__main__":
    main()
