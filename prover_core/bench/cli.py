"""The ``prover bench`` subcommand's body (the parser lives in :mod:`prover_core.cli`)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from prover_core.bench.run import FULL, QUICK, run_bench

SECTIONS = ("accuracy", "training", "overhead", "neural")


def bench_command(quick: bool, out: str, only: str, seed: int = 0, show_progress: bool = True) -> int:
    """Run the benchmarks, print the Markdown report, write it (with JSON and plots) to ``out``."""
    sections = tuple(s.strip() for s in only.split(",") if s.strip())
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
