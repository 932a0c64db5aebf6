"""``ProverConfig``: every knob of the method, with the paper's values as defaults."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from prover_core.data import SegmentRules


class ProverConfig(BaseModel):
    """Configuration of Propose, Verify, Credit.

    Defaults follow the paper (G=8 groups, K=8, lambda=1, segments of at most 4 turns with a
    nonterminal end, trigger on success rates strictly inside (0, 0.5), accept when Delta > 0).
    Fields marked *library* are this library's own and do not change the paper's method when left
    at their defaults.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Trigger: a group is eligible iff trigger_low < success rate < trigger_high (strict).
    trigger_low: float = Field(0.0, ge=0.0, le=1.0)
    trigger_high: float = Field(0.5, ge=0.0, le=1.0)

    # Propose: admissible segments.
    max_segment_turns: int = Field(4, ge=1)
    nonterminal_end: bool = True

    # Verify: K continuations from each boundary.
    k: int = Field(8, ge=1)
    acceptance: Literal["delta_positive"] = "delta_positive"
    paired_seeds: bool = True
    """*library*: continuation i from the pre and the post boundary share seed i (common random numbers)."""
    seed: int = 0
    """*library*: root of every continuation seed, so a step's verification is reproducible."""
    max_continuation_turns: int = Field(100, ge=1)
    """*library*: a continuation still running after this many turns is counted as failed to finish."""
    min_finished: int | None = Field(None, ge=1)
    """*library*: finished continuations needed at each boundary (default: all K)."""
    max_concurrency: int = Field(64, ge=1)
    """*library*: continuations in flight at once (matters for async policies)."""

    # Credit.
    lam: float = Field(1.0, ge=0.0)
    """lambda: the bonus added to each trainable token of an accepted segment is lam * Delta."""

    # GRPO baseline.
    normalize_std: bool = False
    """Divide the group-centred reward by the group's standard deviation (Dr. GRPO style off)."""
    std_eps: float = Field(1e-6, gt=0.0)

    strict: bool = False
    """*library*: raise on judge/restore/continuation failures instead of recording a skip."""

    @model_validator(mode="after")
    def _consistent(self) -> ProverConfig:
        if not self.trigger_low < self.trigger_high:
            raise ValueError(f"trigger_low ({self.trigger_low}) must be below trigger_high ({self.trigger_high})")
        if self.min_finished is not None and self.min_finished > self.k:
            raise ValueError(f"min_finished ({self.min_finished}) cannot exceed k ({self.k})")
        return self

    @property
    def segment_rules(self) -> SegmentRules:
        return SegmentRules(max_turns=self.max_segment_turns, nonterminal_end=self.nonterminal_end)

    @property
    def required_finished(self) -> int:
        return self.k if self.min_finished is None else self.min_finished
