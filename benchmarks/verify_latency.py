"""Verification's latency and cost under each curtailment schedule, exactly, on the tabular environments.

    python benchmarks/verify_latency.py [--seeds 3] [--held-out]

Every continuation draws from its own seeded stream, so the three schedules (``curtail=False``; curtailment's
``overlap``, the default; ``wait``, the default before) see the same outcomes and decide alike (checked here on
every batch); what differs is what they spend. The policy is the environment's tabular policy behind a
:class:`~prover_core.batching.Batcher`, so one round of continuations is one policy call, as with TRL's
``TrainerPolicy`` or a serving engine. Per environment and judge: verification's rounds of sequential policy
calls (the ``Batcher``'s calls, equal to ``prover/verify_policy_rounds``) against the rollout's (its longest
episode), and the policy turns spent, as ratios of the ``wait`` schedule's (the issue's yardstick: one round
at no more than +10% of its policy turns). Environments: the demo's vault, the judge harness's corridors, luck
corridors and gymnasium tables (``--held-out``: its held-out designs), 16 groups of 8, K = 4. Without gymnasium
its tables are left out, and the output and its headline say so. Progress goes to stderr, a line per environment
and judge.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from prover_bench.judge_cases import TabularEnv
from prover_bench.judge_eval import tabular_envs
from prover_bench.tabular import as_tabular_policy, compile_mdp
from prover_core import AnchorJudge, ChoiceJudge, Judge, ProverConfig, RandomJudge, SnapshotEnv, compute_bonus
from prover_core.batching import Batcher
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.protocols import Policy, PolicyContext
from prover_core.record import record_episode

SCHEDULES = {
    "all at once": ProverConfig(curtail=False),
    "overlap (default)": ProverConfig(),
    "wait": ProverConfig(curtail_mode="wait"),
}
JUDGES: dict[str, Callable[[int], Judge]] = {
    "choice": lambda seed: ChoiceJudge(),
    "anchor": lambda seed: AnchorJudge(),
    "random": lambda seed: RandomJudge(seed),
}


class Batched:
    """``policy`` behind a :class:`Batcher`: every round of continuations is one call."""

    def __init__(self, policy: Policy) -> None:
        self.batcher: Batcher[PolicyContext, Any] = Batcher(lambda contexts: [policy.act(c) for c in contexts])

    async def act(self, context: PolicyContext) -> Any:
        return await self.batcher.submit(context)


def environments(held_out: bool, left_out: list[str] | None = None) -> list[tuple[str, Any, Policy]]:
    """``(name, mdp, policy)``: the vault, then the judge harness's tabular designs (without nonce observations);
    the names of those left out for a missing optional dependency are appended to ``left_out``."""
    out: list[tuple[str, Any, Policy]] = [] if held_out else [("vault (the demo)", VaultMDP(), vault_policy())]
    for env in tabular_envs(held_out):
        if env.nonce:
            continue
        if not _available(env):
            if left_out is not None:
                left_out.append(env.name)
            continue
        mdp = env.make()
        c = compile_mdp(mdp)
        out.append((env.name, mdp, as_tabular_policy(c, env.policy(c))))
    return out


def _available(env: TabularEnv) -> bool:
    if env.kind != "gymnasium":
        return True
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        return False
    return True


def batch_of(mdp: Any, policy: Policy, seed: int, name: str, groups: int = 16, size: int = 8) -> list[Any]:
    root = seed * 1_000_003 + zlib.crc32(name.encode()) % 100_000
    return [
        record_episode(
            MDPEnv(mdp),
            policy,
            reset={"seed": root + 97 * g + i},
            trajectory_id=f"g{g:02d}-{i}",
            group_id=f"g{g:02d}",
            seed=root * 7 + 31 * g + i,
        )
        for g in range(groups)
        for i in range(size)
    ]


def measure(seeds: int, held_out: bool, left_out: list[str] | None = None) -> list[dict[str, Any]]:
    rows = []
    envs = environments(held_out, left_out)
    began = time.perf_counter()
    for e, (name, mdp, policy) in enumerate(envs):
        for j, (judge_name, make_judge) in enumerate(JUDGES.items()):
            step = f"[{e * len(JUDGES) + j + 1}/{len(envs) * len(JUDGES)}]"
            elapsed = f"{time.perf_counter() - began:.0f} s"
            print(f"{step} {name}, {judge_name} judge: {seeds} batches ({elapsed})", file=sys.stderr, flush=True)
            totals: dict[str, dict[str, float]] = {
                s: dict.fromkeys(("calls", "turns", "spent"), 0.0) for s in SCHEDULES
            }
            rollout = verified = 0.0
            for seed in range(seeds):
                batch = batch_of(mdp, policy, seed, name)
                statuses = set()
                for schedule, base in SCHEDULES.items():
                    batched = Batched(policy)
                    config = base.model_copy(update={"seed": seed})
                    result = compute_bonus(batch, judge=make_judge(seed), env=SnapshotEnv(lambda mdp=mdp: MDPEnv(mdp)),
                                           policy=batched, config=config)  # fmt: skip
                    m = result.report.metrics(prefix="")
                    assert batched.batcher.calls >= m["verify_policy_rounds"], (name, schedule)
                    if schedule != "wait":  # the clock counts rounds as ideal batching makes them
                        assert batched.batcher.calls == m["verify_policy_rounds"], (name, schedule)
                    t = totals[schedule]
                    t["calls"] += batched.batcher.calls
                    t["turns"] += m["policy_turns"]
                    t["spent"] += m["continuations"]
                    statuses.add(tuple((g.status, tuple(result.turn_bonus[g.trajectory_id or ""]) if g.status ==
                                        "accepted" else ()) for g in result.report.groups))  # fmt: skip
                    rollout += m["rollout_policy_rounds"] / len(SCHEDULES)
                    verified += m["groups_verified"] / len(SCHEDULES)
                assert len(statuses) == 1, f"{name}: the schedules decided differently"
            rows.append({"env": name, "judge": judge_name, "rollout": rollout / seeds, "verified": verified / seeds,
                         **{f"{s}/{k}": v / seeds for s, t in totals.items() for k, v in t.items()}})  # fmt: skip
    return rows


def table(rows: list[dict[str, Any]], left_out: Sequence[str] = ()) -> str:
    lines = [
        "| environment | judge | groups verified | rounds: rollout | all at once | overlap | wait | "
        "policy turns: wait | overlap / wait | all at once / wait |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        wait = r["wait/turns"] or float("nan")
        lines.append(
            f"| {r['env']} | {r['judge']} | {r['verified']:.1f} | {r['rollout']:.1f} | {r['all at once/calls']:.1f} | "
            f"{r['overlap (default)/calls']:.1f} | {r['wait/calls']:.1f} | {r['wait/turns']:.0f} | "
            f"{r['overlap (default)/turns'] / wait:.3f} | {r['all at once/turns'] / wait:.3f} |"
        )
    ratios = np.array([r["overlap (default)/turns"] / r["wait/turns"] for r in rows if r["wait/turns"]])
    over = [f"{r['env']} ({r['judge']})" for r in rows if r["wait/turns"] and r["overlap (default)/turns"] >
            1.1 * r["wait/turns"]]  # fmt: skip
    within = all(r["overlap (default)/calls"] <= r["rollout"] + 1 for r in rows)
    partial = (
        f" (PARTIAL: {len(left_out)} environments left out, gymnasium is not installed: {', '.join(left_out)}; "
        "pip install gymnasium for the whole table)"
        if left_out
        else ""
    )
    lines += [
        "",
        f"overlap / wait policy turns: median {np.median(ratios):.3f}, max {ratios.max():.3f}; over +10% in "
        f"{len(over)} of {len(ratios)} rows" + (f": {', '.join(over)}" if over else "") + partial,
        f"overlap within the rollout's rounds + 1 (mean per batch) in every row: {'yes' if within else 'no'}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="batches per environment and judge (default 3)")
    parser.add_argument("--held-out", action="store_true", help="the judge harness's held-out designs")
    opts = parser.parse_args(argv)
    began, left_out = time.perf_counter(), list[str]()
    rows = measure(opts.seeds, opts.held_out, left_out)
    print(table(rows, left_out))
    print(f"({time.perf_counter() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
