"""Between Trigger and Verify, Allocate: which eligible groups the judge and the continuations are spent on.

The trigger says which groups *may* be verified. Four rules decide which *are*, each a step of one chain,
``step(cases, context) -> (kept, left)``: the cases it keeps, and a ``unverified`` record (:func:`unverified`, the one
way an eligible group is left out, keeping GRPO credit) for each it leaves out.

Before the judge is asked (:data:`BEFORE_PROPOSE`):

1. :func:`cap` (``max_verified_groups = n``): at most ``n`` groups, a uniformly random subset
   (:func:`~prover_core.trigger.capped`, seeded by ``ProverConfig.seed``);
2. :func:`controls` (``control_share``): marks that share of the gain groups to verify a random segment of the
   judge's length instead (:mod:`prover_core.chance`); it leaves none out;
3. :func:`throttle` (``lift_throttle``): while the judge against chance of earlier steps (``context.prior``) is not
   above 0, the judge's own gain groups at the controls' rate.

After the judge has proposed (:data:`AFTER_PROPOSE`), since it needs each segment's expected cost:

4. :func:`budget` (``max_extra_share`` and ``budget_plan``): the proposed groups that fit the call's turn cap.

Seeds in one place: every draw is keyed by :func:`draw_seed`, a seed of ``ProverConfig.seed``, the examined run's id
and content, and the draw's own stream (:data:`STREAMS`), so the draws differ from step to step where a host
repeats group ids, and do not depend on the batch's order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from prover_core.budget import expected_cost, plan, upper_cost
from prover_core.chance import Lift, is_control
from prover_core.data import Proposal, Trajectory
from prover_core.report import Direction, GroupRecord, Stage, Status
from prover_core.stages import CostSettings, Stages, VerifySettings
from prover_core.trigger import capped, longest_failure, representative
from prover_core.verify import continuation_seeds

__all__ = [
    "AFTER_PROPOSE",
    "BEFORE_PROPOSE",
    "STREAMS",
    "Case",
    "Context",
    "Step",
    "allocate",
    "budget",
    "cap",
    "controls",
    "draw_seed",
    "throttle",
    "turn_cap_of",
    "unverified",
]

STREAMS = {"control": 0, "budget": 0, "throttle": 1}
"""Each draw's offset from the run's seed: the control draw and its segment, the ``random`` budget plan's order,
the throttle's draw."""


@dataclass(frozen=True)
class Case:
    """One eligible group as the pipeline sees it: the run the judge examines and the runs it is compared with.

    ``gain``: the shortest successful run against the failed runs; ``drop``: the longest failed run against the
    successful runs (negative credit). ``others`` are the group's other runs with the examined run's outcome.
    ``proposal``: the judge's (or a control's) segment, once proposed.
    """

    group_id: str
    members: list[Trajectory]
    direction: Direction
    control: bool = False
    """Verifies a random control segment of the judge's length (:mod:`prover_core.chance`)."""
    proposal: Proposal | None = None
    cost: float | None = None
    """The expected turns of its verification (:func:`~prover_core.budget.expected_cost`), once the turn cap's
    plan has weighed it."""
    reserve: int | None = None
    """The turns its :class:`~prover_core.budget.GroupShare` reserves when admitted under the cap
    (:func:`~prover_core.budget.upper_cost`)."""

    @cached_property
    def examined(self) -> Trajectory:
        return representative(self.members) if self.direction == "gain" else longest_failure(self.members)

    @cached_property
    def against(self) -> list[Trajectory]:
        return [t for t in self.members if t.success != self.examined.success]

    @cached_property
    def others(self) -> list[Trajectory]:
        return [t for t in self.members if t.success == self.examined.success and t.id != self.examined.id]

    @property
    def success_rate(self) -> float:
        return sum(t.success for t in self.members) / len(self.members)

    def record(self, status: Status, stage: Stage, reason: str, **found: Any) -> GroupRecord:
        return GroupRecord(
            group_id=self.group_id,
            size=len(self.members),
            successes=sum(t.success for t in self.members),
            trajectory_id=self.examined.id,
            status=status,
            stage=stage,
            reason=reason,
            direction=self.direction,
            control=self.control,
            **found,
        )


def unverified(case: Case, stage: Stage, reason: str) -> GroupRecord:
    """The record of an eligible group an allocation step left out: GRPO credit, the step's reason (and the
    proposal, when the judge had made one)."""
    return case.record("unverified", stage, reason, proposal=case.proposal)


def draw_seed(run: Trajectory, settings: VerifySettings, stream: str) -> int:
    """The seed of one of :data:`STREAMS`' draws about ``run``: the first of
    :func:`~prover_core.verify.continuation_seeds` (the run's seed, the run's id and content) plus the stream's
    offset."""
    return int(continuation_seeds(settings, run, 1)[0][0]) + STREAMS[stream]


@dataclass(frozen=True)
class Context:
    """What the allocation steps read: the stages' settings (the cost and chance ones, and ``k`` and the seed for
    the draws), the judge against chance of earlier steps, the turn cap."""

    stages: Stages
    prior: Lift | None = None
    """A :class:`~prover_core.run.ProverRun`'s window total before this step (``None``: a lone call)."""
    turn_cap: int | None = None
    """``floor(max_extra_share x rollout turns)``, or ``None`` uncapped."""


Step = Callable[[list[Case], Context], tuple[list[Case], list[GroupRecord]]]
"""One rule of the chain: the cases it keeps, and the records of those it leaves out."""


