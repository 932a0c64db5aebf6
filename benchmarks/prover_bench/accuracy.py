"""Credit accuracy: each method's per-turn credit against the true advantage ``V(s_{t+1}) - V(s_t)``.

Figures per method (pooled over batches):

* localisation precision: the share of singled-out segments (ProVer: accepted segments; dense methods:
  the top-credit nonterminal turn or segment of each eligible group's representative success) that
  contain a pivotal turn;
* acceptance rate (ProVer): accepted / verified segments;
* MAE and correlation of the credit with the true advantage over all taken turns, and MAE on pivotal turns;
* continuations and extra policy turns, as a share of the batch's own turns.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from prover_bench import methods
from prover_bench.batch import Batch, sample_batch
from prover_bench.progress import progress
from prover_bench.suite import BASE_WEIGHTS, SUITE, Corridor
from prover_bench.tabular import Sampler, compile_mdp, logits_from_weights
from prover_core.config import ProverConfig
from prover_core.judges import AnchorJudge, DivergenceJudge, RandomJudge
from prover_core.protocols import Judge

Method = Callable[[Batch, Sampler, np.random.Generator, int], methods.Credit]


def method_table(k: int = 8, spo_every: int = 4) -> list[tuple[str, Method]]:
    """The compared methods: ProVer at ``k`` continuations per boundary, and the baselines."""

    def prover(judge: str) -> Method:
        def run(batch: Batch, sampler: Sampler, rng: np.random.Generator, seed: int) -> methods.Credit:
            named: dict[str, Judge] = {"anchor": AnchorJudge(), "rule": DivergenceJudge(), "random": RandomJudge(seed)}
            chosen = named[judge]
            return methods.prover(batch, chosen, sampler, ProverConfig(k=k, seed=seed), f"ProVer, {judge} judge")

        return run

    def rep(batch: Batch) -> list[int]:
        return list(batch.representatives().values())

    return [
        ("GRPO", lambda b, s, r, _: methods.grpo(b)),
        ("GiGPO (gamma=0.95)", lambda b, s, r, _: methods.gigpo(b)),
        (f"ProVer, anchor judge (K={k})", prover("anchor")),
        (f"ProVer, rule judge (K={k})", prover("rule")),
        (f"ProVer, random judge (K={k})", prover("random")),
        (
            f"SPO-chain N={spo_every}, K={max(1, k // 4)}, same runs",
            lambda b, s, r, _: methods.spo_chain(b, methods.mc_estimator(s, max(1, k // 4), r), spo_every, rep(b)),
        ),
        ("VinePPO K=1, same runs", lambda b, s, r, _: methods.vineppo(b, methods.mc_estimator(s, 1, r), rep(b))),
        (
            f"SPO-chain N={spo_every}, K={k}, all runs",
            lambda b, s, r, _: methods.spo_chain(b, methods.mc_estimator(s, k, r), spo_every),
        ),
        (f"VinePPO K={k}, all runs", lambda b, s, r, _: methods.vineppo(b, methods.mc_estimator(s, k, r))),
    ]


@dataclass
class Tally:
    """Running totals of one method on one environment."""

    batches: int = 0
    eligible: int = 0
    focus: int = 0
    focus_pivotal: int = 0
    focus_turns: int = 0
    verified: int = 0
    accepted: int = 0
    continuations: int = 0
    policy_turns: int = 0
    rollout_turns: int = 0
    errors: list[float] = field(default_factory=list)
    pivotal_errors: list[float] = field(default_factory=list)
    credit: list[float] = field(default_factory=list)
    truth: list[float] = field(default_factory=list)
    deltas: list[tuple[float, float]] = field(default_factory=list)

    def add(self, batch: Batch, credit: methods.Credit) -> None:
        self.batches += 1
        self.eligible += len(batch.representatives())
        for i, (start, end) in credit.focus.items():
            self.focus += 1
            self.focus_turns += end - start + 1
            self.focus_pivotal += bool(batch.pivotal[i, start : end + 1].any())
        self.verified += credit.verified
        self.accepted += credit.accepted
        self.continuations += credit.continuations
        self.policy_turns += credit.policy_turns
        self.rollout_turns += int(batch.episodes.length.sum())
        truth, mask = batch.true_advantage, batch.mask
        self.errors.extend(np.abs(credit.per_turn - truth)[mask].tolist())
        self.pivotal_errors.extend(np.abs(credit.per_turn - truth)[batch.pivotal].tolist())
        self.credit.extend(credit.per_turn[mask].tolist())
        self.truth.extend(truth[mask].tolist())
        self.deltas.extend(credit.deltas)

    def row(self) -> dict[str, float]:
        nan = float("nan")
        corr = float(np.corrcoef(self.credit, self.truth)[0, 1]) if np.std(self.credit) > 0 else nan
        return {
            "localisation": self.focus_pivotal / self.focus if self.focus else nan,
            "singled_out": self.focus / self.eligible if self.eligible else nan,
            "focus_turns": self.focus_turns / self.focus if self.focus else nan,
            "acceptance": self.accepted / self.verified if self.verified else nan,
            "mae": float(np.mean(self.errors)),
            "mae_pivotal": float(np.mean(self.pivotal_errors)) if self.pivotal_errors else nan,
            "corr": corr,
            "continuations": self.continuations / self.batches,
            "extra_share": self.policy_turns / self.rollout_turns,
            "delta": float(np.mean([d for d, _ in self.deltas])) if self.deltas else nan,
            "exact": float(np.mean([e for _, e in self.deltas])) if self.deltas else nan,
        }


def run_accuracy(
    envs: Sequence[Corridor] = SUITE,
    batches: int = 10,
    groups: int = 16,
    group_size: int = 8,
    k: int = 8,
    seed: int = 0,
    show_progress: bool = True,
) -> dict[str, dict[str, dict[str, float]]]:
    """``{env: {method: figures}}`` over ``batches`` batches of the initial policy per environment."""
    table = method_table(k)
    out: dict[str, dict[str, dict[str, float]]] = {}
    jobs = [(env, b) for env in envs for b in range(batches)]
    tallies: dict[tuple[str, str], Tally] = {}
    compiled = {env.name: compile_mdp(env) for env in envs}
    for env, b in progress(jobs, len(jobs), "credit accuracy", show_progress):
        c = compiled[env.name]
        theta = logits_from_weights(c, BASE_WEIGHTS)
        rng = np.random.default_rng([seed, b, zlib.crc32(env.name.encode())])
        batch = sample_batch(c, theta, groups, group_size, rng)
        sampler = Sampler(c, theta)
        for name, method in table:
            tallies.setdefault((env.name, name), Tally()).add(batch, method(batch, sampler, rng, seed * 1000 + b))
    for (env_name, name), tally in tallies.items():
        out.setdefault(env_name, {})[name] = tally.row()
    return out
