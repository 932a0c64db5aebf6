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
    demo.add_argument("--judge", choices=("anchor", "divergence", "random"), default="anchor")
    demo.add_argument("--json", action="store_true", help="print the report's metrics as JSON")
    demo.add_argument("--judge-url", help="use the LLM judge at this OpenAI-compatible base URL (e.g. .../v1)")
    demo.add_argument("--judge-model", help="the model name the LLM judge asks for (with --judge-url)")
    demo.add_argument("--judge-api-key-env", help="environment variable holding the API key (with --judge-url)")
    demo.add_argument("--judge-mode", choices=("structured", "agentic"), default="structured")
    bench = sub.add_parser("bench", help="benchmarks against exact ground truth: credit accuracy, training, overhead")
    bench.add_argument("--quick", action="store_true", help="a smaller run (under 2 minutes on 2 cores)")
    bench.add_argument("--out", default="bench-out", help="folder for bench.md, results.json and plots")
    bench.add_argument("--only", default="accuracy,training,overhead", help="comma-separated sections to run")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--no-progress", action="store_true", help="no progress bars")
    bench.add_argument("what", nargs="?", choices=("judges",), help="judges: the judge harness (judges x environments)")
    bench.add_argument(
        "--textworld", action=argparse.BooleanOptionalAction, help="judges: TextWorld games (default: not with --quick)"
    )
    bench.add_argument("--judge-url", help="judges: also the LLM judge at this OpenAI-compatible base URL")
    bench.add_argument("--judge-model", default="default", help="judges: the model name the LLM judge asks for")
    bench.add_argument("--judge-mode", choices=("structured", "agentic"), default="structured")
    bench.add_argument("--judge-max-tokens", type=int, default=1024, help="judges: the LLM judge's max_tokens")
    bench.add_argument("--groups", type=int, help="judges: groups per tabular environment and batch")
    bench.add_argument("--batches", type=int, help="judges: batches per tabular environment")
    args = parser.parse_args(argv)

    if args.command == "demo":
        from prover_core.demo.run import render, run_demo

        llm = None
        if args.judge_url:
            if not args.judge_model:
                parser.error("--judge-url needs --judge-model")
            from prover_core.judges.llm import LLMJudge

            llm = LLMJudge.from_url(
                args.judge_url, args.judge_model, api_key_env=args.judge_api_key_env, mode=args.judge_mode
            )
        run = run_demo(args.groups, args.group_size, args.k, args.seed, args.judge, custom_judge=llm)
        if args.json:
            print(json.dumps(run.result.report.metrics(), indent=2))
        else:
            print(render(run))
    elif args.command == "bench" and args.what == "judges":
        from prover_core.bench.judge_eval import judges_command

        judge = None
        if args.judge_url:
            from prover_core.judges.llm import LLMJudge

            judge = LLMJudge.from_url(
                args.judge_url, args.judge_model, mode=args.judge_mode, max_tokens=args.judge_max_tokens
            )
        return judges_command(args.quick, args.out, args.seed, args.textworld, judge, args.groups, args.batches)
    elif args.command == "bench":
        from prover_core.bench.cli import bench_command

        return bench_command(args.quick, args.out, args.only, args.seed, not args.no_progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
