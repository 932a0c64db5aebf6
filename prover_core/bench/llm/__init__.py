"""The LLM-shaped benchmark (``prover bench --only llm``, issue 22; design in docs/benchmarks.md).

A small causal transformer over tokens, started by behaviour cloning, trained with a per-token
clipped loss on procedurally generated text tasks with long horizons, a pivot among look-alike
decisions and stochastic transitions; ProVer runs through the library's public API.

torch is not a prover-core dependency: :mod:`~prover_core.bench.llm.tasks`,
:mod:`~prover_core.bench.llm.credit` and :mod:`~prover_core.bench.llm.report` import only numpy and
prover_core; the modules that need torch (``model``, ``engine``, ``loss``, ``train``, ``run``) are
imported only by :func:`~prover_core.bench.llm.cli.llm_command` after it has checked that torch is
installed.
"""

TORCH_INSTALL = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
"""How docs/install.md installs the CPU build of torch (the version CI pins)."""
