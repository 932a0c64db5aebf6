"""One round of policy calls at any batch size: verification's rounds against the rollout's, by batch size.

    python benchmarks/verify_rounds.py [--sizes 16,128,512,2048] [--k 4]

On the embedded vault (``prover demo``'s environment and batching policy, groups of 8), one ``compute_bonus`` call
per batch size with the default config (``max_concurrency=None``: every continuation in flight) and with a limit of
256 continuations in flight (the former default). A round is one ``act_batch`` call serving every continuation
waiting for an action (``prover/verify_policy_rounds``); the rollout's rounds are its longest episode's turns
(``prover/rollout_policy_rounds``). The claim: with the default, verification's rounds are at most the rollout's
plus one at every size; with a limit, each wave of continuations beyond it adds about a continuation's length.
Needs nothing but prover-core; about two minutes on one core for the default sizes (2,048 groups is 16,384 episodes).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from prover_core import ChoiceJudge, ProverConfig, SnapshotEnv, compute_bonus
from prover_core.demo import MDPEnv, VaultBatchPolicy, VaultMDP
from prover_core.demo.run import rollout_batch


def rounds(groups: int, k: int, limit: int | None, seed: int = 0) -> tuple[int, int, int, float]:
    """``(rollout rounds, verification rounds, continuations, seconds)`` of one call on ``groups`` groups of 8."""
    mdp = VaultMDP()
    batch = rollout_batch(mdp, groups, 8, seed)
    started = time.perf_counter()
    result = compute_bonus(
        batch,
        judge=ChoiceJudge(),
        env=SnapshotEnv(lambda: MDPEnv(mdp)),
        policy=VaultBatchPolicy(),
        config=ProverConfig(k=k, seed=seed, max_concurrency=limit),
    )
    m = result.report.metrics(prefix="")
    return (
        int(m["rollout_policy_rounds"]),
        int(m["verify_policy_rounds"]),
        int(m["continuations"]),
        time.perf_counter() - started,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="16,128,512,2048", help="batch sizes in groups of 8")
    parser.add_argument("--k", type=int, default=4)
    args = parser.parse_args(argv)
    print("| groups | rollout rounds | verification rounds (default) | within rollout + 1 | continuations "
          "| verification rounds (256 in flight) | seconds (default) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    ok = True
    for groups in (int(x) for x in args.sizes.split(",")):
        rollout, default, spent, seconds = rounds(groups, args.k, None)
        _, limited, _, _ = rounds(groups, args.k, 256)
        within = default <= rollout + 1
        ok &= within
        row = [groups, rollout, default, "yes" if within else "NO", spent, limited, f"{seconds:.1f}"]
        print("| " + " | ".join(map(str, row)) + " |", flush=True)
    print(f"\nverification within the rollout's rounds + 1 at every size: {'yes' if ok else 'no'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
