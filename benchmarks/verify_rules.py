"""Verification rules side by side: continuations spent, false credit and power, on synthetic environments.

``python benchmarks/verify_rules.py [--quick] [--no-ray]`` prints three markdown sections:

1. **Bernoulli boundaries**: pre/post success rates known exactly (a grid of 43 (p_pre, p_post) pairs:
   p_pre in 0.1..0.9, effect in {0, -0.2, -0.4, +0.2, +0.4, +0.6}), with independent continuations
   (``paired_seeds=False``) and with perfect common random numbers (``paired_seeds=True``, both sides
   ``1{u_i < p}`` from one uniform). Exact values from :mod:`prover_core.acceptance` /
   :mod:`prover_core.sequential`, next to the rate measured through ``verify_segment``.
2. **The vault** (:mod:`prover_core.demo`): segments proposed by the random and the divergence judge on
   rollouts of the demo policy, verified through ``compute_bonus`` with each rule; the truth of each
   segment is ``V(s_post) - V(s_pre)`` computed exactly.
3. **Executors**: wall time of the same verification with an environment that sleeps per step (simulated
   latency): local inline, local with 2 threads, Ray with 2 workers (``ray.init(num_cpus=2)``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from prover_core import (
    DivergenceJudge,
    ProverConfig,
    RandomJudge,
    Segment,
    SnapshotEnv,
    Trajectory,
    Turn,
    compute_bonus,
)
from prover_core.acceptance import AcceptanceRule, acceptance_probability
from prover_core.continuations import hook_continuer
from prover_core.curtail import curtailed_cost
from prover_core.demo import MDPEnv, VaultMDP, exact_success_probability, vault_policy
from prover_core.demo.run import rollout_batch, states_along
from prover_core.protocols import Judge, Step
from prover_core.sequential import operating_characteristics, pair_probabilities
from prover_core.verify import verify_segment_detailed

RULES: dict[str, ProverConfig] = {
    "fixed K=8, Delta > 0 (paper)": ProverConfig(k=8, curtail=False),
    "fixed K=8, Delta > 0, curtailed": ProverConfig(k=8),
    "fixed K=8, beta posterior >= 0.9": ProverConfig(k=8, acceptance="beta_posterior", curtail=False),
    "fixed K=8, lower conf. bound (alpha 0.1)": ProverConfig(k=8, acceptance="lower_confidence_bound", curtail=False),
    "adaptive (default: alpha 0.3, max 12)": ProverConfig(k=8, sampling="adaptive"),
    "adaptive, alpha 0.1, max 16": ProverConfig(sampling="adaptive", adaptive_alpha=0.1, adaptive_max_k=16),
    "adaptive, alpha 0.3, max 8": ProverConfig(sampling="adaptive", adaptive_max_k=8),
}
VAULT_NULL = 0.02
SCENARIOS = [
    (round(p, 2), round(p + e, 2))
    for p in np.linspace(0.1, 0.9, 9)
    for e in (0.0, -0.2, -0.4, 0.2, 0.4, 0.6)
    if 0.0 <= p + e <= 1.0 + 1e-9
]


@dataclass
class Tally:
    """Per-rule sums over verifications, split by the truth."""

    spent: float = 0.0
    n: int = 0
    null_acc: float = 0.0
    null_n: int = 0
    null_bonus: float = 0.0
    null_max: float = 0.0
    small_acc: float = 0.0
    small_n: int = 0
    big_acc: float = 0.0
    big_n: int = 0

    null_below: float = 0.0
    """Gains at or below this count as no gain (false credit when accepted)."""
    per_scenario: bool = True
    """Each ``add`` is a scenario's exact or mean rate (so a worst case exists), not one 0/1 decision."""

    def add(self, truth: float, accepted: float, spent: float, bonus: float, small: float = 0.2) -> None:
        self.n += 1
        self.spent += spent
        if truth <= self.null_below:
            self.null_n += 1
            self.null_acc += accepted
            self.null_bonus += bonus
            self.null_max = max(self.null_max, accepted)
        elif truth < small + 0.15:
            self.small_n += 1
            self.small_acc += accepted
        else:
            self.big_n += 1
            self.big_acc += accepted

    def row(self, name: str) -> str:
        def r(a: float, n: int) -> str:
            return f"{a / n:.3f}" if n else "-"

        return (
            f"| {name} | {self.spent / self.n:.2f} | {r(self.null_acc, self.null_n)} | "
            f"{f'{self.null_max:.3f}' if self.per_scenario else 'n/a'} | "
            f"{r(self.null_bonus, self.null_n)} | {r(self.small_acc, self.small_n)} | {r(self.big_acc, self.big_n)} |"
        )


