"""The ``prover bench`` subcommand's body (the parser lives in :mod:`prover_core.cli`)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from prover_core.bench.run import FULL, QUICK, run_bench

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
        from prover_core.bench.llm.cli import llm_command

        return llm_command(size or ("quick" if quick else "full"), out)
    if "delta" in sections:
        if sections != ("delta",):
            print("prover bench: run --only delta on its own", file=sys.stderr)
            return 2
        from prover_core.bench.delta_training import delta_command

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
