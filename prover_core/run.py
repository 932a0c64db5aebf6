"""``ProverRun``: a training run's state in one object, and its step.

Built once per training run from the judge, the config and how continuations run; ``step(batch)`` once per
training step. What lives across steps lives here and nowhere else:

* the step counter, and each step's seed ``config.seed + step`` (continuations and seeded draws differ from step to
  step and stay reproducible; step 0 is ``compute_bonus``'s own seed);
* the judge's per-step reset (``judge.new_step()``, :class:`~prover_core.protocols.PerStepJudge`), once per step;
* the judge against chance over the last ``config.lift_window`` steps (:class:`~prover_core.chance.LiftWindow`,
  ``config.control_share > 0``), which ``config.lift_throttle`` reads before each step and each step's report adds to;
* one report per step, merged from its parts.

A host that verifies a step in one call uses :meth:`ProverRun.step`; one that verifies a step in parts (one per
process, or per micro-batch) calls :meth:`ProverRun.verify` for each part and :meth:`ProverRun.finish` once with
every part's report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from prover_core._aio import run_sync
from prover_core.bonus import BonusResult, Hooks, run_pipeline
from prover_core.chance import LiftWindow
from prover_core.config import ProverConfig
from prover_core.continuations import Continuer
from prover_core.data import Trajectory
from prover_core.progress import ProgressFn
from prover_core.protocols import BatchPolicy, ContinueFn, Judge, PerStepJudge, Policy, PolicyFn, RestorableEnv, require
from prover_core.report import Report

__all__ = ["ProverRun", "merge_reports"]


class ProverRun:
    """One training run of ProVer: ``step(batch)`` per training step (module docstring).

    ``env`` and ``policy`` (or ``continue_from``, or an ``executor``) are how continuations run; a step may pass
    its own in their place (a host whose policy object changes with the weights)."""

    def __init__(
        self,
        judge: Judge,
        config: ProverConfig | None = None,
        *,
        env: RestorableEnv | None = None,
        policy: Policy | BatchPolicy | PolicyFn | None = None,
        continue_from: ContinueFn | None = None,
        executor: Continuer | None = None,
        progress: ProgressFn | None = None,
    ) -> None:
        require(judge, "judge", Judge, "propose(success, failures, rules)")
        self.judge, self.config, self.progress = judge, config or ProverConfig(), progress
        self.hooks = Hooks(env, policy, continue_from, executor)
        self.steps = 0
        """Training steps finished (:meth:`finish`)."""
        self.window = LiftWindow(self.config.lift_window) if self.config.control_share > 0 else None
        """The judge against chance over the last ``config.lift_window`` steps (``None`` without controls)."""
        self._begun = False

    @property
    def step_config(self) -> ProverConfig:
        """The config of the current step: ``config`` with ``seed = config.seed + steps``."""
        return self.config.model_copy(update={"seed": self.config.seed + self.steps})

    async def averify(
        self,
        trajectories: Iterable[Trajectory | Mapping[str, Any]],
        *,
        env: RestorableEnv | None = None,
        policy: Policy | BatchPolicy | PolicyFn | None = None,
        continue_from: ContinueFn | None = None,
    ) -> BonusResult:
        """One part of the current step: the pipeline over ``trajectories`` at the step's seed, ``lift_throttle``
        reading the window as it stood before the step. Its report's ``lift`` is unset until :meth:`finish`."""
        if not self._begun:
            self._begun = True
            if isinstance(self.judge, PerStepJudge):
                self.judge.new_step()
        own = self.hooks
        hooks = Hooks(
            own.env if env is None else env,
            own.policy if policy is None else policy,
            own.continue_from if continue_from is None else continue_from,
            own.executor,
        )
        prior = self.window.total if self.window is not None else None
        return await run_pipeline(trajectories, self.judge, self.step_config, hooks, self.progress, prior)

    def verify(
        self,
        trajectories: Iterable[Trajectory | Mapping[str, Any]],
        *,
        env: RestorableEnv | None = None,
        policy: Policy | BatchPolicy | PolicyFn | None = None,
        continue_from: ContinueFn | None = None,
    ) -> BonusResult:
        """:meth:`averify`, from synchronous code."""
        return run_sync(self.averify(trajectories, env=env, policy=policy, continue_from=continue_from))

    def finish(
        self,
        reports: Sequence[Report],
        *,
        masses: tuple[float, float] | None = None,
        engine_stats: Mapping[str, float] | None = None,
    ) -> Report:
        """End the step: its parts' reports merged (:func:`merge_reports`), its judge against chance added to the
        window (``Report.lift`` is then the window's total), the step counter moved on. ``masses``: the credit
        share's two sums over the host's own advantage (:func:`~prover_core.credit.credit_masses`), in place of the
        core's; ``engine_stats``: the continuation engine's figures merged by the host."""
        report = merge_reports(reports)
        if masses is not None:
            report = report.with_masses(*masses)
        if engine_stats is not None:
            report = report.model_copy(update={"engine_stats": dict(engine_stats)})
        if self.window is not None:
            report = report.windowed(self.window)
        self.steps += 1
        self._begun = False
        return report

    async def astep(
        self,
        trajectories: Iterable[Trajectory | Mapping[str, Any]],
        *,
        env: RestorableEnv | None = None,
        policy: Policy | BatchPolicy | PolicyFn | None = None,
        continue_from: ContinueFn | None = None,
    ) -> BonusResult:
        """One whole training step in one call: :meth:`averify`, then :meth:`finish` with its report."""
        result = await self.averify(trajectories, env=env, policy=policy, continue_from=continue_from)
        return replace(result, report=self.finish([result.report]))

    def step(
        self,
        trajectories: Iterable[Trajectory | Mapping[str, Any]],
        *,
        env: RestorableEnv | None = None,
        policy: Policy | BatchPolicy | PolicyFn | None = None,
        continue_from: ContinueFn | None = None,
    ) -> BonusResult:
        """:meth:`astep`, from synchronous code (safe inside a running event loop, as ``compute_bonus`` is)."""
        return run_sync(self.astep(trajectories, env=env, policy=policy, continue_from=continue_from))