HEADER = (
    "| rule | continuations / verification | false credit (mean) | false credit (worst) | "
    "false bonus E[Delta 1{acc}] | power, gain < 0.35 | power, gain >= 0.35 |\n|---|---|---|---|---|---|---|"
)


def exact_tally(config: ProverConfig, coupling: str) -> Tally:
    tally = Tally()
    for p_pre, p_post in SCENARIOS:
        if config.sampling == "adaptive":
            oc = operating_characteristics(config.stages.verify.test, *pair_probabilities(p_pre, p_post, coupling))
            tally.add(p_post - p_pre, oc.accept, 2 * oc.expected_pairs, oc.expected_bonus)
        else:
            rule = AcceptanceRule(config.acceptance, config.posterior_threshold, config.lcb_alpha)
            prob, bonus = acceptance_probability(rule, p_pre, p_post, config.k, coupling)  # type: ignore[arg-type]
            spent = curtailed_cost(p_post, config.k, rule) if config.curtail else 2 * config.k  # post runs first
            tally.add(p_post - p_pre, prob, spent, bonus)
    return tally


def measured_tally(config: ProverConfig, paired: bool, runs: int) -> Tally:
    turns = tuple(Turn(observation=f"s{t}", action=a) for t, a in enumerate("abcdef"))
    traj = Trajectory(id="a", group_id="g", turns=turns, success=True)
    seg = Segment(trajectory_id="a", start=1, end=2)
    tally = Tally()

    async def scenario(p_pre: float, p_post: float) -> tuple[float, float, float]:
        rates = {1: p_pre, 3: p_post}
        cont = hook_continuer(lambda t, turn, seed: seed / 2**32 < rates[turn])
        cfg = config.model_copy(update={"paired_seeds": paired})
        out = await asyncio.gather(
            *(
                verify_segment_detailed(traj, seg, cont, cfg.model_copy(update={"seed": s}).stages.verify)
                for s in range(runs)
            )
        )
        acc = float(np.mean([v.accepted for v, _ in out]))
        spent = float(np.mean([s.spent for _, s in out]))
        bonus = float(np.mean([v.delta if v.accepted else 0.0 for v, _ in out]))
        return acc, spent, bonus

    for p_pre, p_post in SCENARIOS:
        acc, spent, bonus = asyncio.run(scenario(p_pre, p_post))
        tally.add(p_post - p_pre, acc, spent, bonus)
    return tally


def bernoulli_section(runs: int) -> list[str]:
    lines = ["## 1. Bernoulli boundaries (43 (p_pre, p_post) pairs, equal weight)", ""]
    for coupling, paired in (("independent", False), ("shared_uniform", True)):
        label = "independent continuations" if not paired else "paired seeds, perfect common random numbers"
        lines += [f"### {label}", "", "Exact:", "", HEADER]
        for name, cfg in RULES.items():
            lines.append(exact_tally(cfg, coupling).row(name))
        lines += ["", f"Measured through `verify_segment` ({runs} seeds per pair):", "", HEADER]
        for name, cfg in RULES.items():
            lines.append(measured_tally(cfg, paired, runs).row(name))
        lines.append("")
    return lines


