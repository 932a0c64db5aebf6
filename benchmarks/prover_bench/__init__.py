"""Benchmarks against exact ground truth: credit accuracy, training and overhead (``prover bench``).

The environments (:mod:`~prover_bench.suite`) are small text MDPs whose success probability
under a softmax table policy is computed exactly (:mod:`~prover_bench.tabular`), so every
method's credit (:mod:`~prover_bench.methods`) can be scored against the true advantage.
Only numpy and prover_core are imported here; matplotlib and tqdm (dependencies of this distribution,
``prover-bench``) are imported when a plot is drawn or a progress bar shown.
"""

from prover_bench.run import FULL, QUICK, BenchResult, Settings, run_bench
from prover_bench.suite import SUITE, Corridor, by_name

__version__ = "0.1.0"

__all__ = ["FULL", "QUICK", "SUITE", "BenchResult", "Corridor", "Settings", "by_name", "run_bench"]