def merge_reports(reports: Sequence[Report]) -> Report:
    """One report from the reports of one step's parts: groups concatenated; counts, credit masses and judge stats
    summed; stage times the longest of any part (parts verify at the same time); the turn caps added (each part's
    cap is its share of its own rollout), and the token caps; engine figures summed (a host with figures that do not
    add, such as means, merges them itself: :meth:`ProverRun.finish`'s ``engine_stats``)."""
    if len(reports) == 1:
        return reports[0]
    stats: dict[str, float] = {}
    timings: dict[str, float] = {}
    engine: dict[str, float] = {}
    for r in reports:
        for k, v in r.judge_stats.items():
            stats[k] = stats.get(k, 0.0) + v
        for k, v in r.timings.items():
            timings[k] = max(timings.get(k, 0.0), v)
        for k, v in r.engine_stats.items():
            engine[k] = engine.get(k, 0.0) + v
    budgets = [r.turn_budget for r in reports if r.turn_budget is not None]
    token_budgets = [r.token_budget for r in reports if r.token_budget is not None]
    return Report(
        groups=[g for r in reports for g in r.groups],
        judge_calls=sum(r.judge_calls for r in reports),
        rollout_turns=sum(r.rollout_turns for r in reports),
        rollout_episodes=sum(r.rollout_episodes for r in reports),
        rollout_rounds=max((r.rollout_rounds for r in reports), default=0),
        judge_stats=stats,
        timings=timings,
        engine_stats=engine,
        turn_budget=sum(budgets) if budgets else None,
        rollout_tokens=sum(r.rollout_tokens for r in reports),
        token_budget=sum(token_budgets) if token_budgets else None,
        batch_warnings=[w for r in reports for w in r.batch_warnings],
        env_close_failures=sum(r.env_close_failures for r in reports),
        credit_mass=sum(r.credit_mass for r in reports),
        advantage_mass=sum(r.advantage_mass for r in reports),
    )