def vault_section(batches: int) -> list[str]:
    mdp = VaultMDP()
    policy = vault_policy()
    value = exact_success_probability(mdp, policy)
    lines = [
        f"## 2. The vault ({batches} batches of 16 groups x 8 runs; truth = exact V(s_post) - V(s_pre))",
        "",
        f"False credit: accepted among segments whose exact gain is <= {VAULT_NULL} (a wait or a look around "
        f"changes V by under 0.02); power: accepted among segments with gain in ({VAULT_NULL}, 0.35) and >= 0.35.",
        "",
    ]
    judges: dict[str, Callable[[int], Judge]] = {
        "random judge": lambda s: RandomJudge(s),
        "divergence judge": lambda s: DivergenceJudge(),
    }
    for judge_name, make_judge in judges.items():
        lines += [f"### {judge_name}", "", HEADER]
        truths_seen: list[float] = []
        for name, cfg in RULES.items():
            tally = Tally(null_below=VAULT_NULL, per_scenario=False)
            for b in range(batches):
                batch = rollout_batch(mdp, 16, 8, seed=1000 + b)
                result = compute_bonus(
                    batch,
                    judge=make_judge(b),
                    env=SnapshotEnv(lambda: MDPEnv(mdp)),
                    policy=policy,
                    config=cfg.model_copy(update={"seed": b}),
                )
                for g in result.report.groups:
                    if g.verification is None or g.proposal is None or g.trajectory_id is None:
                        continue
                    traj = result.trajectories[g.trajectory_id]
                    seg = g.proposal.segment
                    states = states_along(mdp, traj)
                    truth = value(states[seg.end + 1], mdp.horizon - seg.end - 1) - value(
                        states[seg.start], mdp.horizon - seg.start
                    )
                    if name.startswith("fixed K=8, Delta"):
                        truths_seen.append(truth)
                    spent = g.verify_stats.spent if g.verify_stats else 0
                    acc = float(g.status == "accepted")
                    tally.add(truth, acc, spent, g.verification.delta if acc else 0.0)
            lines.append(tally.row(name))
        t = np.array(truths_seen)
        lines += [
            "",
            f"{len(t)} verified segments: {np.mean(t <= VAULT_NULL):.0%} with gain <= {VAULT_NULL}, "
            f"{np.mean((t > VAULT_NULL) & (t < 0.35)):.0%} small gains, {np.mean(t >= 0.35):.0%} gains >= 0.35.",
            "",
        ]
    return lines


class SlowEnv:
    """The vault's MDPEnv with ``delay`` seconds of blocking latency per step (a slow simulator)."""

    def __init__(self, delay: float) -> None:
        self.inner = MDPEnv(VaultMDP())
        self.delay = delay

    def reset(self, spec: Mapping[str, Any]) -> Step:
        return self.inner.reset(spec)

    def reseed(self, seed: int) -> None:
        self.inner.reseed(seed)

    def step(self, action: str) -> Step:
        time.sleep(self.delay)
        return self.inner.step(action)


def executor_section(delay: float, use_ray: bool) -> list[str]:
    from prover_core.executors import LocalExecutor

    mdp = VaultMDP()
    batch = rollout_batch(mdp, 8, 8, seed=0)
    config = ProverConfig(k=8, curtail=False)  # the paper's K and one round, as the figures in docs/ were measured

    def make_restorable_env() -> SnapshotEnv:
        return SnapshotEnv(lambda: SlowEnv(delay))

    lines = [
        f"## 3. Executors ({delay * 1000:.0f} ms blocking latency per environment step; one compute_bonus call, "
        "8 groups x 8 runs, K=8)",
        "",
        "| executor | wall time (s) | continuations | continuations / s | policy turns / s | same bonus as inline |",
        "|---|---|---|---|---|---|",
    ]
    reference = None

    def row(name: str, run: Callable[[], Any]) -> None:
        nonlocal reference
        start = time.perf_counter()
        result = run()
        wall = time.perf_counter() - start
        m = result.report.metrics(prefix="")
        bonus = {k: v.tolist() for k, v in result.turn_bonus.items()}
        if reference is None:
            reference = bonus
        lines.append(
            f"| {name} | {wall:.2f} | {m['continuations']:.0f} | {m['continuations'] / wall:.1f} | "
            f"{m['policy_turns'] / wall:.0f} | {bonus == reference} |"
        )

    def bonus_with(executor: Any) -> Callable[[], Any]:
        return lambda: compute_bonus(batch, judge=DivergenceJudge(), executor=executor, config=config)

    row("local, inline (default path)", bonus_with(LocalExecutor(make_restorable_env(), vault_policy())))
    threads = LocalExecutor(make_restorable_env(), vault_policy(), threads=2)
    row("local, 2 threads", bonus_with(threads))
    threads.shutdown()
    if use_ray:
        import ray

        from prover_core.executors import RayExecutor

        t0 = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        executor = RayExecutor(make_restorable_env, vault_policy, num_workers=2)
        executor.ready()
        startup = time.perf_counter() - t0
        row("Ray, 2 workers", bonus_with(executor))
        executor.shutdown()
        ray.shutdown()
        lines += ["", f"Ray start-up (ray.init + 2 workers ready), not counted above: {startup:.1f} s."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer seeds and batches")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray executor")
    parser.add_argument("--delay", type=float, default=0.005, help="seconds of latency per environment step")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    sections = bernoulli_section(100 if args.quick else 400)
    sections += vault_section(3 if args.quick else 12)
    sections += executor_section(args.delay, not args.no_ray)
    sections += ["", f"Total benchmark time: {time.perf_counter() - start:.0f} s."]
    print("\n".join(sections))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
