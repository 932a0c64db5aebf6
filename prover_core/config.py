"""``ProverConfig``: every knob of the method, with the paper's values as defaults."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from prover_core._finite import FINITE
from prover_core.data import SegmentRules

__all__ = ["ProverConfig"]


class ProverConfig(BaseModel):
    """Configuration of Propose, Verify, Credit.

    Defaults follow the paper (G=8 groups, lambda=1, segments of at most 4 turns with a nonterminal end,
    trigger on success rates strictly inside (0, 0.5), accept when Delta > 0) except ``k``: 4, not the
    paper's 8 (the same learning at half the verification cost, docs/benchmarks.md), and ``curtail`` (on: the
    paper's decisions and bonuses from fewer policy turns, in one round). Fields marked *library* are this
    library's own and do not change the paper's decisions when left at their defaults.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", **FINITE)

    # Trigger: a group is eligible iff trigger_low < success rate < trigger_high (strict).
    trigger_low: float = Field(default=0.0, ge=0.0, le=1.0)
    trigger_high: float = Field(default=0.5, ge=0.0, le=1.0)

    max_verified_groups: int | None = Field(default=None, ge=0)
    """*library*: verify at most this many eligible groups per call (a uniformly random subset, seeded by ``seed``);
    the others keep plain GRPO credit, recorded as ``unverified``. A hard cap on verification cost:
    each verified group costs about ``2 k`` continuations. ``None`` (the paper): every eligible group."""

    control_share: float = Field(default=0.0, ge=0.0, le=1.0)
    """*library*: the share of the groups eligible for positive credit that verify, in place of the judge's segment,
    a uniformly random admissible segment of the same length on the same run (the paper's random-segment
    ablation run inside training, :mod:`prover_core.chance`); their accepted credit is used like any other. The
    acceptance of the judge's segments minus the controls' is ``prover/judge_lift``, with its 95% interval.
    ``0`` (default): no controls. Which groups are controls is a hash of ``seed``, the group id and its examined
    run's content, so each step draws afresh even where group ids repeat from step to step."""
    lift_throttle: bool = False
    """*library* (off): with ``control_share``, in a :class:`~prover_core.run.ProverRun` (each adapter's), which
    keeps the lift window across steps: while the window's lift interval holds 0 or lies below it (the judge not
    shown better than chance), the judge's own groups are verified only at the controls' rate (a seeded
    ``control_share / (1 - control_share)`` of them), the rest ``unverified``; once the interval lies above 0 every
    group is verified again."""
    lift_window: int = Field(default=50, ge=1)
    """*library*: training steps over which ``prover/judge_lift`` is pooled (the ``LiftWindow`` of a
    :class:`~prover_core.run.ProverRun`)."""

    max_extra_share: float | None = Field(default=None, ge=0.0, le=1.0)
    """*library*: a hard cap on verification's extra policy turns per call, as a share of the rollout's policy
    turns (every turn of every trajectory of the batch, ``Report.rollout_turns``): at most
    ``floor(max_extra_share x rollout_turns)`` turns are spent (:mod:`prover_core.budget`); at most 1 (a value
    above it is refused as a likely percent: ``0.1`` is 10%). A group whose
    continuations the cap stopped is decided only where the outcomes in settle it, else skipped (reason
    ``budget``; GRPO credit). ``None`` (default): uncapped. ``max_verified_groups`` still applies first."""

    budget_plan: Literal["off", "batch", "random", "planner"] = "batch"
    """*library*: under ``max_extra_share``, which proposed groups to verify. ``off``: all, together (the cap stops
    continuations where it is reached). The others plan first: groups in an order (``batch``, the default: the batch's;
    ``random``: a hash of seed, group id and the examined run's content; ``planner``: expected credit per expected
    turn, ``L (1 - p) / cost`` for a gain with segment length ``L`` and success rate ``p``, ``L p / cost`` for a
    drop) are kept while their expected cost (:func:`~prover_core.budget.expected_cost`) fits the cap; the rest
    are ``unverified`` (GRPO credit). Where continuations take their turns one by one (env and policy), the kept
    groups are then admitted while what is left covers each one's cautious reservation
    (:class:`~prover_core.budget.Admission`, :func:`~prover_core.budget.upper_cost`), each spending its own share
    first, so near the cap they run in waves rather than all be cut short. Every plan beat ``off`` at caps of 5-20%
    on the exact suites, and none beat the batch's order at every cap (docs/verification.md,
    ``benchmarks/budget_rules.py``)."""

    # Propose: admissible segments.
    max_segment_turns: int = Field(default=4, ge=1)
    nonterminal_end: bool = True

    # Verify: K continuations from each boundary.
    k: int = Field(default=4, ge=1)
    """Continuations per boundary. *library* default 4 (the paper: 8): on the judge harness K = 4 keeps 90-100% of
    K = 8's credited decision value, and in training (``prover bench --only delta``) it learns as fast per step in
    every family, at half the cost. ``ProverConfig(k=8)`` is the paper's."""
    acceptance: Literal["delta_positive", "beta_posterior", "lower_confidence_bound"] = "delta_positive"
    """How a fixed-K verification decides (see :mod:`prover_core.acceptance`): the paper's ``Delta > 0``,
    ``P(p_post > p_pre) >= posterior_threshold`` under Beta(1,1) priors, or Clopper-Pearson bounds at
    level ``lcb_alpha`` (false credit at most ``lcb_alpha``)."""
    posterior_threshold: float = Field(default=0.9, gt=0.0, lt=1.0)
    """*library*: threshold of the ``beta_posterior`` rule."""
    lcb_alpha: float = Field(default=0.1, gt=0.0, lt=1.0)
    """*library*: level of the ``lower_confidence_bound`` rule."""
    sampling: Literal["fixed", "adaptive"] = "fixed"
    """*library*: ``fixed`` runs K continuations per boundary (the paper); ``adaptive`` draws pairs in rounds
    and stops by the anytime-valid test of :mod:`prover_core.sequential` (its own decision rule)."""
    curtail: bool = True
    """*library*: fixed sampling does not finish the other boundary's K continuations once the boundary acceptance
    needs higher (post for a gain, pre for a drop) has shown that no outcome of theirs could be accepted
    (curtailment): the same decisions and bonuses as running all ``2 K``, from fewer policy turns. A curtailed
    verification is rejected with ``Verification.curtailed`` set and no ``delta``. Adaptive sampling curtails by
    its own test."""
    curtail_mode: Literal["overlap", "wait"] = "overlap"
    """*library*: how curtailment schedules the two boundaries. ``overlap``: both start together and the other
    boundary's continuations are stopped the moment the first boundary's outcomes settle the decision: one round,
    no more sequential policy calls than the longest continuation needs, for more policy turns than ``wait`` where
    the first boundary often settles it late. ``wait``: the other boundary starts only after the first has ended:
    the fewest policy turns, in up to twice the rounds. A ``continue_from`` hook or an executor that runs
    continuations elsewhere cannot be stopped from here and always waits (docs/verification.md, "Latency")."""
    delta_of: Literal["states", "choices"] = "states"
    """What ``Delta`` measures. ``states`` (the paper): post continuations start from ``s_{r+1}``, the state the
    recorded run reached, so ``Delta`` estimates ``V(s_{r+1}) - V(s_l)``: the segment's choices *and* the luck of
    its recorded transitions. *library* ``choices``: post continuations restore ``s_l`` and take the segment's
    recorded actions again with fresh transitions while the run stays on the recorded path (then the policy acts),
    so ``Delta`` estimates what the choices added (``Q(s_l, a_l) - V(s_l)`` for one turn) and luck earns nothing.
    Needs env and policy, LocalExecutor/RayExecutor, or a ``continue_from`` (or executor) accepting ``replay=n``."""
    adaptive_alpha: float = Field(default=0.3, gt=0.0, lt=1.0)
    """*library*: adaptive sampling credits a segment without gain with probability at most this, whatever
    the rates and the stopping (a worst-case bound; the exact rates are far lower, see docs/verification.md)."""
    adaptive_beta: float = Field(default=0.2, gt=0.0, lt=1.0)
    """*library*: adaptive sampling stops for futility on a gain >= ``adaptive_min_effect`` at most this often."""
    adaptive_min_effect: float = Field(default=0.5, gt=0.0, lt=1.0)
    adaptive_round: int = Field(default=2, ge=1)
    """*library*: continuation pairs drawn per round (each round runs 2 x this many concurrently)."""
    adaptive_max_k: int | None = Field(default=None, ge=1)
    """*library*: most continuations per boundary under adaptive sampling (default: ceil(1.5 k), 6 for k = 4)."""
    continuation_timeout_s: float | None = Field(default=None, gt=0.0)
    """*library*: wall-time limit of one continuation; one that runs longer counts as failed to finish."""
    judge_timeout_s: float | None = Field(default=600.0, gt=0.0)
    """*library*: wall-time limit of one judge call; a judge that takes longer skips its group ("judge timed
    out"). Synchronous judges run in threads (concurrently); a blocked one is abandoned, not killed."""
    paired_seeds: bool = True
    """*library*: continuation i from the pre and the post boundary share seed i (common random numbers)."""
    pairing: Literal["sequential", "turn"] = "sequential"
    """*library*: with paired seeds, continuations draw in order ("sequential") or keyed by absolute turn ("turn",
    prover_core/pairing.py: needs an env whose restored episodes expose .env.reseed)."""
    seed: int = 0
    """*library*: root of every continuation seed. Each trajectory's seeds also derive from its id and a digest
    of its content (reset spec, observations, actions): the same batch gets the same seeds (reproducible), and
    one config reused every step of a training loop still gives each step's new episodes new seeds."""
    max_continuation_turns: int = Field(default=100, ge=1)
    """*library*: a continuation still running after this many turns is counted as failed to finish."""
    min_finished: int | None = Field(default=None, ge=1)
    """*library*: finished continuations needed at each boundary (default: all K)."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """*library*: continuations in flight at once. ``None`` (default): every continuation of the call at once, so a
    batching policy serves each round of all of them in one call and verification takes one round of policy calls
    at any batch size (``benchmarks/verify_rounds.py``). A number bounds the batch of one policy call (a server that
    needs it): continuations beyond it wait for a slot, and each wave adds about the longest continuation's turns
    in rounds of latency. Verification launches at most ``2 k`` per group (``2 adaptive_max_k``, adaptive)."""

    # Credit.
    lam: float = Field(default=1.0, ge=0.0)
    """lambda: the bonus added to each trainable token of an accepted segment is lam * Delta."""
    negative_credit: bool = False
    """*library* (beyond the paper): for groups with success rate in (negative_trigger_low, negative_trigger_high),
    segment the longest failed run, verify the drop and subtract ``negative_lam * |Delta|`` on it."""
    negative_trigger_low: float = Field(default=0.5, ge=0.0, le=1.0)
    negative_trigger_high: float = Field(default=1.0, ge=0.0, le=1.0)
    negative_lam: float | None = Field(default=None, ge=0.0)
    """*library*: lambda of negative credit (default: ``lam``)."""

    # GRPO baseline.
    normalize_std: bool = False
    """Divide the group-centred reward by the group's standard deviation (Dr. GRPO style off)."""
    std_eps: float = Field(default=1e-6, gt=0.0)

    episode_keys: tuple[str, ...] = ("seed", "member")
    """*library*: reset-spec keys that differ between the runs of one task (the episode's randomness, the run's
    index in its group: ``prover_trl.member_reset`` writes ``member``). The batch check that warns when one group
    holds several tasks (:mod:`prover_core.batch_checks`) ignores them; name your own here."""

    strict: bool = False
    """*library*: raise on judge/restore/continuation failures instead of recording a skip."""

    @model_validator(mode="after")
    def _consistent(self) -> ProverConfig:
        if not self.trigger_low < self.trigger_high:
            raise ValueError(f"trigger_low ({self.trigger_low}) must be below trigger_high ({self.trigger_high})")
        if self.min_finished is not None and self.min_finished > self.k:
            raise ValueError(f"min_finished ({self.min_finished}) cannot exceed k ({self.k})")
        if self.sampling == "adaptive" and self.acceptance != "delta_positive":
            raise ValueError(
                "sampling='adaptive' decides by its own anytime-valid test; leave acceptance at its default "
                "(set adaptive_alpha instead)"
            )
        if not self.negative_trigger_low < self.negative_trigger_high:
            raise ValueError("negative_trigger_low must be below negative_trigger_high")
        return self

    @model_validator(mode="before")
    @classmethod
    def _share_not_percent(cls, data: object) -> object:
        share = data.get("max_extra_share") if isinstance(data, dict) else None
        if isinstance(share, int | float) and not isinstance(share, bool) and share > 1:
            raise ValueError(
                f"max_extra_share={share} is a share of the rollout's policy turns (0.2 = 20%): above 1 it would let "
                f"verification spend more turns than the rollout itself, so it is refused as a likely percent; write "
                f"{share / 100:g} for {share:g}%, or None for no cap"
            )
        return data

    def concurrency_for(self, groups: int) -> int:
        """Continuations in flight at once for ``groups`` verifications: ``max_concurrency``, or (``None``) every
        continuation they can launch, ``2 x max(k, max_adaptive_k)`` each."""
        if self.max_concurrency is not None:
            return self.max_concurrency
        return max(1, 2 * max(self.k, self.max_adaptive_k) * groups)

    @property
    def segment_rules(self) -> SegmentRules:
        return SegmentRules(max_turns=self.max_segment_turns, nonterminal_end=self.nonterminal_end)

    @property
    def required_finished(self) -> int:
        return self.k if self.min_finished is None else self.min_finished

    @property
    def allowed_failures(self) -> int:
        """Continuations per boundary that may fail to finish (``k - required_finished``)."""
        return self.k - self.required_finished

    @property
    def max_adaptive_k(self) -> int:
        return -(-3 * self.k // 2) if self.adaptive_max_k is None else self.adaptive_max_k

    @property
    def effective_negative_lam(self) -> float:
        """The lambda negative credit uses: ``negative_lam``, or ``lam`` when it is unset."""
        return self.lam if self.negative_lam is None else self.negative_lam
