"""``prover bench --only llm``: checks torch is there, then runs :mod:`prover_bench.llm.run`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from prover_bench.llm import TORCH_INSTALL

SIZES = ("quick", "medium", "full", "sgd", "adam")


def llm_command(size: str, out: str) -> int:
    """Run the LLM-shaped benchmark at ``size``; print its report. Exit 2 without torch."""
    if size not in SIZES:
        print(f"prover bench --only llm: unknown size {size!r}; choose from {', '.join(SIZES)}", file=sys.stderr)
        return 2
    if importlib.util.find_spec("torch") is None:
        print(
            "prover bench --only llm needs torch (not a prover-core dependency). Install the CPU build:\n"
            f"  {TORCH_INSTALL}\n"
            "(or `pip install -e './benchmarks[llm]'`, which asks your index for torch==2.13.0)",
            file=sys.stderr,
        )
        return 2
    from prover_bench.llm.run import ADAM, FULL, MEDIUM, QUICK, SGD, run_llm

    settings = {"quick": QUICK, "medium": MEDIUM, "full": FULL, "sgd": SGD, "adam": ADAM}[size]
    command = f"prover bench --only llm --size {size} --out {out}"
    print(run_llm(settings, Path(out), command))
    print(f"written to {out}/ (llm.md, results.json)")
    return 0
