"""Benchmarks against exact ground truth: credit accuracy, training and overhead (``prover bench``).

The environments (:mod:`~prover_core.bench.suite`) are small text MDPs whose success probability
under a softmax table policy is computed exactly (:mod:`~prover_core.bench.tabular`), so every
method's credit (:mod:`~prover_core.bench.methods`) can be scored against the true advantage.
Only numpy and prover_core are imported here; matplotlib and tqdm (the ``bench`` extra) are
imported when a plot is drawn or a progress bar shown.
"""

from prover_core.bench.run import FULL, QUICK, BenchResult, Settings, run_bench
from prover_core.bench.suite import SUITE, Corridor, by_name

__all__ = ["FULL", "QUICK", "SUITE", "BenchResult", "Corridor", "Settings", "by_name", "run_bench"]
