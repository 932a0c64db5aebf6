"""How much concurrency saves: N groups judged through ``compute_bonus`` against a chat server with a fixed latency.

Starts the scripted test server (``tests/chat_server.py``) on 127.0.0.1, answers every request after
``--latency`` seconds, and prints the wall time of one ``compute_bonus`` step with N eligible groups
against the serial cost ``N * latency``. With ``--serial`` it also times the blocking
``propose_sync`` one group after another.

    python benchmarks/judge_concurrency.py --groups 16 --latency 0.2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prover_core import SegmentRules, Trajectory, Turn, compute_bonus
from prover_core.judges.llm import LLMJudge
from tests.chat_server import ChatServer, Reply, answer


def group(gid: str) -> list[Trajectory]:
    """One success (5 turns) and three failures (3 turns): eligible (1 of 4 succeeded)."""
    success = Trajectory(
        id=f"{gid}-s",
        group_id=gid,
        success=True,
        turns=[
            Turn(observation=f"room {t}", action=a) for t, a in enumerate(["west", "take key", "east", "open", "in"])
        ],
    )
    failures = [
        Trajectory(
            id=f"{gid}-f{i}",
            group_id=gid,
            success=False,
            turns=[Turn(observation=f"room {t}", action=a) for t, a in enumerate(["east", "open", "wait"])],
        )
        for i in range(3)
    ]
    return [success, *failures]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--steps", type=int, default=3, help="compute_bonus steps to time (median reported)")
    parser.add_argument("--serial", action="store_true", help="also time propose_sync, one group at a time")
    args = parser.parse_args()

    def slow(body: dict[str, Any], index: int) -> Reply:
        time.sleep(args.latency)
        return answer(1, 1)

    batch = [t for i in range(args.groups) for t in group(f"g{i:03d}")]
    serial_cost = args.groups * args.latency
    with ChatServer(slow) as server:
        judge = LLMJudge.from_url(server.url, "bench-model", max_concurrency=max(1, args.groups))
        walls = []
        for step in range(args.steps):
            judge.new_step()
            started = time.perf_counter()
            result = compute_bonus(batch, judge=judge, continue_from=lambda t, turn, seed: turn >= 2)
            walls.append(time.perf_counter() - started)
            accepted = result.report.count("accepted")
            print(
                f"step {step}: groups={args.groups} accepted={accepted}"
                f" judge calls={result.report.judge_stats['calls']:.0f}"
                f" wall {walls[-1]:.3f}s (first step includes imports and connection set-up)"
            )
        wall = sorted(walls)[len(walls) // 2]
        print(
            f"median compute_bonus wall {wall:.3f}s;"
            f" serial cost {args.groups} x {args.latency:.3f}s = {serial_cost:.3f}s;"
            f" ratio {wall / serial_cost:.3f}"
        )
        if args.serial:
            started = time.perf_counter()
            for i in range(args.groups):
                members = batch[4 * i : 4 * i + 4]
                judge.propose_sync(members[0], members[1:], SegmentRules())
            serial = time.perf_counter() - started
            print(f"serial propose_sync: {serial:.3f}s; concurrent/serial {wall / serial:.3f}")
            judge.close()


if __name__ == "__main__":
    main()
