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
import math
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from prover_core._aio import resolve, run_sync
from prover_core.batch_checks import BatchWarning, check_groups, check_token_spans
from prover_core.budget import TurnBudget, expected_cost, plan
from prover_core.chance import LiftWindow, control_segment, is_control
from prover_core.clock import PolicyClock
from prover_core.config import ProverConfig
from prover_core.continuations import Continuer, counted, make_continuer, usage_error
from prover_core.credit import segment_bonus, spread_to_tokens, turn_weights
from prover_core.data import Decline, Proposal, Segment, Trajectory
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
from prover_core.report import Direction, GroupRecord, Report, Stage, Status
from prover_core.restore import SnapshotEnv
from prover_core.trigger import longest_failure, representative, trigger
from prover_core.verify import continuation_seeds, verify_segment_detailed

__all__ = ["BonusResult", "acompute_bonus", "compute_bonus", "group_batch"]

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


@dataclass(frozen=True)
class _Case:
    """One eligible group as the pipeline sees it: the run the judge examines and the runs it is compared with.

    ``gain``: the shortest successful run against the failed runs; ``drop``: the longest failed run against the
    successful runs (negative credit). ``others`` are the group's other runs with the examined run's outcome.
    """

    group_id: str
    members: list[Trajectory]
    direction: Direction
    control: bool = False
    """Verifies a random control segment of the judge's length (:mod:`prover_core.chance`)."""

    @cached_property
    def examined(self) -> Trajectory:
        return representative(self.members) if self.direction == "gain" else longest_failure(self.members)

    @cached_property
    def against(self) -> list[Trajectory]:
        return [t for t in self.members if t.success != self.examined.success]

    @cached_property
    def others(self) -> list[Trajectory]:
        return [t for t in self.members if t.success == self.examined.success and t.id != self.examined.id]

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


async def _propose_case(case: _Case, judge: Judge, config: ProverConfig, clock: StageClock) -> GroupRecord | Proposal:
    """Stage 2 for one group: the judge's checked proposal, or the record of a decline or a failed judge."""
    try:
        with clock.stage("propose"):
            answer = await asyncio.wait_for(
                propose(judge, case.examined, case.against, config.segment_rules, case.others), config.judge_timeout_s
            )
    except asyncio.TimeoutError:  # propose() turns the judge's own errors into JudgeError: this is our limit
        timed_out = JudgeTimeoutError(f"judge timed out after {config.judge_timeout_s} s")
        if config.strict:
            raise timed_out from None
        return case.record("skipped", "propose", f"{type(timed_out).__name__}: {timed_out}")
    except ProverError as exc:
        fatal = usage_error(exc)
        if fatal is not None and fatal is not exc:
            raise fatal from exc
        if config.strict or fatal is not None:
            raise
        logger.debug("group %s: propose failed, skipped: %s: %s", case.group_id, type(exc).__name__, exc)
        return case.record("skipped", "propose", f"{type(exc).__name__}: {exc}")
    if isinstance(answer, Decline):
        logger.debug("group %s: the judge declined: %s", case.group_id, answer.reason)
        return case.record("declined", "propose", answer.reason)
    segment = answer.segment
    logger.debug("group %s: proposed turns [%d, %d] of %s", case.group_id, segment.start, segment.end, case.examined.id)
    if case.control:
        return _control(case, segment, config)
    return answer


def _throttled(
    cases: list[_Case], window: LiftWindow, config: ProverConfig, records: dict[str, GroupRecord]
) -> list[_Case]:
    """``config.lift_throttle``: while the window's lift interval does not lie above 0, the judge's own gain groups
    are kept at the controls' rate (``control_share / (1 - control_share)``, a seeded draw), the others recorded as
    ``unverified``; every case when the interval lies above 0 or the window has no control decided yet."""
    total = window.total
    low, high = total.interval()
    if not total.control_verified or low > 0:
        return cases
    rate = min(1.0, config.control_share / (1.0 - config.control_share)) if config.control_share < 1 else 1.0
    kept = []
    for case in cases:
        if (
            case.direction == "gain"
            and not case.control
            and not is_control(case.group_id, rate, _run_seed(case.examined, config) + 1)
        ):
            records[case.group_id] = case.record(
                "unverified",
                "trigger",
                f"lift_throttle: the judge's lift over the window, {total.lift:+.2f} [{low:+.2f}, {high:+.2f}], "
                f"is not above chance, so its groups are verified at the controls' rate ({rate:.2f})",
            )
        else:
            kept.append(case)
    return kept


def _run_seed(run: Trajectory, config: ProverConfig) -> int:
    """A seed of ``config.seed``, the run's id and its content (:func:`~prover_core.verify.continuation_seeds`'
    first): the control draws change with each step's new episodes even where the group ids repeat every step
    (one id per task), so the same tasks are not the controls at every step."""
    return int(continuation_seeds(config, run, 1)[0][0])


