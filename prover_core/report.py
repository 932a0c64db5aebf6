"""What happened to every group, and the flat metrics a trainer logs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from prover_core.acceptance import Direction as Direction  # re-exported: defined beside the rules
from prover_core.batch_checks import WARNING_KINDS, BatchWarning
from prover_core.chance import Lift, LiftWindow
from prover_core.data import Proposal, Verification

__all__ = [
    "FAILURE_KINDS",
    "FailureKind",
    "GroupRecord",
    "Report",
    "Stage",
    "Status",
    "TIMED_STAGES",
    "VerifyStats",
]

Status = Literal["not_eligible", "unverified", "declined", "skipped", "rejected", "accepted"]
"""What became of a group, from the trigger to the credit."""
Stage = Literal["trigger", "propose", "verify", "credit"]
"""The stage that settled a group's record (where it was left out, declined or skipped, or credited)."""
FailureKind = Literal["turn_limit", "timeout", "worker_lost", "restore", "invalid_outcome", "budget", "error"]
"""Why a continuation failed, as counted in :class:`VerifyStats`."""
TIMED_STAGES = ("propose", "verify", "outside", "total")
"""The wall times the report logs (``prover/time/<name>``): the ``propose`` and ``verify`` stages, the time
``outside`` them (validation, the trigger, GRPO and the bonus), and the ``total``."""
FAILURE_KINDS: tuple[FailureKind, ...] = (
    "turn_limit",
    "timeout",
    "worker_lost",
    "restore",
    "invalid_outcome",
    "budget",
    "error",
)
"""Every :data:`FailureKind`, in report order."""


class VerifyStats(BaseModel):
    """Cost and stopping of one verification.

    ``spent`` counts continuations launched (finished or failed; a terminal post boundary, whose
    outcome is recorded, costs nothing); ``budget`` is the most it could have launched (2 x K for
    fixed sampling, 2 x ``adaptive_max_k`` for adaptive). ``stop`` says why sampling ended: ``fixed``,
    ``accept``, ``futile``, ``budget`` (adaptive: its most pairs; fixed: the call's turn budget stopped some
    continuations, :mod:`prover_core.budget`), ``curtailed`` or ``incomplete`` (too many failures).
    """

    model_config = ConfigDict(frozen=True)

    sampling: Literal["fixed", "adaptive"] = "fixed"
    rule: str = "delta_positive"
    direction: Direction = "gain"
    budget: int = 0
    fixed_budget: int = 0
    """What fixed-K sampling would launch (2 x K): the yardstick of the savings."""
    spent: int = 0
    cancelled: int = 0
    """Continuations launched and then stopped (or their results left unused) because the other boundary's
    outcomes had settled the decision (``curtail_mode="overlap"``); counted in ``spent``."""
    rounds: int = 1
    """Sampling rounds: batches of continuations launched one after another (2 when ``curtail_mode="wait"`` ran
    the second boundary; adaptive sampling's rounds)."""
    policy_rounds: int = 0
    """The round of sequential policy calls, counted from the start of the call's verification, at which this
    verification's last continuation ended (:class:`~prover_core.clock.PolicyClock`)."""
    stop: str = "fixed"
    budget_turns: int = 0
    """Policy turns of continuations the call's turn budget then stopped (``max_extra_share``): spent, no outcome;
    counted in the verification's ``policy_turns``."""
    policy_tokens: int = 0
    """Policy tokens its continuations generated, counted under a token cap (``max_extra_token_share``: a policy
    that reports them, :class:`~prover_core.budget.TokenPolicy`); 0 otherwise."""
    budget_tokens: int = 0
    """Policy tokens of continuations the call's budgets then stopped (under a token cap); in ``policy_tokens``."""
    failures: dict[str, int] = Field(default_factory=dict)
    """Failed continuations by kind (see ``FAILURE_KINDS``)."""
    accept_evidence: float | None = None
    futility_evidence: float | None = None


class GroupRecord(BaseModel):
    """The path of one group through trigger, propose, verify and credit.

    ``status`` is ``not_eligible`` (trigger said no), ``unverified`` (eligible, left out by
    ``max_verified_groups`` or by the turn budget's plan, ``budget_plan``; GRPO credit),
    ``declined`` (the judge declined),
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
    direction: Direction = "gain"
    """``gain``: the paper's positive credit on a successful run; ``drop``: negative credit on a failed run."""
    verify_stats: VerifyStats | None = None
    uncredited_turns: tuple[int, ...] = ()
    """Turns of an accepted segment whose token span is empty: their credit reaches no token."""
    control: bool = False
    """The group verified a random control segment of the judge's length in place of the judge's
    (``ProverConfig.control_share``): ``proposal`` is the control's, ``reason`` names the judge's."""
    credit: float = 0.0
    """The credit the group's accepted segment added: ``lam * |Delta| * (segment turns)`` (0 unless accepted)."""


