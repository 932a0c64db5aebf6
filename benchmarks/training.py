"""One section: ``python benchmarks/training.py [--quick] [--out DIR]`` (= ``prover bench --only training``)."""

import sys

from prover_core.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--only", "training", *sys.argv[1:]]))