def _control(case: _Case, nominated: Segment, config: ProverConfig) -> GroupRecord | Proposal:
    """A control group's proposal: a uniformly random admissible segment of the nominated segment's length
    (:func:`~prover_core.chance.control_segment`), or the record of a decline when none has that length."""
    judged = f"the judge nominated turns [{nominated.start}, {nominated.end}]"
    rules, seed = config.segment_rules, _run_seed(case.examined, config)
    segment = control_segment(case.examined, nominated.num_turns, rules, seed)
    if segment is None:
        reason = f"control: no admissible segment of {nominated.num_turns} turns to draw ({judged})"
        return case.record("declined", "propose", reason)
    logger.debug("group %s: control, verifies turns [%d, %d] instead", case.group_id, segment.start, segment.end)
    return Proposal(segment=segment, rationale=f"control: a uniformly random admissible segment; {judged}")


async def _verify_case(
    case: _Case,
    answer: Proposal,
    continuer: Continuer,
    config: ProverConfig,
    limit: asyncio.Semaphore,
    clocks: tuple[StageClock, PolicyClock],
    budget: TurnBudget | None = None,
) -> tuple[GroupRecord, tuple[str, NDArray[np.float64]] | None]:
    """Stages 3 and 4 for one group: verify the proposed segment and, if accepted, its per-turn bonus."""
    examined, (stages, rounds) = case.examined, clocks
    with stages.stage("verify"):
        verification, stats = await verify_segment_detailed(
            examined, answer.segment, continuer, config, limit, case.direction, rounds, budget
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
    lam = config.lam if case.direction == "gain" else config.effective_negative_lam
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
    lift: LiftWindow | None = None,
) -> BonusResult:
    """The ``async`` form of :func:`compute_bonus`.

    The stages run over the whole batch in turn: every eligible group's judge is asked concurrently, then every
    proposed segment is verified together (so that a batching policy serves the continuations of all groups
    in the same calls), then the accepted bonuses are credited.
    """
    started = time.perf_counter()
    config = config or ProverConfig()
    require(judge, "judge", Judge, "propose(success, failures, rules)")
    if progress is not None and (isinstance(progress, type) or not callable(progress)):
        raise ProtocolError(f"progress must be callable as progress(event); got {described(progress)}")
    continuer = make_continuer(
        env,
        policy,
        continue_from,
        executor,
        max_turns=config.max_continuation_turns,
        threaded=config.continuation_timeout_s is not None,  # so that the time limit holds over blocking code
        pairing=config.pairing,
        replay=config.delta_of == "choices",
    )
    for cache in (env, getattr(executor, "snapshots", None)):
        if isinstance(cache, SnapshotEnv):  # one call is one step: the last step's states are stale
            cache.clear()
    if isinstance(judge, PerStepJudge):  # one call is one training step: per-step budgets and stats start afresh
        judge.new_step()
    groups = group_batch(trajectories)
    advantages = grpo_advantages(groups, normalize_std=config.normalize_std, eps=config.std_eps)
    everyone = [t for members in groups.values() for t in members]
    turn_bonus = {t.id: np.zeros(t.num_turns) for t in everyone}

    # 1. Trigger
    eligible, records = trigger(groups, config)
    cases = [_Case(gid, groups[gid], direction) for gid, direction in eligible]
    cases = [
        replace(case, control=is_control(case.group_id, config.control_share, _run_seed(case.examined, config)))
        if case.direction == "gain" and config.control_share > 0
        else case
        for case in cases
    ]
    if config.lift_throttle and lift is not None and config.control_share > 0:
        cases = _throttled(cases, lift, config, records)
    if logger.isEnabledFor(logging.DEBUG):
        _log_trigger(groups, dict(eligible), records)
    stages, gathered_at = StageClock(), time.perf_counter()
    tally = _Tally(len(cases), started, progress)
    continuer = counted(continuer, tally.continuation_ended)

    async def judged(case: _Case) -> GroupRecord | Proposal:
        answer = await _propose_case(case, judge, config, stages)
        if isinstance(answer, GroupRecord):
            records[case.group_id] = answer
            tally.group_finished(answer)
        return answer

    # 2. Propose: every eligible group's judge at once
    answers = await asyncio.gather(*(judged(case) for case in cases))
    proposed = [(case, answer) for case, answer in zip(cases, answers, strict=True) if isinstance(answer, Proposal)]
    limit, rounds = asyncio.Semaphore(config.max_concurrency), tally.clock
    rollout_turns = sum(t.num_turns for t in everyone)
    cap = None if config.max_extra_share is None else math.floor(config.max_extra_share * rollout_turns)
    budget = None if cap is None else TurnBudget(cap)
    if cap is not None and config.budget_plan != "off":
        proposed, left = _planned(proposed, cap, config)
        for record in left:
            records[record.group_id] = record
            tally.group_finished(record)

    async def verified(case: _Case, answer: Proposal) -> None:
        record, credit = await _verify_case(case, answer, continuer, config, limit, (stages, rounds), budget)
        records[case.group_id] = record
        if credit is not None:  # 4. Credit
            turn_bonus[credit[0]] = credit[1]
        tally.group_finished(record)

    # 3. Verify: every proposed segment together, so that each round of policy calls serves them all
    await asyncio.gather(*(verified(case, answer) for case, answer in proposed))
    concurrent = time.perf_counter() - gathered_at

    examined = [records[case.group_id] for case in cases]
    if not _warn_if_all_skipped(examined):
        _warn_if_no_continuation_finished(examined)
    mistakes = _batch_warnings(groups, everyone, advantages, turn_bonus, config.episode_keys)
    policy_stats = getattr(policy, "report_stats", None)
    engine_stats = dict(await resolve(policy_stats())) if callable(policy_stats) else {}
    weights = {t.id: turn_weights(t) for t in everyone}
    total = time.perf_counter() - started
    report = Report(
        credit_mass=sum(float(np.abs(turn_bonus[tid]) @ w) for tid, w in weights.items()),
        advantage_mass=sum(abs(advantages[tid]) * float(w.sum()) for tid, w in weights.items()),
        batch_warnings=mistakes,
        groups=[records[gid] for gid in groups],
        judge_calls=len(cases),
        rollout_turns=rollout_turns,
        turn_budget=cap,
        rollout_episodes=len(everyone),
        rollout_rounds=max(t.num_turns for t in everyone),
        judge_stats=dict(judge.stats()) if isinstance(judge, ReportingJudge) else {},
        timings={
            "propose": stages.wall("propose"),
            "verify": stages.wall("verify"),
            "credit": total - concurrent,
            "total": total,
        },
        engine_stats=engine_stats,
    )
    if lift is not None:
        report = report.windowed(lift)
    elif config.control_share > 0:
        report = report.model_copy(update={"lift": report.step_lift})
    if logger.isEnabledFor(logging.INFO):
        logger.info(_summary(report, total))
    return BonusResult(
        trajectories={t.id: t for t in everyone}, advantages=advantages, turn_bonus=turn_bonus, report=report
    )


