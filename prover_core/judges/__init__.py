"""Judges that nominate a segment (stage 2). ``RandomJudge`` is the paper's ablation;
``DivergenceJudge`` is a rule that needs no model."""

from prover_core.judges.divergence import DivergenceJudge
from prover_core.judges.random_segment import RandomJudge

__all__ = ["DivergenceJudge", "RandomJudge"]
