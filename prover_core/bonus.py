"""``compute_bonus``: trigger, propose, verify and credit over one training batch.

The result holds the GRPO advantage of every trajectory, the per-turn bonus (``lam * Delta`` on the
accepted segment of each group's representative successful run, 0 elsewhere) and a report. Any
failure inside a group (the judge, restoring, a continuation) leaves that group with plain GRPO
credit and a ``skipped`` record saying why, unless ``config.strict``.

Optional negative credit (``config.negative_credit``, off by default; not in the paper): a group whose
success rate lies strictly inside ``(negative_trigger_low, negative_trigger_high)`` (default (0.5, 1))
has its longest failed trajectory (ties: smallest id) segmented by the same judge, called with the
roles swapped: ``judge.propose(failed_run, successful_runs, rules)``, i.e. "where did this run do what
the successful runs did not". The drop is verified (``p_pre > p_post`` by the configured rule or the
adaptive test) and ``negative_lam * Delta`` (``Delta < 0``) is added to that segment's turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from prover_core._aio import run_sync
from prover_core.config import ProverConfig
from prover_core.credit import segment_bonus, spread_to_tokens
from prover_core.data import Decline, Trajectory
from prover_core.errors import InvalidBatchError, ProverError
from prover_core.grpo import grpo_advantages
from prover_core.pairing import paired
from prover_core.propose import propose
from prover_core.protocols import ContinueFn, Judge, Policy, RestorableEnv
from prover_core.report import Direction, GroupRecord, Report, Stage, Status
from prover_core.trigger import is_eligible, longest_failure, representative, success_rate
from prover_core.verify import Continuer, env_continuer, hook_continuer, verify_segment_detailed


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

    def turn_advantages(self, trajectory_id: str) -> NDArray[np.float64]:
        """``A_GRPO + bonus_t`` for every turn ``t``."""
        return self.advantages[trajectory_id] + self.turn_bonus[trajectory_id]

    def token_bonus(self, trajectory_id: str, length: int) -> NDArray[np.float64]:
        """The bonus on each of ``length`` token positions (0 outside the turns' token spans)."""
        return spread_to_tokens(self.trajectories[trajectory_id], self.turn_bonus[trajectory_id], length)

    def token_advantages(self, trajectory_id: str, length: int) -> NDArray[np.float64]:
        """``A_GRPO + bonus_t`` on the action tokens of turn ``t``; 0 on every other position."""
        return spread_to_tokens(self.trajectories[trajectory_id], self.turn_advantages(trajectory_id), length)

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


def _continuer(
    env: RestorableEnv | None,
    policy: Policy | None,
    continue_from: ContinueFn | None,
    config: ProverConfig,
    executor: Continuer | None = None,
) -> Continuer:
    if executor is not None:
        if env is not None or policy is not None or continue_from is not None:
            raise ValueError("give executor alone, without env, policy or continue_from")
        return executor
    if continue_from is not None:
        if env is not None or policy is not None:
            raise ValueError("give either continue_from or env and policy, not both")
        return hook_continuer(continue_from)
    if env is None or policy is None:
        raise ValueError("compute_bonus needs env and policy, or continue_from")
    env, policy = paired(config.pairing, env, policy)
    return env_continuer(env, policy, config.max_continuation_turns)


async def _credit_group(
    group_id: str,
    members: list[Trajectory],
    judge: Judge,
    continuer: Continuer,
    config: ProverConfig,
    limit: asyncio.Semaphore,
    direction: Direction = "gain",
) -> tuple[GroupRecord, tuple[str, NDArray[np.float64]] | None]:
    """Propose, verify and credit one eligible group (``drop``: debit its longest failed run)."""
    if direction == "gain":
        success = representative(members)
        failures = [t for t in members if not t.success]
        lam = config.lam
    else:  # the judge segments the failed run, against the successful runs
        success = longest_failure(members)
        failures = [t for t in members if t.success]
        lam = config.debit_lam
    successes = sum(t.success for t in members)

    def record(status: Status, stage: Stage, reason: str, **found: Any) -> GroupRecord:
        return GroupRecord(
            group_id=group_id,
            size=len(members),
            successes=successes,
            trajectory_id=success.id,
            status=status,
            stage=stage,
            reason=reason,
            direction=direction,
            **found,
        )

    try:
        answer = await propose(judge, success, failures, config.segment_rules)
    except ProverError as exc:
        if config.strict:
            raise
        return record("skipped", "propose", f"{type(exc).__name__}: {exc}"), None
    if isinstance(answer, Decline):
        return record("declined", "propose", answer.reason), None
    verification, stats = await verify_segment_detailed(success, answer.segment, continuer, config, limit, direction)
    found = dict(proposal=answer, verification=verification, verify_stats=stats)
    if verification.incomplete:
        return record("skipped", "verify", verification.reason, **found), None
    if not verification.accepted:
        return record("rejected", "verify", verification.reason, **found), None
    bonus = segment_bonus(success.num_turns, answer.segment, verification.delta, lam)
    return record("accepted", "verify", verification.reason, **found), (success.id, bonus)


async def acompute_bonus(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    *,
    judge: Judge,
    env: RestorableEnv | None = None,
    policy: Policy | None = None,
    continue_from: ContinueFn | None = None,
    config: ProverConfig | None = None,
    executor: Continuer | None = None,
) -> BonusResult:
    """The ``async`` form of :func:`compute_bonus`; eligible groups are judged and verified concurrently."""
    config = config or ProverConfig()
    continuer = _continuer(env, policy, continue_from, config, executor)
    new_step = getattr(judge, "new_step", None)
    if callable(new_step):  # one call is one training step: per-step budgets and stats start afresh
        new_step()
    groups = group_batch(trajectories)
    advantages = grpo_advantages(groups, normalize_std=config.normalize_std, eps=config.std_eps)
    everyone = [t for members in groups.values() for t in members]
    turn_bonus = {t.id: np.zeros(t.num_turns) for t in everyone}

    records: dict[str, GroupRecord] = {}
    eligible: list[tuple[str, Direction]] = []
    for gid, members in groups.items():
        successes = sum(t.success for t in members)
        rate = success_rate(members)
        if is_eligible(rate, config.trigger_low, config.trigger_high):
            eligible.append((gid, "gain"))
        elif config.negative_credit and is_eligible(rate, config.negative_trigger_low, config.negative_trigger_high):
            eligible.append((gid, "drop"))
        else:
            records[gid] = GroupRecord(
                group_id=gid,
                size=len(members),
                successes=successes,
                status="not_eligible",
                reason=f"success rate {successes}/{len(members)} outside ({config.trigger_low}, {config.trigger_high})",
            )

    limit = asyncio.Semaphore(config.max_concurrency)
    outcomes = await asyncio.gather(
        *(_credit_group(gid, groups[gid], judge, continuer, config, limit, d) for gid, d in eligible)
    )
    for (gid, _), (record, credit) in zip(eligible, outcomes, strict=True):
        records[gid] = record
        if credit is not None:
            turn_bonus[credit[0]] = credit[1]

    stats = getattr(judge, "stats", None)
    report = Report(
        groups=[records[gid] for gid in groups],
        judge_calls=len(eligible),
        rollout_turns=sum(t.num_turns for t in everyone),
        rollout_episodes=len(everyone),
        judge_stats=dict(stats()) if callable(stats) else {},
    )
    return BonusResult(
        trajectories={t.id: t for t in everyone}, advantages=advantages, turn_bonus=turn_bonus, report=report
    )


def compute_bonus(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    *,
    judge: Judge,
    env: RestorableEnv | None = None,
    policy: Policy | None = None,
    continue_from: ContinueFn | None = None,
    config: ProverConfig | None = None,
    executor: Continuer | None = None,
) -> BonusResult:
    """Propose, Verify, Credit over a batch of grouped trajectories.

    Give ``env`` (a :class:`RestorableEnv`) and ``policy`` (the current :class:`Policy`), or the
    low-level ``continue_from(trajectory, turn, seed)``, or an ``executor`` from
    :mod:`prover_core.executors` (e.g. a ``RayExecutor``) that runs continuations elsewhere.
    Safe to call from inside a running event loop.
    Raises :class:`InvalidBatchError` (or pydantic's ``ValidationError``) on a malformed batch.
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
        )
    )
