"""Training a tabular softmax policy with GRPO, budget-matched GRPO and ProVer, over seeds.

One optimizer step samples ``groups`` groups, computes each method's per-turn credit ``A_{i,t}`` and
takes a policy-gradient step on the logits,

    theta += lr / N * sum_{i,t} A_{i,t} * grad log pi(a_t | o_t),   grad_{o,b} log pi(a | o) = 1[b = a] - pi(b | o),

then records the exact success probability ``V(s_0, H)`` of the new policy and the environment
steps spent so far (rollout turns plus continuation turns). Budget-matched GRPO spends ProVer's
extra turns as more group members: its group size is ``round(G * (1 + share))``, ``share`` being
ProVer's measured extra-turn share over the same seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prover_bench import methods
from prover_bench.batch import Batch, sample_batch
from prover_bench.progress import mean_ci, progress
from prover_bench.suite import BASE_WEIGHTS, Corridor, by_name
from prover_bench.tabular import (
    Compiled,
    FloatArray,
    IntArray,
    Sampler,
    action_probs,
    compile_mdp,
    logits_from_weights,
    value_table,
)
from prover_core.config import ProverConfig
from prover_core.judges import DivergenceJudge, RandomJudge


def policy_gradient(c: Compiled, theta: FloatArray, batch: Batch, per_turn: FloatArray) -> FloatArray:
    """``(1/N) sum_{i,t} A_{i,t} (e_{a_t} - pi(. | o_t))`` over the taken turns, one entry per logit."""
    mask = batch.mask
    return score_sum(c, theta, batch.episodes.states[mask], batch.episodes.actions[mask], per_turn[mask]) / batch.n


def score_sum(c: Compiled, theta: FloatArray, states: IntArray, actions: IntArray, adv: FloatArray) -> FloatArray:
    """``sum_j A_j (e_{a_j} - pi(. | o_j))`` over turns ``j`` (state, action, advantage), one entry per logit."""
    obs = c.obs_of[states]
    grad = np.zeros(c.n_params)
    np.add.at(grad, c.offset[obs] + actions, adv)
    weight = np.bincount(obs, weights=adv, minlength=len(c.observations))
    block = np.repeat(np.arange(len(c.observations)), np.diff(c.offset))
    grad -= weight[block] * action_probs(c, theta)
    return grad


@dataclass
class Run:
    """One training run: success probability and environment steps after each optimizer step."""

    method: str
    seed: int
    success: list[float]
    env_steps: list[int]
    extra_turns: int
    rollout_turns: int


def train(
    env: Corridor,
    method: str,
    seed: int,
    steps: int,
    groups: int = 8,
    group_size: int = 8,
    lr: float = 0.5,
    k: int = 8,
) -> Run:
    """Train from :data:`BASE_WEIGHTS` with ``method`` in ``{"grpo", "prover", "prover-random"}``."""
    c = compile_mdp(env)
    theta = logits_from_weights(c, BASE_WEIGHTS)
    rng = np.random.default_rng([seed, 17])
    success = [float(value_table(c, theta)[c.horizon, c.initial])]
    env_steps, spent, extra = [0], 0, 0
    for step in range(steps):
        batch = sample_batch(c, theta, groups, group_size, rng)
        spent += int(batch.episodes.length.sum())
        if method == "grpo":
            credit = methods.grpo(batch)
        elif method in ("prover", "prover-random"):
            judge = DivergenceJudge() if method == "prover" else RandomJudge(seed * 100_003 + step)
            config = ProverConfig(k=k, seed=seed * 100_003 + step)
            credit = methods.prover(batch, judge, Sampler(c, theta), config)
        else:
            raise ValueError(f"unknown training method {method!r}")
        extra += credit.policy_turns
        theta = theta + lr * policy_gradient(c, theta, batch, credit.per_turn)
        success.append(float(value_table(c, theta)[c.horizon, c.initial]))
        env_steps.append(spent + extra)
    return Run(method, seed, success, env_steps, extra, spent)


@dataclass
class Curve:
    """Mean and 95% CI half-width over seeds, per optimizer step."""

    label: str
    mean: list[float]
    half_width: list[float]
    env_steps: list[float]
    runs: list[Run]

    def final(self) -> tuple[float, float]:
        return mean_ci([r.success[-1] for r in self.runs])

    def at_env_steps(self, budget: float) -> tuple[float, float]:
        """Success once ``budget`` environment steps are spent (linear interpolation per run)."""
        return mean_ci([float(np.interp(budget, r.env_steps, r.success)) for r in self.runs])

    def average(self) -> tuple[float, float]:
        """The mean success over all steps (area under the curve / steps)."""
        return mean_ci([float(np.mean(r.success[1:])) for r in self.runs])


def curve(label: str, runs: Sequence[Run]) -> Curve:
    per_step = list(zip(*(r.success for r in runs), strict=True))
    stats = [mean_ci(list(v)) for v in per_step]
    steps = np.mean([r.env_steps for r in runs], axis=0).tolist()
    return Curve(label, [m for m, _ in stats], [h for _, h in stats], steps, list(runs))


def run_training(
    env_name: str = "key+ford",
    seeds: int = 5,
    steps: int = 60,
    groups: int = 8,
    group_size: int = 8,
    lr: float = 0.5,
    k: int = 8,
    with_random: bool = True,
    show_progress: bool = True,
) -> tuple[list[Curve], dict[str, float]]:
    """ProVer first (to measure its extra-turn share), then GRPO and budget-matched GRPO, same seeds."""
    env = by_name(env_name)
    plan = ["prover", *(["prover-random"] if with_random else []), "grpo"]
    runs: dict[str, list[Run]] = {m: [] for m in plan}
    jobs = [(m, s) for m in plan for s in range(seeds)]
    for m, s in progress(jobs, len(jobs), f"training on {env_name}", show_progress):
        runs[m].append(train(env, m, s, steps, groups, group_size, lr, k))
    share = sum(r.extra_turns for r in runs["prover"]) / sum(r.rollout_turns for r in runs["prover"])
    matched = max(group_size + 1, round(group_size * (1 + share)))
    runs["matched"] = [
        train(env, "grpo", s, steps, groups, matched, lr, k)
        for s in progress(range(seeds), seeds, "budget-matched GRPO", show_progress)
    ]
    labels = {
        "grpo": f"GRPO (G={group_size})",
        "matched": f"GRPO budget-matched (G={matched})",
        "prover": f"ProVer, rule judge (G={group_size}, K={k})",
        "prover-random": f"ProVer, random judge (G={group_size}, K={k})",
    }
    order = ["grpo", "matched", "prover", *(["prover-random"] if with_random else [])]
    info = {"extra_share": share, "matched_group_size": float(matched)}
    return [curve(labels[m], runs[m]) for m in order], info
