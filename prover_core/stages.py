"""What each stage uses, built once from a :class:`~prover_core.config.ProverConfig` (``config.stages``) and validated
where it is built.

``ProverConfig`` stays one flat object of keyword arguments, the form a host's config file, command line or run
record carries (verl's ``prover:`` block, TRL's arguments); its fields are split here by the stage that reads them,
and every stage function takes its own part:

* :class:`TriggerSettings` (:func:`prover_core.trigger.trigger`): the band ``low < p < high``, and the negative band;
* :class:`ProposeSettings` (:mod:`prover_core.bonus`'s propose step): the segment rules and the judge's time limit;
* :class:`VerifySettings` (:mod:`prover_core.verify`, :class:`~prover_core.runner.Runner`): ``k``, the acceptance
  rule object (or the sequential test, adaptive), curtailment, the seeds and the continuation limits;
* :class:`CreditSettings` (:mod:`prover_core.grpo`, the bonus): ``lam`` and the GRPO normalisation;
* :class:`CostSettings` and :class:`ChanceSettings` (:mod:`prover_core.allocate`): the caps, and the controls and
  throttle.

A setting that combines fields is checked by the stage it belongs to (``trigger_low < trigger_high`` by the trigger,
``min_finished <= k`` by verification), with the message naming the config's fields; building a ``ProverConfig``
builds its stages, so a bad combination is refused there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from prover_core.acceptance import AcceptanceRule
from prover_core.data import SegmentRules
from prover_core.sequential import SequentialTest

__all__ = [
    "ChanceSettings",
    "CostSettings",
    "CreditSettings",
    "ProposeSettings",
    "Stages",
    "TriggerSettings",
    "VerifySettings",
]


@dataclass(frozen=True)
class TriggerSettings:
    """A group is eligible for positive credit iff ``low < p < high`` (strict), for negative credit (with
    ``negative_credit``) iff ``negative[0] < p < negative[1]``; both bands are checked whether or not in use."""

    low: float = 0.0
    high: float = 0.5
    negative: tuple[float, float] = (0.5, 1.0)
    negative_credit: bool = False

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"trigger_low ({self.low}) must be below trigger_high ({self.high})")
        if not self.negative[0] < self.negative[1]:
            raise ValueError("negative_trigger_low must be below negative_trigger_high")


@dataclass(frozen=True)
class ProposeSettings:
    """The segments a judge may nominate, and how long it may take (``None``: no limit); ``strict`` raises its
    failures instead of recording a skip."""

    rules: SegmentRules
    timeout_s: float | None = 600.0
    strict: bool = False


@dataclass(frozen=True)
class VerifySettings:
    """K continuations from each boundary, decided by ``rule`` (fixed K) or by ``test`` (adaptive sampling, when
    set: its own anytime-valid decision, so ``rule`` stays ``delta_positive``).

    ``curtail``: ``None`` (off), ``"overlap"`` or ``"wait"`` (:mod:`prover_core.curtail`). Seeds: ``seed``, paired
    pre and post when ``paired_seeds`` (:func:`~prover_core.verify.continuation_seeds`), drawn as ``pairing`` says.
    A boundary needs ``required_finished`` of its continuations finished (``None``: all ``k``); each may take
    ``max_continuation_turns`` turns and ``continuation_timeout_s`` seconds. ``max_concurrency``: continuations in
    flight (``None``: all)."""

    k: int = 4
    rule: AcceptanceRule = field(default_factory=AcceptanceRule)
    test: SequentialTest | None = None
    curtail: Literal["overlap", "wait"] | None = "overlap"
    delta_of: Literal["states", "choices"] = "states"
    seed: int = 0
    paired_seeds: bool = True
    pairing: Literal["sequential", "turn"] = "sequential"
    required_finished: int | None = None
    max_continuation_turns: int = 100
    continuation_timeout_s: float | None = None
    max_concurrency: int | None = None
    strict: bool = False

    def __post_init__(self) -> None:
        if self.required_finished is not None and self.required_finished > self.k:
            raise ValueError(f"min_finished ({self.required_finished}) cannot exceed k ({self.k})")
        if self.test is not None and self.rule.name != "delta_positive":
            raise ValueError(
                "sampling='adaptive' decides by its own anytime-valid test; leave acceptance at its default "
                "(set adaptive_alpha instead)"
            )

    @property
    def finished(self) -> int:
        """Finished continuations a boundary needs: ``required_finished``, or all ``k``."""
        return self.k if self.required_finished is None else self.required_finished

    @property
    def allowed_failures(self) -> int:
        """Continuations per boundary that may fail to finish (``k - required_finished``)."""
        return self.k - self.finished

    @property
    def most_per_boundary(self) -> int:
        """The most continuations one boundary may launch: ``k``, or the adaptive test's ``max_pairs``."""
        return self.k if self.test is None else max(self.k, self.test.max_pairs)

    def concurrency_for(self, groups: int) -> int:
        """Continuations in flight at once for ``groups`` verifications: ``max_concurrency``, or (``None``) every
        continuation they can launch, ``2 x max(k, max_pairs)`` each."""
        if self.max_concurrency is not None:
            return self.max_concurrency
        return max(1, 2 * self.most_per_boundary * groups)


@dataclass(frozen=True)
class CreditSettings:
    """``lam`` (and ``negative_lam`` for negative credit) times ``Delta`` on each trainable token of an accepted
    segment, added to GRPO's ``(R - mean) [/ (std + std_eps)]``; ``episode_keys`` identify a repeated episode in the
    batch checks."""

    lam: float = 1.0
    negative_lam: float = 1.0
    normalize_std: bool = False
    std_eps: float = 1e-6
    episode_keys: tuple[str, ...] = ("seed", "member")

    def lam_for(self, direction: Literal["gain", "drop"]) -> float:
        """The lambda of a group verified for a gain (``lam``) or for a drop (``negative_lam``)."""
        return self.lam if direction == "gain" else self.negative_lam


@dataclass(frozen=True)
class CostSettings:
    """How much verification may spend: ``max_verified_groups`` per call, the caps as shares of the rollout's turns
    and tokens (``None``: uncapped), and how a turn cap is planned (``budget_plan``)."""

    max_verified_groups: int | None = None
    max_extra_share: float | None = None
    max_extra_token_share: float | None = None
    budget_plan: Literal["off", "batch", "random", "planner"] = "batch"


@dataclass(frozen=True)
class ChanceSettings:
    """The judge against chance: ``control_share`` of the gain groups verify a random segment instead; with
    ``lift_throttle`` the judge's groups are verified only at the controls' rate while the lift over the last
    ``lift_window`` steps is not shown above 0."""

    control_share: float = 0.0
    lift_throttle: bool = False
    lift_window: int = 50


@dataclass(frozen=True)
class Stages:
    """Each stage's settings (``ProverConfig.stages``); ``seed`` is the run's root seed, which allocation's draws
    and verification's continuations derive from."""

    trigger: TriggerSettings
    propose: ProposeSettings
    verify: VerifySettings
    credit: CreditSettings
    cost: CostSettings
    chance: ChanceSettings
    seed: int = 0