class Report(BaseModel):
    """Counts and per-group records of one ``compute_bonus`` call."""

    groups: list[GroupRecord] = Field(default_factory=list)
    judge_calls: int = 0
    rollout_turns: int = 0
    """Policy turns in the batch itself (the GRPO rollout), the denominator of the extra cost."""
    rollout_episodes: int = 0
    """Trajectories in the batch (the GRPO rollout's episodes)."""
    rollout_rounds: int = 0
    """The batch's longest trajectory in turns: the rollout's sequential policy calls when each turn of every
    episode is one batched call, the yardstick of ``verify_policy_rounds``."""
    judge_stats: dict[str, float] = Field(default_factory=dict)
    """Whatever the judge reports about itself (``judge.stats()``), e.g. tokens and retries."""
    batch_warnings: list[BatchWarning] = Field(default_factory=list)
    """Batch shapes and token spans that cannot be meant (:mod:`prover_core.batch_checks`), each logged once."""
    timings: dict[str, float] = Field(default_factory=dict)
    """Wall seconds of the call: ``propose``, ``verify``, ``outside`` (everything outside those two stages) and
    ``total`` (see :mod:`prover_core.progress`); logged as ``time/<name>`` (0 where nothing
    was measured)."""
    engine_stats: dict[str, float] = Field(default_factory=dict)
    """Whatever the continuation policy reports (``await policy.report_stats()``), e.g. the parity gaps."""
    turn_budget: int | None = None
    """The call's cap on verification's policy turns (``max_extra_share x rollout_turns``), ``None`` uncapped."""
    rollout_tokens: int = 0
    """The batch's trainable action tokens as the host recorded them (every turn's ``token_span`` length, summed):
    the denominator of ``extra_token_share``."""
    token_budget: int | None = None
    """The call's cap on verification's policy tokens (``floor(max_extra_token_share x rollout_tokens)``), ``None``
    uncapped."""
    env_close_failures: int = 0
    """``close()`` calls of environments the restorers made that raised during this call
    (``ReplayEnv.close_failures`` / ``SnapshotEnv.close_failures``, counted here per call; logged as
    ``env_close_failures``)."""
    credit_mass: float = 0.0
    """``sum |bonus|`` over the batch's trainable tokens (:func:`~prover_core.credit.credit_masses`), the numerator of
    ``credit_share``."""
    advantage_mass: float = 0.0
    """``sum |A_GRPO|`` over the same tokens: the base advantage's size, the denominator of ``credit_share``
    (``compute_bonus``'s own GRPO; an adapter replaces both sums with its host's advantage, :meth:`with_masses`)."""
    lift: Lift | None = None
    """The judge against chance (``ProverConfig.control_share > 0``): the counts of a running window across steps
    (:meth:`windowed`), or this call's alone (:attr:`step_lift`); logged as ``judge_lift`` and its interval."""

    @property
    def step_lift(self) -> Lift:
        """This call's judge and control segments: decided (accepted or rejected) and accepted, positive credit."""
        decided = [g for g in self.groups if g.direction == "gain" and g.status in ("accepted", "rejected")]
        judge = [g for g in decided if not g.control]
        control = [g for g in decided if g.control]
        return Lift(
            sum(g.status == "accepted" for g in judge),
            len(judge),
            sum(g.status == "accepted" for g in control),
            len(control),
        )

    def windowed(self, window: LiftWindow) -> Report:
        """This report with :attr:`step_lift` added to ``window`` and ``lift`` the window's total."""
        return self.model_copy(update={"lift": window.add(self.step_lift)})

    def with_masses(self, credit_mass: float, advantage_mass: float) -> Report:
        """This report with the credit share's two sums measured elsewhere (a host's advantage and bonus tensors)."""
        return self.model_copy(update={"credit_mass": credit_mass, "advantage_mass": advantage_mass})

    @property
    def credit_share(self) -> float:
        """``credit_mass / advantage_mass``: how large the credit is next to the advantage it is added to (0 when the
        advantage is 0 everywhere, where the batch has no mixed group and so no credit either)."""
        return self.credit_mass / self.advantage_mass if self.advantage_mass else 0.0

    @property
    def trigger_share(self) -> float:
        """The share of the batch's groups inside the trigger band (either sign of credit; capped ones included)."""
        return 1.0 - self.count("not_eligible") / len(self.groups) if self.groups else 0.0

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
        """Flat, loggable numbers (counts, rates, cost).

        Cost: ``continuations`` launched and ``policy_turns`` spent by verification this step;
        ``extra_turn_share`` = policy turns / the rollout's turns (the paper reports +2.4% to +16.8%
        extra policy tokens); ``continuation_share`` = continuations / rollout episodes;
        ``continuations_saved_share`` = 1 - continuations / the budget fixed-K sampling would spend;
        ``continuations_cancelled``: launched, then stopped by curtailment (their turns are in ``policy_turns``).
        Latency: ``verify_policy_rounds``, the rounds of sequential policy calls verification put on the step's
        critical path (:class:`~prover_core.clock.PolicyClock`), next to ``rollout_policy_rounds``, the rollout's
        (its longest trajectory's turns).
        Failures are counted by kind (``continuations_failed/<kind>``). Group counts and
        ``mean_delta_accepted`` cover positive credit; ``negative/*`` covers negative credit.
        Everything about the judge is under ``judge/``: ``judge/propose_calls`` (how many groups it
        was asked about, any judge) and whatever the judge
        reports itself (``judge/<name>``, e.g. the LLM judge's ``judge/calls``, its HTTP requests).
        ``time/propose``, ``time/verify``, ``time/outside`` (the rest of the call: validation, trigger, GRPO and
        the bonus) and ``time/total``: wall seconds.
        Budget (``max_extra_share`` set): ``turn_budget`` (the cap in policy turns), ``groups_skipped_budget``
        (groups the budget left undecided: GRPO credit) and ``budget_wasted_turns`` (every turn spent on a group the
        cap cut short and left undecided, plus the stopped continuations' turns of the groups it cut and that were
        decided all the same; in ``policy_turns``). In tokens (``max_extra_token_share`` set), beside them:
        ``token_budget``, ``policy_tokens`` (the tokens verification's continuations generated),
        ``extra_token_share`` = policy tokens / the rollout's action tokens and ``budget_wasted_tokens``.
        Size: ``credit_share`` = sum |bonus| / sum |A_GRPO| over the batch's trainable tokens, how large the credit
        is next to the update's advantage (:attr:`credit_share`; the paper's settings in the LLM-shaped benchmark
        gave 0.3% at its first step), and ``trigger_share``, the share of the batch's groups inside the trigger band.
        Return: ``credit_per_extra_turn`` = the credit the call added per policy turn verification spent,
        ``sum over accepted groups of lam * |Delta| * (segment turns) / policy_turns`` (0 when no turn was spent).
        With controls (``lift`` set): ``judge_lift``, ``judge_lift_low``/``_high`` (its 95% interval),
        ``judge_accept_rate``, ``control_accept_rate``, ``judge_verified``, ``control_verified``
        (:meth:`~prover_core.chance.Lift.metrics`; NaN until both kinds have been decided) and ``groups_control``
        (this call's control groups).
        The continuation policy's own figures follow unprefixed (``engine_logprob_gap_mean`` and the
        other figures of :class:`~prover_engine.parity.ParityMonitor`).
        """
        gain = [g for g in self.groups if g.direction == "gain"]
        drop = [g for g in self.groups if g.direction == "drop"]
        ver = [g.verification for g in gain if g.verification is not None]
        every = self.verifications
        accepted = [g for g in gain if g.status == "accepted"]
        negative = [g for g in drop if g.status == "accepted"]
        continuations = sum(_spent(g) for g in self.groups if g.verification is not None)
        stats = [g.verify_stats for g in self.groups if g.verify_stats is not None]
        fixed_budget = sum(_fixed_budget(g) for g in self.groups if g.verification is not None)
        policy_turns = sum(v.policy_turns for v in every)
        eligible = len(self.groups) - self.count("not_eligible")
        failures: dict[str, int] = dict.fromkeys(FAILURE_KINDS, 0)
        for g in self.groups:
            if g.verify_stats is not None:
                for kind, n in g.verify_stats.failures.items():
                    failures[kind] = failures.get(kind, 0) + n
        out: dict[str, float] = {
            "groups": len(self.groups),
            "groups_eligible": eligible,
            "groups_unverified": sum(g.status == "unverified" for g in gain),
            "groups_proposed": sum(g.proposal is not None for g in gain),
            "groups_verified": len(ver),
            "groups_accepted": len(accepted),
            "groups_rejected": sum(g.status == "rejected" for g in gain),
            "groups_declined": sum(g.status == "declined" for g in gain),
            "groups_skipped": sum(g.status == "skipped" for g in gain),
            "acceptance_rate": len(accepted) / len(ver) if ver else 0.0,
            "continuations": continuations,
            "continuations_failed": sum(v.failed_continuations for v in every),
            "continuations_saved_share": 1.0 - continuations / fixed_budget if fixed_budget else 0.0,
            "continuations_cancelled": sum(s.cancelled for s in stats),
            "verify_policy_rounds": max((s.policy_rounds for s in stats), default=0),
            "rollout_policy_rounds": self.rollout_rounds,
            "continuation_share": continuations / self.rollout_episodes if self.rollout_episodes else 0.0,
            "policy_turns": policy_turns,
            "extra_turn_share": policy_turns / self.rollout_turns if self.rollout_turns else 0.0,
            "mean_delta_accepted": (
                sum(g.verification.delta for g in accepted if g.verification) / len(accepted) if accepted else 0.0
            ),
            "uncredited_turns": sum(len(g.uncredited_turns) for g in self.groups),
            "credit_share": self.credit_share,
            "env_close_failures": self.env_close_failures,
            "trigger_share": self.trigger_share,
            "mean_segment_turns": (
                sum(g.proposal.segment.num_turns for g in accepted if g.proposal) / len(accepted) if accepted else 0.0
            ),
        }
        if self.turn_budget is not None:
            out["turn_budget"] = self.turn_budget
            out["groups_skipped_budget"] = _skipped_by_budget(self.groups)
            out["budget_wasted_turns"] = sum(_wasted_by_budget(g) for g in self.groups)
        if self.token_budget is not None:
            policy_tokens = sum(s.policy_tokens for s in stats)
            out["token_budget"] = self.token_budget
            out["policy_tokens"] = policy_tokens
            out["extra_token_share"] = policy_tokens / self.rollout_tokens if self.rollout_tokens else 0.0
            out["groups_skipped_budget"] = _skipped_by_budget(self.groups)
            out["budget_wasted_tokens"] = sum(_wasted_by_budget(g, tokens=True) for g in self.groups)
        out["credit_per_extra_turn"] = sum(g.credit for g in self.groups) / policy_turns if policy_turns else 0.0
        if self.lift is not None:
            out.update(self.lift.metrics(prefix=""))
            out["groups_control"] = sum(g.control for g in self.groups)
        out.update({f"continuations_failed/{k}": float(v) for k, v in failures.items()})
        if drop:
            out.update(
                {
                    "negative/groups": len(drop),
                    "negative/groups_verified": sum(g.verification is not None for g in drop),
                    "negative/groups_accepted": len(negative),
                    "negative/mean_delta_accepted": (
                        sum(g.verification.delta for g in negative if g.verification) / len(negative)
                        if negative
                        else 0.0
                    ),
                }
            )
        warned = {w.kind: w.count for w in self.batch_warnings}
        out.update({f"batch_warnings/{kind}": warned.get(kind, 0) for kind in WARNING_KINDS})
        out.update({f"judge/{k}": float(v) for k, v in self.judge_stats.items()})
        out.update({k: float(v) for k, v in self.engine_stats.items()})
        out["judge/propose_calls"] = self.judge_calls
        out.update({f"time/{name}": self.timings.get(name, 0.0) for name in TIMED_STAGES})
        return {prefix + k: float(v) for k, v in out.items()}

    def summary(self) -> Mapping[str, int]:
        """How many groups ended in each status."""
        return {s: self.count(s) for s in ("not_eligible", "unverified", "declined", "skipped", "rejected", "accepted")}