def allocate(cases: list[Case], context: Context, steps: Sequence[Step]) -> tuple[list[Case], list[GroupRecord]]:
    """``steps`` in turn over ``cases``: the cases every step kept, and every left-out case's record."""
    left: list[GroupRecord] = []
    for step in steps:
        cases, out = step(cases, context)
        left += out
    return cases, left


def cap(cases: list[Case], context: Context) -> tuple[list[Case], list[GroupRecord]]:
    """``max_verified_groups = n``: at most ``n`` cases, each equally likely (:func:`~prover_core.trigger.capped`)."""
    n = context.stages.cost.max_verified_groups
    kept_ids, _ = capped([c.group_id for c in cases], n, context.stages.seed)
    chosen = set(kept_ids)
    reason = (
        f"eligible, not verified: max_verified_groups={n} of {len(cases)} eligible groups (a random subset is verified)"
    )
    return [c for c in cases if c.group_id in chosen], [
        unverified(c, "trigger", reason) for c in cases if c.group_id not in chosen
    ]


def controls(cases: list[Case], context: Context) -> tuple[list[Case], list[GroupRecord]]:
    """``control_share``: each gain case a control with that probability (:func:`~prover_core.chance.is_control`
    on the run's ``control`` draw); none left out."""
    share = context.stages.chance.control_share
    if share <= 0:
        return cases, []
    marked = [
        replace(c, control=is_control(c.group_id, share, draw_seed(c.examined, context.stages.verify, "control")))
        if c.direction == "gain"
        else c
        for c in cases
    ]
    return marked, []


def throttle(cases: list[Case], context: Context) -> tuple[list[Case], list[GroupRecord]]:
    """``lift_throttle``: while the earlier steps' lift interval does not lie above 0, the judge's own gain cases
    are kept at the controls' rate ``s / (1 - s)`` (``s = control_share``, the run's ``throttle`` draw); every case
    when the interval lies above 0, when no control was decided yet, or in a lone call (no ``prior``)."""
    chance, total = context.stages.chance, context.prior
    if not chance.lift_throttle or chance.control_share <= 0 or total is None or not total.control_verified:
        return cases, []
    low, high = total.interval()
    if low > 0:
        return cases, []
    share = chance.control_share
    rate = min(1.0, share / (1.0 - share)) if share < 1 else 1.0
    reason = (
        f"lift_throttle: the judge's lift over the window, {total.lift:+.2f} [{low:+.2f}, {high:+.2f}], is not above "
        f"chance, so its groups are verified at the controls' rate ({rate:.2f})"
    )

    def kept(c: Case) -> bool:
        return (
            c.direction != "gain"
            or c.control
            or is_control(c.group_id, rate, draw_seed(c.examined, context.stages.verify, "throttle"))
        )

    return [c for c in cases if kept(c)], [unverified(c, "trigger", reason) for c in cases if not kept(c)]


def budget(cases: list[Case], context: Context) -> tuple[list[Case], list[GroupRecord]]:
    """``max_extra_share`` with ``budget_plan``: the proposed cases whose expected costs
    (:func:`~prover_core.budget.expected_cost`) fit the turn cap in the plan's order (:func:`~prover_core.budget.plan`):
    ``batch`` order, a ``random`` order (the run's ``budget`` draw), or the ``planner``'s expected credit per
    expected turn; every case when uncapped or with ``budget_plan="off"``."""
    cost_settings, k, turn_cap = context.stages.cost, context.stages.verify.k, context.turn_cap
    plan_name = cost_settings.budget_plan
    if turn_cap is None or plan_name == "off":
        return cases, []
    costs, scores = [], []
    for i, c in enumerate(cases):
        assert c.proposal is not None  # the budget step runs after the judge has proposed
        seg = c.proposal.segment
        cost = expected_cost([t.num_turns for t in c.members], seg.start, seg.end, k)
        costs.append(cost)
        if plan_name == "planner":
            rate = c.success_rate
            scores.append(seg.num_turns * (1 - rate if c.direction == "gain" else rate) / cost)
        elif plan_name == "random":
            scores.append(float(draw_seed(c.examined, context.stages.verify, "budget")))
        else:
            scores.append(-float(i))
    keep = plan(costs, scores, turn_cap)
    left = [
        unverified(
            c,
            "verify",
            f"budget plan ({plan_name}): expected cost {cost:.0f} turns does not fit the cap of {turn_cap} "
            f"(max_extra_share={cost_settings.max_extra_share}) beside the groups ranked before it",
        )
        for c, cost, kept in zip(cases, costs, keep, strict=True)
        if not kept
    ]
    kept_cases = [
        replace(c, cost=cost, reserve=upper_cost([t.num_turns for t in c.members], seg.start, seg.end, k))
        for c, cost, kept, seg in zip(
            cases, costs, keep, [c.proposal.segment for c in cases if c.proposal], strict=True
        )
        if kept
    ]
    return kept_cases, left


def turn_cap_of(cost: CostSettings, rollout_turns: int) -> int | None:
    """``floor(max_extra_share x rollout_turns)``, or ``None`` uncapped."""
    return None if cost.max_extra_share is None else math.floor(cost.max_extra_share * rollout_turns)


BEFORE_PROPOSE: tuple[Step, ...] = (cap, controls, throttle)
"""The chain before the judge is asked, in order."""
AFTER_PROPOSE: tuple[Step, ...] = (budget,)
"""The chain once the judge has proposed (the turn cap needs each segment's cost)."""
