"""One section: ``python benchmarks/credit_accuracy.py [--quick] [--out DIR]`` (= ``prover bench --only accuracy``)."""

import sys

from prover_core.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--only", "accuracy", *sys.argv[1:]]))