def _planned(
    proposed: list[tuple[_Case, Proposal]], cap: int, config: ProverConfig
) -> tuple[list[tuple[_Case, Proposal]], list[GroupRecord]]:
    """The proposed groups ``config.budget_plan`` verifies under ``cap`` turns, and the records of the others."""
    costs, scores = [], []
    for i, (case, answer) in enumerate(proposed):
        seg = answer.segment
        cost = expected_cost([t.num_turns for t in case.members], seg.start, seg.end, config.k)
        rate = sum(t.success for t in case.members) / len(case.members)
        costs.append(cost)
        if config.budget_plan == "planner":
            scores.append(seg.num_turns * (1 - rate if case.direction == "gain" else rate) / cost)
        elif config.budget_plan == "random":
            scores.append(float(_run_seed(case.examined, config)))
        else:
            scores.append(-float(i))
    keep = plan(costs, scores, cap)
    left = [
        case.record(
            "unverified",
            "verify",
            f"budget plan ({config.budget_plan}): expected cost {cost:.0f} turns does not fit the cap of {cap} "
            f"(max_extra_share={config.max_extra_share}) beside the groups ranked before it",
            proposal=answer,
        )
        for (case, answer), cost, kept in zip(proposed, costs, keep, strict=True)
        if not kept
    ]
    return [p for p, kept in zip(proposed, keep, strict=True) if kept], left


def _log_trigger(
    groups: Mapping[str, Sequence[Trajectory]], eligible: Mapping[str, Direction], records: Mapping[str, GroupRecord]
) -> None:
    """One DEBUG line per group, in batch order: its success rate and whether it is eligible."""
    for gid, members in groups.items():
        record = records.get(gid)
        direction = eligible.get(gid, record.direction if record is not None else "gain")
        verdict = (
            "not eligible"
            if record is not None and record.status == "not_eligible"
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
    lift: LiftWindow | None = None,
) -> BonusResult:
    """Propose, Verify, Credit over a batch of grouped trajectories.

    Give ``env`` (a :class:`RestorableEnv`) and ``policy`` (the current :class:`BatchPolicy`, served one
    ``act_batch`` call per round; a :class:`Policy`; or a plain function ``act(context) -> action``), or the
    low-level ``continue_from(trajectory, turn, seed)``, or an ``executor`` from
    :mod:`prover_core.executors` (e.g. a ``RayExecutor``) that runs continuations elsewhere.
    Safe to call from inside a running event loop, except with async objects bound to that loop
    (:class:`~prover_core.errors.EventLoopError`: use ``await acompute_bonus(...)`` there).
    ``progress(event)`` is called with a :class:`~prover_core.progress.Progress` as verification's rounds of policy
    calls move on, as each continuation ends and as each eligible group finishes (``event.kind``).
    ``lift``: a :class:`~prover_core.chance.LiftWindow` kept across calls (one per training run): this call's judge
    and control counts are added to it and ``Report.lift`` is its total (without it, with
    ``config.control_share > 0``, ``Report.lift`` is this call's alone).
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
            lift=lift,
        )
    )
