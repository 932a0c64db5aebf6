"""The LLM-shaped benchmark (``prover bench --only llm``, issue 22; design in docs/benchmarks.md).

A small causal transformer over tokens, started by behaviour cloning, trained with a per-token
clipped loss on procedurally generated text tasks with long horizons, a pivot among look-alike
decisions and stochastic transitions; ProVer runs through the library's public API.

torch is not a prover-core dependency: every module here imports without it (those that need it,
``model``, ``engine``, ``loss`` and ``train``, import torch inside their functions), and
:func:`~prover_bench.llm.cli.llm_command` checks that torch is installed before it runs anything.
"""

TORCH_INSTALL = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
"""How docs/install.md installs the CPU build of torch (the version CI pins)."""
