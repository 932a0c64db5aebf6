"""The ``prover`` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prover", description="Propose, Verify, Credit for agentic RL.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the whole loop on the embedded vault environment")
    demo.add_argument("--groups", type=int, default=16, help="groups in the batch (default 16)")
    demo.add_argument("--group-size", type=int, default=8, help="trajectories per group (default 8)")
    demo.add_argument("-k", type=int, default=8, help="continuations per boundary (default 8)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--judge", choices=("divergence", "random"), default="divergence")
    demo.add_argument("--json", action="store_true", help="print the report's metrics as JSON")
    args = parser.parse_args(argv)

    if args.command == "demo":
        from prover_core.demo.run import render, run_demo

        run = run_demo(args.groups, args.group_size, args.k, args.seed, args.judge)
        if args.json:
            print(json.dumps(run.result.report.metrics(), indent=2))
        else:
            print(render(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