def _skipped_by_budget(groups: list[GroupRecord]) -> int:
    """Groups a cap cut short and left undecided (skipped, GRPO credit)."""
    return sum(
        g.status == "skipped" and g.verify_stats is not None and g.verify_stats.failures.get("budget", 0) > 0
        for g in groups
    )


def _wasted_by_budget(group: GroupRecord, tokens: bool = False) -> int:
    """The turns (``tokens``: the policy tokens) the call's caps made worthless in ``group``: every one its
    verification spent when a cap cut it short and it could then not be decided (skipped), else those of the
    continuations the cap stopped."""
    stats, v = group.verify_stats, group.verification
    if stats is None or v is None or not stats.failures.get("budget"):
        return 0
    if tokens:
        return stats.policy_tokens if group.status == "skipped" else stats.budget_tokens
    return v.policy_turns if group.status == "skipped" else stats.budget_turns


def _spent(group: GroupRecord) -> int:
    """Continuations launched for ``group`` (from its stats, else from its verification's counts)."""
    if group.verify_stats is not None:
        return group.verify_stats.spent
    v = group.verification
    return 0 if v is None else v.pre_count + v.post_count + v.failed_continuations


def _fixed_budget(group: GroupRecord) -> int:
    """What fixed-K sampling spends on ``group``: 2 x K."""
    stats, v = group.verify_stats, group.verification
    if stats is not None:
        return stats.fixed_budget
    return 0 if v is None else v.pre_count + v.post_count + v.failed_continuations
