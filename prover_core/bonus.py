"""``compute_bonus``: trigger, propose, verify and credit over one training batch.

The result holds the GRPO advantage of every trajectory, the per-turn bonus (``lam * Delta`` on the
accepted segment of each group's representative successful run, 0 elsewhere) and a report. Any
failure inside a group (the judge, restoring, a continuation) leaves that group with plain GRPO
credit and a ``skipped`` record saying why, unless ``config.strict``.

Optional negative credit (``config.negative_credit``, off by default; not in the paper): a group whose
success rate lies strictly inside ``(negative_trigger_low, negative_trigger_high)`` (default (0.5, 1))
has its longest failed trajectory (ties: smallest id) segmented by the same judge, called with the
roles swapped: ``judge.propose(failed_run, successful_runs, rules)``, i.e. "where did this run do what
the successful runs did not". A judge whose ``propose`` takes ``others`` (:class:`~prover_core.judges.ChoiceJudge`)
also gets the group's other runs with the representative's outcome (other successes; other failures when
the roles are swapped). The drop is verified (``p_pre > p_post`` by the configured rule or the
adaptive test) and ``negative_lam * Delta`` (``Delta < 0``) is added to that segment's turns.

The judge against chance (``config.control_share > 0``, off by default): in a share of the groups eligible for
positive credit (:func:`~prover_core.chance.is_control`), the judge's nominated segment is replaced by a uniformly
random admissible segment of the same length on the same run (:func:`~prover_core.chance.control_segment`, both
draws seeded by ``config.seed`` and the examined run's id and content; a ``declined`` record naming the judge's
segment when none has that length), verified and credited like any other; its record has ``control=True``.
``Report.lift`` compares the acceptance of both kinds (``prover/judge_lift``).

A cost the user sets (``config.max_extra_share``, off by default): the call's verification spends at most that share
of the rollout's policy turns (:mod:`prover_core.budget`); ``config.budget_plan`` chooses which proposed groups fit
(the others ``unverified``), and a verification the cap cuts short is decided only where the outcomes in settle it.
``config.max_extra_token_share`` caps the same cost in policy tokens (a share of the rollout's action tokens), for a
policy that reports its tokens (:class:`~prover_core.budget.TokenPolicy`).

Progress is logged to the ``prover_core`` logger (``prover_core.bonus``): a line per finished eligible
group and a summary line per call at INFO, and each group's trigger, proposal and verification at DEBUG
as they happen; ``progress=fn`` also hands ``fn`` (a host's progress bar) an event as each round of policy calls,
each continuation and each group ends, see :mod:`prover_core.progress`. The wall time of each stage is in
``Report.timings``.

Programming errors are not skips: an object that misses its protocol (a function as the policy,
``judge=None``, a plain environment as ``env``) raises :class:`~prover_core.errors.ProtocolError`
before anything runs, and async code bound to another event loop raises
:class:`~prover_core.errors.EventLoopError`. A judge call is limited to ``config.judge_timeout_s``
seconds (the group is skipped: "judge timed out"). Credit on a turn whose token span is empty has no
token to land on: the group records it in ``uncredited_turns`` and a warning is logged, as it is
when every eligible group of a call is skipped (logger ``prover_core``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from prover_core._aio import resolve, run_sync
from prover_core.allocate import (
    AFTER_PROPOSE,
    BEFORE_PROPOSE,
    Case,
    Context,
    allocate,
    draw_seed,
    turn_cap_of,
    unverified,
)
from prover_core.batch_checks import BatchWarning, check_groups, check_token_spans
from prover_core.budget import Admission, TurnBudget, rollout_tokens, token_cap_of
from prover_core.chance import Lift, control_segment
from prover_core.clock import PolicyClock
from prover_core.config import ProverConfig
from prover_core.continuations import Continuer, counted, make_continuer, metered, usage_error
from prover_core.credit import segment_bonus, spread_to_tokens, turn_weights
from prover_core.data import Decline, Proposal, Segment, SegmentRules, Trajectory
from prover_core.errors import InvalidBatchError, JudgeTimeoutError, ProtocolError, ProverError
from prover_core.grpo import grpo_advantages
from prover_core.progress import Progress, ProgressFn, ProgressKind, ProgressLog, StageClock, format_progress
from prover_core.propose import propose
from prover_core.protocols import (
    BatchPolicy,
    ContinueFn,
    Judge,
    PerStepJudge,
    Policy,
    PolicyFn,
    ReportingJudge,
    RestorableEnv,
    described,
    require,
)
from prover_core.redaction import reported
from prover_core.report import Direction, GroupRecord, Report
from prover_core.restore import ReplayEnv, SnapshotEnv
from prover_core.stages import CreditSettings, ProposeSettings, Stages, VerifySettings
from prover_core.trigger import trigger
from prover_core.verify import verify_segment_detailed

__all__ = ["BonusResult", "Hooks", "acompute_bonus", "compute_bonus", "group_batch", "run_pipeline"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, repr=False)
class BonusResult:
    """Advantages and bonuses of one batch, by trajectory id."""

    def __repr__(self) -> str:  # short: a full repr of every trajectory costs ~10x the computation itself
        return f"BonusResult({len(self.trajectories)} trajectories, {dict(self.report.summary())})"

    trajectories: Mapping[str, Trajectory]
    advantages: Mapping[str, float]
    """The GRPO advantage of each trajectory (same for all its tokens)."""
    turn_bonus: Mapping[str, NDArray[np.float64]]
    """Per-turn ProVer bonus of each trajectory (zeros except on accepted segments)."""
    report: Report

    def _known(self, trajectory_id: str) -> Trajectory:
        """The trajectory with this id, or a ``KeyError`` that says which ids the batch has."""
        try:
            return self.trajectories[trajectory_id]
        except (KeyError, TypeError):
            ids = list(self.trajectories)
            shown = ", ".join(map(repr, ids[:5])) + (f", ... ({len(ids)} in all)" if len(ids) > 5 else "")
            raise KeyError(f"no trajectory {trajectory_id!r} in this batch; its ids are {shown}") from None

    def turn_advantages(self, trajectory_id: str) -> NDArray[np.float64]:
        """``A_GRPO + bonus_t`` for every turn ``t``."""
        self._known(trajectory_id)
        return self.advantages[trajectory_id] + self.turn_bonus[trajectory_id]

    def token_bonus(self, trajectory_id: str, length: int) -> NDArray[np.float64]:
        """The bonus on each of ``length`` token positions (0 outside the turns' token spans)."""
        return spread_to_tokens(self._known(trajectory_id), self.turn_bonus[trajectory_id], length)

    def token_advantages(self, trajectory_id: str, length: int) -> NDArray[np.float64]:
        """``A_GRPO + bonus_t`` on the action tokens of turn ``t``; 0 on every other position."""
        return spread_to_tokens(self._known(trajectory_id), self.turn_advantages(trajectory_id), length)

    def bonus_matrix(self, trajectory_ids: Sequence[str], length: int) -> NDArray[np.float64]:
        """A ``(B, length)`` bonus, one row per id in the host's row order."""
        if not trajectory_ids:
            return np.zeros((0, length))
        return np.stack([self.token_bonus(tid, length) for tid in trajectory_ids])


def group_batch(trajectories: Iterable[Trajectory | Mapping[str, Any]]) -> dict[str, list[Trajectory]]:
    """Validate a batch and group it by ``group_id`` (order kept). Raises :class:`InvalidBatchError`."""
    items = [t if isinstance(t, Trajectory) else Trajectory.model_validate(t) for t in trajectories]
    if not items:
        raise InvalidBatchError("the batch is empty: no trajectories to credit")
    seen: set[str] = set()
    for t in items:
        if t.id in seen:
            raise InvalidBatchError(f"duplicate trajectory id {t.id!r}")
        seen.add(t.id)
    groups: dict[str, list[Trajectory]] = {}
    for t in items:
        groups.setdefault(t.group_id, []).append(t)
    return groups


def _uncredited(trajectory: Trajectory, start: int, end: int) -> tuple[int, ...]:
    """Turns of ``[start, end]`` whose token span is empty: credit there has no token to land on."""
    spans = [(t, trajectory.turns[t].token_span) for t in range(start, end + 1)]
    return tuple(t for t, span in spans if span is not None and span[0] == span[1])


async def _propose_case(
    case: Case, judge: Judge, settings: ProposeSettings, clock: StageClock, draws: VerifySettings
) -> GroupRecord | Proposal:
    """Stage 2 for one group: the judge's checked proposal, or the record of a decline or a failed judge (a control
    group's segment is drawn with ``draws``' seed)."""
    try:
        with clock.stage("propose"):
            answer = await asyncio.wait_for(
                propose(judge, case.examined, case.against, settings.rules, case.others), settings.timeout_s
            )
    except asyncio.TimeoutError:  # propose() turns the judge's own errors into JudgeError: this is our limit
        timed_out = JudgeTimeoutError(f"judge timed out after {settings.timeout_s} s")
        if settings.strict:
            raise timed_out from None
        return case.record("skipped", "propose", f"{type(timed_out).__name__}: {timed_out}")
    except ProverError as exc:
        fatal = usage_error(exc)
        if fatal is not None and fatal is not exc:
            raise fatal from exc
        if settings.strict or fatal is not None:
            raise
        why = reported(f"{type(exc).__name__}: {exc}")  # a judge's error may carry a server's text
        logger.debug("group %s: propose failed, skipped: %s", case.group_id, why)
        return case.record("skipped", "propose", why)
    if isinstance(answer, Decline):  # a decline's reason and a proposal's rationale are the judge's (a server's) text
        why = reported(answer.reason)
        logger.debug("group %s: the judge declined: %s", case.group_id, why)
        return case.record("declined", "propose", why)
    segment = answer.segment
    logger.debug("group %s: proposed turns [%d, %d] of %s", case.group_id, segment.start, segment.end, case.examined.id)
    if case.control:
        return _control(case, segment, settings.rules, draw_seed(case.examined, draws, "control"))
    return answer.model_copy(update={"rationale": reported(answer.rationale)})


def _control(case: Case, nominated: Segment, rules: SegmentRules, seed: int) -> GroupRecord | Proposal:
    """A control group's proposal: a uniformly random admissible segment of the nominated segment's length
    (:func:`~prover_core.chance.control_segment`, drawn with ``seed``), or the record of a decline when none has that
    length."""
    judged = f"the judge nominated turns [{nominated.start}, {nominated.end}]"
    segment = control_segment(case.examined, nominated.num_turns, rules, seed)
    if segment is None:
        reason = f"control: no admissible segment of {nominated.num_turns} turns to draw ({judged})"
        return case.record("declined", "propose", reason)
    logger.debug("group %s: control, verifies turns [%d, %d] instead", case.group_id, segment.start, segment.end)
    return Proposal(segment=segment, rationale=f"control: a uniformly random admissible segment; {judged}")


async def _verify_case(
    case: Case,
    answer: Proposal,
    continuer: Continuer,
    settings: tuple[VerifySettings, CreditSettings],
    limit: asyncio.Semaphore,
    clocks: tuple[StageClock, PolicyClock],
    budget: TurnBudget | None = None,
    tokens: TurnBudget | None = None,
) -> tuple[GroupRecord, tuple[str, NDArray[np.float64]] | None]:
    """Stages 3 and 4 for one group: verify the proposed segment and, if accepted, its per-turn bonus."""
    examined, (stages, rounds), (verifying, crediting) = case.examined, clocks, settings
    with stages.stage("verify"):
        verification, stats = await verify_segment_detailed(
            examined, answer.segment, continuer, verifying, limit, case.direction, rounds, budget, tokens
        )
    logger.debug(
        "group %s: verified, %s (pre %d/%d, post %d/%d, %d continuations): %s",
        case.group_id,
        verification.delta_text,
        verification.pre_successes,
        verification.pre_count,
        verification.post_successes,
        verification.post_count,
        stats.spent,
        "incomplete" if verification.incomplete else "accepted" if verification.accepted else "rejected",
    )
    found = dict(proposal=answer, verification=verification, verify_stats=stats)
    if verification.incomplete:
        return case.record("skipped", "verify", verification.reason, **found), None
    if not verification.accepted:
        return case.record("rejected", "verify", verification.reason, **found), None
    lam = crediting.lam_for(case.direction)
    bonus = segment_bonus(examined.num_turns, answer.segment, verification.delta, lam)
    uncredited = _uncredited(examined, answer.segment.start, answer.segment.end)
    if uncredited:
        logger.warning(
            "group %r: accepted credit %+.3f on turns %s of trajectory %r, whose token span is empty: "
            "no token receives it (see GroupRecord.uncredited_turns)",
            case.group_id,
            lam * verification.delta,
            list(uncredited),
            examined.id,
        )
    credit = lam * abs(verification.delta) * answer.segment.num_turns
    accepted = case.record(
        "accepted", "verify", verification.reason, uncredited_turns=uncredited, credit=credit, **found
    )
    return accepted, (examined.id, bonus)


async def acompute_bonus(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    *,
    judge: Judge,
    env: RestorableEnv | None = None,
    policy: Policy | BatchPolicy | PolicyFn | None = None,
    continue_from: ContinueFn | None = None,
    config: ProverConfig | None = None,
    executor: Continuer | None = None,
    progress: ProgressFn | None = None,
) -> BonusResult:
    """The ``async`` form of :func:`compute_bonus`.

    The stages run over the whole batch in turn: every eligible group's judge is asked concurrently, then every
    proposed segment is verified together (so that a batching policy serves the continuations of all groups
    in the same calls), then the accepted bonuses are credited.
    """
    config = config or ProverConfig()
    if isinstance(judge, PerStepJudge):  # one call is one training step: per-step budgets and stats start afresh
        judge.new_step()
    result = await run_pipeline(trajectories, judge, config, Hooks(env, policy, continue_from, executor), progress)
    if config.control_share > 0:
        result = replace(result, report=result.report.model_copy(update={"lift": result.report.step_lift}))
    return result


@dataclass(frozen=True)
class Hooks:
    """How continuations run: ``env`` and ``policy``, or ``continue_from``, or an ``executor``."""

    env: RestorableEnv | None = None
    policy: Policy | BatchPolicy | PolicyFn | None = None
    continue_from: ContinueFn | None = None
    executor: Continuer | None = None


async def run_pipeline(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    judge: Judge,
    config: ProverConfig,
    hooks: Hooks,
    progress: ProgressFn | None = None,
    prior: Lift | None = None,
) -> BonusResult:
    """Trigger, propose, verify and credit over one batch, with no state across calls: ``prior`` is the judge
    against chance over earlier steps (a :class:`~prover_core.run.ProverRun`'s window), which ``lift_throttle``
    reads; the report's ``lift`` is left for the caller."""
    started, stage = time.perf_counter(), config.stages
    continuer, restorers = _continuations(judge, hooks, stage, progress)
    batch = _Batch.of(trajectories, stage)

    # 1. Trigger: the groups inside the band
    eligible, records = trigger(batch.groups, stage.trigger)
    if logger.isEnabledFor(logging.DEBUG):
        _log_trigger(batch.groups, dict(eligible))
    # Allocate: which of them the judge and the continuations are spent on (cap, controls, throttle)
    context = Context(stage, prior, turn_cap_of(stage.cost, batch.rollout_turns))
    cases, left = allocate([Case(gid, batch.groups[gid], d) for gid, d in eligible], context, BEFORE_PROPOSE)
    records.update({r.group_id: r for r in left})
    call = _Call(records, _Tally(len(cases), started, progress), StageClock(), time.perf_counter())

    # 2. Propose: every eligible group's judge at once
    proposed = await call.propose(cases, judge, stage)
    # Allocate the turn cap among the proposals (budget_plan)
    proposed, left = allocate(proposed, context, AFTER_PROPOSE)
    call.finished(left)

    # 3. Verify and 4. Credit: every proposed segment together, so that each round of policy calls serves them all
    await call.verify(proposed, counted(continuer, call.tally.continuation_ended), stage, context, batch)

    return await _result(batch, call, cases, judge, hooks.policy, restorers, context, started)


@dataclass
class _Batch:
    """One call's batch: its groups, their GRPO advantages, every trajectory's per-turn bonus (zero until credited),
    the rollout's policy turns and the token cap (``None``: uncapped)."""

    groups: dict[str, list[Trajectory]]
    advantages: dict[str, float]
    everyone: list[Trajectory]
    turn_bonus: dict[str, NDArray[np.float64]]
    rollout_turns: int
    token_cap: int | None

    @classmethod
    def of(cls, trajectories: Iterable[Trajectory | Mapping[str, Any]], stage: Stages) -> _Batch:
        groups = group_batch(trajectories)
        advantages = grpo_advantages(groups, normalize_std=stage.credit.normalize_std, eps=stage.credit.std_eps)
        everyone = [t for members in groups.values() for t in members]
        token_cap = token_cap_of(stage.cost.max_extra_token_share, everyone)  # a batch without token spans: refused
        turn_bonus = {t.id: np.zeros(t.num_turns) for t in everyone}
        return cls(groups, advantages, everyone, turn_bonus, sum(t.num_turns for t in everyone), token_cap)


def _continuations(
    judge: Judge, hooks: Hooks, stage: Stages, progress: ProgressFn | None
) -> tuple[Continuer, list[tuple[ReplayEnv | SnapshotEnv, int]]]:
    """The call's continuer for what the user passed (checked, with the judge and ``progress``, before anything
    runs), and the restorers whose close failures the report counts, with their count so far; a snapshot cache is
    cleared (one call is one step: the last step's states are stale)."""
    require(judge, "judge", Judge, "propose(success, failures, rules)")
    if progress is not None and (isinstance(progress, type) or not callable(progress)):
        raise ProtocolError(f"progress must be callable as progress(event); got {described(progress)}")
    continuer = make_continuer(
        hooks.env,
        hooks.policy,
        hooks.continue_from,
        hooks.executor,
        max_turns=stage.verify.max_continuation_turns,
        threaded=stage.verify.continuation_timeout_s is not None,  # so that the time limit holds over blocking code
        pairing=stage.verify.pairing,
        replay=stage.verify.delta_of == "choices",
        count_tokens=stage.cost.max_extra_token_share is not None,  # refuses what cannot report its tokens
    )
    caches = (hooks.env, getattr(hooks.executor, "snapshots", None))
    for cache in caches:
        if isinstance(cache, SnapshotEnv):
            cache.clear()
    restorers = [(r, r.close_failures) for r in caches if isinstance(r, ReplayEnv | SnapshotEnv)]
    return continuer, restorers


@dataclass
class _Call:
    """What one call's propose and verify steps write: each group's record, the progress, the stage clock."""

    records: dict[str, GroupRecord]
    tally: _Tally
    stages: StageClock
    gathered_at: float
    """When the judges were asked: what runs after it concurrently is timed apart from what runs outside it."""

    def finished(self, left: Sequence[GroupRecord]) -> None:
        for record in left:
            self.records[record.group_id] = record
            self.tally.group_finished(record)

    async def propose(self, cases: list[Case], judge: Judge, stage: Stages) -> list[Case]:
        """Every case's judge at once: the cases with a proposal; the others recorded."""

        async def judged(case: Case) -> Case | None:
            answer = await _propose_case(case, judge, stage.propose, self.stages, stage.verify)
            if isinstance(answer, GroupRecord):
                self.finished([answer])
                return None
            return replace(case, proposal=answer)

        return [c for c in await asyncio.gather(*(judged(case) for case in cases)) if c is not None]

    async def verify(
        self, proposed: list[Case], continuer: Continuer, stage: Stages, context: Context, batch: _Batch
    ) -> None:
        """Every proposed segment verified together, each accepted one credited in ``batch.turn_bonus``. Under a
        planned turn cap, groups whose turns are taken one by one (metered) are admitted while what is left covers
        their reservation, each spending its own share first (a hook reserves a whole turn limit per continuation)."""
        limit = asyncio.Semaphore(stage.verify.concurrency_for(len(proposed)))
        budget = None if context.turn_cap is None else TurnBudget(context.turn_cap)
        tokens = None if batch.token_cap is None else TurnBudget(batch.token_cap)
        admission = Admission(budget) if budget is not None and metered(continuer) else None

        async def verified(case: Case) -> None:
            assert case.proposal is not None
            share = None
            if admission is not None and case.reserve is not None:
                share = await admission.enter(case.reserve)
                if share is None:
                    left = budget.left if budget else 0
                    reason = (
                        f"budget: not started, the cap's {left} turns left cannot cover the {case.reserve} it "
                        f"reserves (max_extra_share={stage.cost.max_extra_share})"
                    )
                    self.finished([unverified(case, "verify", reason)])
                    return
            try:
                clocks = (self.stages, self.tally.clock)
                settings = (stage.verify, stage.credit)
                record, credit = await _verify_case(
                    case, case.proposal, continuer, settings, limit, clocks, share or budget, tokens
                )
            finally:
                if share is not None and admission is not None:
                    await admission.leave(share)
            if credit is not None:  # 4. Credit
                batch.turn_bonus[credit[0]] = credit[1]
            self.finished([record])

        await asyncio.gather(*(verified(case) for case in proposed))


async def _result(
    batch: _Batch,
    call: _Call,
    cases: list[Case],
    judge: Judge,
    policy: object,
    restorers: list[tuple[ReplayEnv | SnapshotEnv, int]],
    context: Context,
    started: float,
) -> BonusResult:
    """The call's advantages, bonuses and report (with its warnings, logged), once every group is decided."""
    concurrent = time.perf_counter() - call.gathered_at
    records, everyone, turn_bonus = call.records, batch.everyone, batch.turn_bonus
    examined = [records[case.group_id] for case in cases]
    if not _warn_if_all_skipped(examined):
        _warn_if_no_continuation_finished(examined)
    keys = context.stages.credit.episode_keys
    mistakes = _batch_warnings(batch.groups, everyone, batch.advantages, turn_bonus, keys)
    policy_stats = getattr(policy, "report_stats", None)
    engine_stats = dict(await resolve(policy_stats())) if callable(policy_stats) else {}
    weights = {t.id: turn_weights(t) for t in everyone}
    total = time.perf_counter() - started
    report = Report(
        env_close_failures=sum(r.close_failures - before for r, before in restorers),
        credit_mass=sum(float(np.abs(turn_bonus[tid]) @ w) for tid, w in weights.items()),
        advantage_mass=sum(abs(batch.advantages[tid]) * float(w.sum()) for tid, w in weights.items()),
        batch_warnings=mistakes,
        groups=[records[gid] for gid in batch.groups],
        judge_calls=len(cases),
        rollout_turns=batch.rollout_turns,
        turn_budget=context.turn_cap,
        rollout_tokens=rollout_tokens(everyone),
        token_budget=batch.token_cap,
        rollout_episodes=len(everyone),
        rollout_rounds=max(t.num_turns for t in everyone),
        judge_stats=dict(judge.stats()) if isinstance(judge, ReportingJudge) else {},
        timings={
            "propose": call.stages.wall("propose"),
            "verify": call.stages.wall("verify"),
            "outside": total - concurrent,
            "total": total,
        },
        engine_stats=engine_stats,
    )
    if logger.isEnabledFor(logging.INFO):
        logger.info(_summary(report, total))
    return BonusResult(
        trajectories={t.id: t for t in everyone}, advantages=batch.advantages, turn_bonus=turn_bonus, report=report
    )


def _log_trigger(groups: Mapping[str, Sequence[Trajectory]], eligible: Mapping[str, Direction]) -> None:
    """One DEBUG line per group, in batch order: its success rate and whether it is eligible."""
    for gid, members in groups.items():
        direction = eligible.get(gid)
        verdict = (
            "not eligible"
            if direction is None
            else "eligible" + (" for negative credit" if direction == "drop" else "")
        )
        logger.debug("group %s: success rate %d/%d, %s", gid, sum(t.success for t in members), len(members), verdict)


class _Tally:
    """A call's progress: groups finished, continuations ended, verification's rounds (its :class:`PolicyClock`);
    each change becomes a :class:`Progress` event for the log and the host's ``progress`` callback, on the event
    loop's thread (a round moved in a worker thread is handed over)."""

    def __init__(self, total: int, started: float, progress: ProgressFn | None) -> None:
        self.total, self.started, self.progress = total, started, progress
        self.groups = self.continuations = self.failures = 0
        self.clock = PolicyClock(self._round)
        self.log = ProgressLog()
        self.loop, self.thread = asyncio.get_running_loop(), threading.get_ident()

    def group_finished(self, record: GroupRecord) -> None:
        self.groups += 1
        self._emit("group", record)

    def continuation_ended(self) -> None:
        self.continuations += 1
        self._emit("continuation")

    def _round(self, _now: int) -> None:
        if threading.get_ident() == self.thread:
            self._emit("round")
        else:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is listening
                self.loop.call_soon_threadsafe(self._emit, "round")

    def _emit(self, kind: ProgressKind, record: GroupRecord | None = None) -> None:
        seconds = time.perf_counter() - self.started
        event = Progress(self.groups, self.total, record, seconds, kind, self.continuations, self.clock.now)
        if logger.isEnabledFor(logging.INFO) and self.log.wants(event):
            logger.info(format_progress(event))
        if self.progress is None:
            return
        try:
            self.progress(event)
        except Exception:
            self.failures += 1
            if self.failures == 1:  # once per call: it is called again for every event
                logger.warning("the progress callback %r raised; the step goes on", self.progress, exc_info=True)


def _summary(report: Report, seconds: float) -> str:
    """One line: groups by outcome, the verification's cost against the rollout, the time taken."""
    m = report.metrics(prefix="")
    counts = report.summary()
    return (
        f"compute_bonus: {len(report.groups)} groups, {len(report.groups) - counts['not_eligible']} eligible: "
        f"{counts['accepted']} accepted, {counts['rejected']} rejected, {counts['declined']} declined, "
        f"{counts['skipped']} skipped; {m['continuations']:.0f} continuations, {m['policy_turns']:.0f} policy turns "
        f"(+{100 * m['extra_turn_share']:.1f}% of the rollout's {report.rollout_turns}); {seconds:.2f} s"
    )


def _batch_warnings(
    groups: Mapping[str, Sequence[Trajectory]],
    everyone: Sequence[Trajectory],
    advantages: Mapping[str, float],
    turn_bonus: Mapping[str, NDArray[np.float64]],
    episode_keys: Sequence[str],
) -> list[BatchWarning]:
    """Batch shapes and token spans that cannot be meant (:mod:`prover_core.batch_checks`), each logged once."""
    found = check_groups(groups, episode_keys)
    spans = check_token_spans(everyone, advantages, turn_bonus)
    if spans is not None:
        found.append(spans)
    for warning in found:
        logger.warning("%s (Report.batch_warnings, metric batch_warnings/%s)", warning.message, warning.kind)
    return found


def _warn_if_all_skipped(eligible: list[GroupRecord]) -> bool:
    """Log a warning when every eligible group of a call fell back to GRPO (likely a setup error); whether it did."""
    if not eligible or any(g.status != "skipped" for g in eligible):
        return False
    kinds = {(g.stage, re.sub(r"\d+(\.\d+)?", "#", g.reason)) for g in eligible}
    first = eligible[0]
    logger.warning(
        "all %d eligible groups were skipped and keep plain GRPO credit, %s; e.g. group %r at %s: %s",
        len(eligible),
        "for one reason" if len(kinds) == 1 else f"for {len(kinds)} different reasons",
        first.group_id,
        first.stage,
        first.reason,
    )
    return True


def _warn_if_no_continuation_finished(eligible: list[GroupRecord]) -> None:
    """Log a warning, naming the first error, when continuations ran and every one that was not stopped failed:
    no verification could decide, whatever the judge declined elsewhere (likely a setup error, e.g. a policy
    that cannot parse the actions it generates)."""
    ran = [g for g in eligible if g.verify_stats is not None and g.verify_stats.spent > g.verify_stats.cancelled]
    failed = sum(g.verification.failed_continuations for g in ran if g.verification is not None)
    if not ran or failed < sum(g.verify_stats.spent - g.verify_stats.cancelled for g in ran if g.verify_stats):
        return
    first = ran[0]
    logger.warning(
        "every continuation of this call failed (%d), so no group was verified and every group keeps plain GRPO "
        "credit; e.g. group %r: %s",
        failed,
        first.group_id,
        first.reason,
    )


def compute_bonus(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    *,
    judge: Judge,
    env: RestorableEnv | None = None,
    policy: Policy | BatchPolicy | PolicyFn | None = None,
    continue_from: ContinueFn | None = None,
    config: ProverConfig | None = None,
    executor: Continuer | None = None,
    progress: ProgressFn | None = None,
) -> BonusResult:
    """Propose, Verify, Credit over one batch of grouped trajectories (a training run calls
    :class:`~prover_core.run.ProverRun`'s ``step`` instead, which keeps what lives across steps).

    Give ``env`` (a :class:`RestorableEnv`) and ``policy`` (the current :class:`BatchPolicy`, served one
    ``act_batch`` call per round; a :class:`Policy`; or a plain function ``act(context) -> action``), or the
    low-level ``continue_from(trajectory, turn, seed)``, or an ``executor`` from
    :mod:`prover_core.executors` (e.g. a ``RayExecutor``) that runs continuations elsewhere.
    Safe to call from inside a running event loop, except with async objects bound to that loop
    (:class:`~prover_core.errors.EventLoopError`: use ``await acompute_bonus(...)`` there).
    ``progress(event)`` is called with a :class:`~prover_core.progress.Progress` as verification's rounds of policy
    calls move on, as each continuation ends and as each eligible group finishes (``event.kind``).
    With ``config.control_share > 0``, ``Report.lift`` is this call's judge against chance alone.
    Raises :class:`InvalidBatchError` (or pydantic's ``ValidationError``) on a malformed batch and
    :class:`~prover_core.errors.ProtocolError` on objects that miss their protocol.
    """
    return run_sync(
        acompute_bonus(
            trajectories,
            judge=judge,
            env=env,
            policy=policy,
            continue_from=continue_from,
            config=config,
            executor=executor,
            progress=progress,
        )
    )
