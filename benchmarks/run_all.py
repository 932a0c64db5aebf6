"""Every benchmark: ``python benchmarks/run_all.py [--quick] [--out DIR]`` (same as ``prover bench``)."""

import sys

from prover_core.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
