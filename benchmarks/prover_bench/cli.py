"""``prover bench`` (and ``prover-bench``): the benchmarks' command line.

``prover bench`` in prover-core hands its arguments here when this distribution is installed. Bad arguments end in
argparse's usage message and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from prover_bench.run import FULL, QUICK, run_bench
from prover_core.cli import add_llm_judge_options, llm_judge_from_args, positive_int

SECTIONS = ("accuracy", "training", "overhead", "neural")


def bench_command(
    quick: bool,
    out: str,
    only: str,
    seed: int = 0,
    show_progress: bool = True,
    size: str | None = None,
    groups: int | None = None,
) -> int:
    """Run the benchmarks, print the Markdown report, write it (with JSON and plots) to ``out``.

    ``--only llm`` (the LLM-shaped benchmark, needs torch) runs on its own at ``size`` (default: ``quick``
    with ``--quick``, else ``full``); so does ``--only delta`` (Delta of choices against states in training).
    """
    sections = tuple(s.strip() for s in only.split(",") if s.strip())
    if "llm" in sections:
        if sections != ("llm",):
            print("prover bench: run --only llm on its own (it needs torch and its own time)", file=sys.stderr)
            return 2
        from prover_bench.llm.cli import llm_command

        return llm_command(size or ("quick" if quick else "full"), out)
    if "delta" in sections:
        if sections != ("delta",):
            print("prover bench: run --only delta on its own", file=sys.stderr)
            return 2
        from prover_bench.delta_training import delta_command

        return delta_command(quick, out, groups)
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        print(f"prover bench: unknown sections {unknown}; choose from {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    settings = dataclasses.replace(QUICK if quick else FULL, sections=sections, seed=seed)
    command = "prover bench" + (" --quick" if quick else "") + f" --out {out}"
    if sections != SECTIONS:
        command += f" --only {','.join(sections)}"
    if seed:
        command += f" --seed {seed}"
    result = run_bench(settings, Path(out), show_progress, command)
    print(result.markdown(command))
    print(f"written to {out}/ (bench.md, results.json{''.join(', ' + Path(p).name for p in result.plots)})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    bench = argparse.ArgumentParser(
        prog="prover bench", description="Benchmarks against exact ground truth: credit accuracy, training, overhead."
    )
    bench.add_argument("--quick", action="store_true", help="a smaller run (under 2 minutes on 2 cores)")
    bench.add_argument("--out", default="bench-out", help="folder for bench.md, results.json and plots")
    bench.add_argument(
        "--only",
        default="accuracy,training,overhead,neural",
        help="comma-separated sections to run (llm: the LLM-shaped benchmark, on its own; needs torch; delta: "
        "Delta of choices against states in training, on its own)",
    )
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument(
        "--size",
        choices=("quick", "medium", "full", "sgd", "adam"),
        help="--only llm: the size (default: full; quick with --quick; sgd: the plain-SGD factor; adam: its Adam "
        "twin with every ProVer arm)",
    )
    bench.add_argument("--no-progress", action="store_true", help="no progress bars")
    bench.add_argument("what", nargs="?", choices=("judges",), help="judges: the judge harness (judges x environments)")
    bench.add_argument("--textworld", action=argparse.BooleanOptionalAction, help="judges: TextWorld games")
    bench.add_argument(
        "--groups", type=positive_int, help="judges: groups per tabular environment and batch; delta: groups per step"
    )
    bench.add_argument("--batches", type=positive_int, help="judges: batches per tabular environment")
    bench.add_argument("--textworld-groups", type=positive_int, help="judges: groups per TextWorld game")
    bench.add_argument(
        "--held-out", action="store_true", help="judges: the held-out designs, games and seeds (seed + 7)"
    )
    bench.add_argument("-k", type=positive_int, help="judges: continuations per boundary (default 8)")
    bench.add_argument(
        "--delta-of",
        choices=("states", "choices"),
        default="states",
        help="judges: verify the state reached (the paper) or the segment's choices replayed with fresh transitions",
    )
    bench.add_argument(
        "--sampling",
        choices=("fixed", "adaptive"),
        default="fixed",
        help="judges: K continuations per boundary (the paper) or adaptive sampling (at most 1.5 K, stops early)",
    )
    add_llm_judge_options(bench)
    return bench


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.what == "judges":
        from prover_bench.judge_eval import judges_command

        judge = llm_judge_from_args(parser, args)
        return judges_command(
            args.quick,
            args.out,
            args.seed,
            args.textworld,
            judge,
            args.groups,
            args.batches,
            args.held_out,
            args.textworld_groups,
            args.delta_of,
            args.k,
            args.sampling,
        )
    return bench_command(args.quick, args.out, args.only, args.seed, not args.no_progress, args.size, args.groups)


if __name__ == "__main__":
    sys.exit(main())
