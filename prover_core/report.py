"""What happened to every group, and the flat metrics a trainer logs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from prover_core.data import Proposal, Verification

Status = Literal["not_eligible", "declined", "skipped", "rejected", "accepted"]
Stage = Literal["trigger", "propose", "verify", "credit"]


class GroupRecord(BaseModel):
    """The path of one group through trigger, propose, verify and credit.

    ``status`` is ``not_eligible`` (trigger said no), ``declined`` (the judge declined),
    ``skipped`` (something failed: ``stage`` and ``reason`` say what; the group keeps GRPO credit),
    ``rejected`` (verified, the acceptance rule said no) or ``accepted`` (bonus applied).
    """

    model_config = ConfigDict(frozen=True)

    group_id: str
    size: int
    successes: int
    status: Status
    reason: str = ""
    stage: Stage = "trigger"
    trajectory_id: str | None = None
    proposal: Proposal | None = None
    verification: Verification | None = None


class Report(BaseModel):
    """Counts and per-group records of one ``compute_bonus`` call."""

    groups: list[GroupRecord] = Field(default_factory=list)
    judge_calls: int = 0
    rollout_turns: int = 0
    """Policy turns in the batch itself (the GRPO rollout), the denominator of the extra cost."""
    judge_stats: dict[str, float] = Field(default_factory=dict)
    """Whatever the judge reports about itself (``judge.stats()``), e.g. tokens and retries."""

    def count(self, *statuses: Status) -> int:
        return sum(g.status in statuses for g in self.groups)

    @property
    def skips(self) -> list[GroupRecord]:
        """Groups that fell back to plain GRPO credit because something failed."""
        return [g for g in self.groups if g.status == "skipped"]

    @property
    def verifications(self) -> list[Verification]:
        return [g.verification for g in self.groups if g.verification is not None]

    def metrics(self, prefix: str = "prover/") -> dict[str, float]:
        """Flat, loggable numbers (counts, rates, cost)."""
        ver = self.verifications
        accepted = [g for g in self.groups if g.status == "accepted"]
        continuations = sum(v.pre_count + v.post_count + v.failed_continuations for v in ver)
        policy_turns = sum(v.policy_turns for v in ver)
        eligible = len(self.groups) - self.count("not_eligible")
        out: dict[str, float] = {
            "groups": len(self.groups),
            "groups_eligible": eligible,
            "groups_proposed": sum(g.proposal is not None for g in self.groups),
            "groups_verified": len(ver),
            "groups_accepted": len(accepted),
            "groups_rejected": self.count("rejected"),
            "groups_declined": self.count("declined"),
            "groups_skipped": self.count("skipped"),
            "acceptance_rate": len(accepted) / len(ver) if ver else 0.0,
            "judge_calls": self.judge_calls,
            "continuations": continuations,
            "continuations_failed": sum(v.failed_continuations for v in ver),
            "policy_turns": policy_turns,
            "extra_turn_share": policy_turns / self.rollout_turns if self.rollout_turns else 0.0,
            "mean_delta_accepted": (
                sum(g.verification.delta for g in accepted if g.verification) / len(accepted) if accepted else 0.0
            ),
            "mean_segment_turns": (
                sum(g.proposal.segment.num_turns for g in accepted if g.proposal) / len(accepted) if accepted else 0.0
            ),
        }
        out.update({f"judge/{k}": float(v) for k, v in self.judge_stats.items()})
        return {prefix + k: float(v) for k, v in out.items()}

    def summary(self) -> Mapping[str, int]:
        """How many groups ended in each status."""
        return {s: self.count(s) for s in ("not_eligible", "declined", "skipped", "rejected", "accepted")}
