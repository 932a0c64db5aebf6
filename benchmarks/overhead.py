"""One section: ``python benchmarks/overhead.py [--quick] [--out DIR]`` (= ``prover bench --only overhead``)."""

import sys

from prover_core.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--only", "overhead", *sys.argv[1:]]))
