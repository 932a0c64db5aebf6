"""``ProverExperienceMaker``: OpenRLHF's ``RemoteExperienceMaker`` plus the ProVer bonus.

``compute_advantages_and_returns`` runs OpenRLHF's own computation unchanged (any estimator:
``group_norm``, ``reinforce_baseline``, ``rloo``, ``dr_grpo``, ...), then for every accepted segment
adds ``lam * Delta`` on its action tokens:

    A[i, p] = A_stock[i, p] + bonus_t * action_mask[i, p]     for p in the span of turn t of row i

where turn ``t`` is the ``t``-th run of 1s of ``action_mask[i]`` and ``bonus_t`` is
``BonusResult.turn_bonus``. Every other position keeps OpenRLHF's value exactly (OpenRLHF leaves
non-zero advantages on environment tokens before the last action; they are not touched). With
``reinforce_baseline`` the bonus comes after OpenRLHF's batch whitening, i.e. in whitened units.

When the setup's policy is an :class:`~prover_engine.EnginePolicy` (e.g.
:func:`~prover_openrlhf.engine.engine_policy` over OpenRLHF's own vLLM engines), the maker records each
credited row's token ids in the policy's store, ``prompt_ids = sequences[:1]`` and
``completion_ids = sequences[1:length]`` (OpenRLHF's ``action_mask`` is ``mask[1:]``, so the turn spans
index ``sequences[1:]``): the context before turn ``t`` is then ``sequences[:s_t]``, exactly the ids the
engine generated turn ``t`` from. With ``--vllm.enable_sleep`` the engines are woken for verification and
put back to sleep after it, as OpenRLHF's ``SamplesGenerator`` does around generation.

ProVer's figures (``Report.metrics()``, the engine's counters, the verification time) go into every
row's ``Experience.info`` as per-sample constants, so OpenRLHF's actor reports their value in the
training status it logs to wandb / TensorBoard (``prover/...`` keys).

Importing this module imports OpenRLHF and torch; ``import prover_openrlhf`` does not.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

import torch
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker  # type: ignore[import-untyped]
from openrlhf.utils.logging_utils import init_logger  # type: ignore[import-untyped]

from prover_core.hosts import BonusResult, ProverRun, Report, Trajectory
from prover_engine import EnginePolicy
from prover_openrlhf.batch import Row, batch_rows, plan_batch
from prover_openrlhf.engine import RolloutEngines, find_engines
from prover_openrlhf.prover_setup import ProverSetup, load_setup

logger = init_logger(__name__)

BONUS_INFO_KEY = "prover_bonus"
"""Per-sample metric added to ``Experience.info``: the largest bonus on any of the sample's turns (0 if none)."""


class ProverExperienceMaker(RemoteExperienceMaker):  # type: ignore[misc]
    """OpenRLHF's experience maker with ProVer credit on the accepted segments' action tokens.

    Takes OpenRLHF's constructor arguments plus ``prover`` (a :class:`ProverSetup`); without it the
    setup is loaded on first use from ``$PROVER_OPENRLHF_SETUP`` (which is how the trainer, which
    constructs the maker with OpenRLHF's fixed arguments, configures it).
    """

    def __init__(
        self, *args: Any, prover: ProverSetup | None = None, vllm_engines: list[Any] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._prover = prover
        self._vllm_engines = vllm_engines
        self._prover_run: ProverRun | None = None
        self.last_report: Report | None = None
        self.last_metrics: dict[str, float] = {}
        self.last_result: BonusResult | None = None
        """The last step's :class:`~prover_core.BonusResult` (``None`` when no group was planned)."""

    @property
    def vllm_engines(self) -> list[Any]:
        """OpenRLHF's ``RolloutRayActor`` handles: given to the constructor, else the ones the launcher published."""
        if self._vllm_engines is None:
            self._vllm_engines = find_engines()
        return self._vllm_engines

    @property
    def prover(self) -> ProverSetup:
        if self._prover is None:
            self._prover = load_setup(self)
        return self._prover

    @property
    def prover_run(self) -> ProverRun:
        """The run's ProVer state (the step's seed, the judge's window against chance, ...): one per maker."""
        if self._prover_run is None:
            setup = self.prover
            self._prover_run = ProverRun(
                setup.judge, setup.config, env=setup.env, policy=setup.policy, continue_from=setup.continue_from
            )
        return self._prover_run

    @torch.no_grad()
    def compute_advantages_and_returns(self, experiences: list[Any]) -> list[Any]:
        """OpenRLHF's advantages, then ``+ lam * Delta`` on accepted segments (see the module doc)."""
        setup = self.prover
        if not setup.enabled:
            return list(super().compute_advantages_and_returns(experiences))
        # The binary outcome, before OpenRLHF's length penalties reshape the rewards.
        raw = [exp.rewards.detach().to("cpu", torch.float64).clone() for exp in experiences]
        rows = batch_rows(experiences, raw, self.args.rollout.n_samples_per_prompt)
        records = setup.store.take([r.key for r in rows])
        experiences = super().compute_advantages_and_returns(experiences)

        plan = plan_batch(rows, records)
        run = self.prover_run  # a new root seed every step (config.seed + step): reproducible, never repeated
        turn_bonus: dict[str, Any] = {}
        result = None
        policy = setup.policy if isinstance(setup.policy, EnginePolicy) else None
        started = time.perf_counter()
        if plan.trajectories:
            if policy is not None:
                record_tokens(policy, experiences, rows, plan.trajectories)
            with self._engines_awake(policy, any_mixed_group(plan.trajectories)):
                result = run.verify(plan.trajectories)
            turn_bonus = dict(result.turn_bonus)
        report = result.report if result is not None else Report()
        groups = sorted([*report.groups, *plan.left_out], key=lambda g: int(g.group_id))
        self.last_result = result

        # the credit share against OpenRLHF's own advantage, over every row's trainable tokens
        advantage_mass = sum(float((exp.advantages.abs() * exp.action_mask).sum()) for exp in experiences)
        credit_mass = 0.0
        for exp in experiences:
            exp.info[BONUS_INFO_KEY] = torch.zeros(len(exp.action_mask), dtype=torch.float32)
        for row in rows:
            bonus = turn_bonus.get(row.trajectory_id)
            if bonus is None or not bonus.any():
                continue
            assert result is not None
            credit_mass += self._add_bonus(
                experiences[row.experience], row, result.token_bonus(row.trajectory_id, row.length)
            )
            experiences[row.experience].info[BONUS_INFO_KEY][row.row] = float(bonus[abs(bonus).argmax()])
        # every step ends in the run (its window of the judge against chance too), one without eligible groups too
        report = run.finish([report.model_copy(update={"groups": groups})], masses=(credit_mass, advantage_mass))
        self.last_report = report
        self.last_metrics = self._metrics(self.last_report, policy, time.perf_counter() - started)
        if policy is not None:
            policy.clear()
            policy.tokens.clear()
        for exp in experiences:
            for key, value in self.last_metrics.items():
                exp.info[key] = torch.full((len(exp.action_mask),), value, dtype=torch.float32)
        logger.info(f"ProVer step {run.steps - 1}: {self.last_report.summary()}")
        return list(experiences)

    def _engines_awake(self, policy: EnginePolicy | None, needed: bool) -> Any:
        """OpenRLHF's engines awake during verification (a no-op unless they sleep: ``--vllm.enable_sleep``).

        Not woken when ``needed`` is false (no group mixes successes and failures: nothing to verify).
        """
        engine = policy.engine if policy is not None else None
        sleeps = bool(getattr(getattr(self.args, "vllm", None), "enable_sleep", False))
        if isinstance(engine, RolloutEngines) and needed:
            return engine.awake(sleep_after=sleeps)
        return nullcontext()

    @staticmethod
    def _metrics(report: Report, policy: EnginePolicy | None, seconds: float) -> dict[str, float]:
        """``Report.metrics()`` plus the engine's counters and the wall time of this step's ProVer work."""
        metrics = report.metrics()
        metrics["prover/time_s"] = seconds
        if policy is not None:
            stats = policy.stats
            metrics["prover/engine_calls"] = float(stats.calls)
            metrics["prover/engine_prompt_tokens"] = float(stats.prompt_tokens)
            metrics["prover/engine_generated_tokens"] = float(stats.generated_tokens)
            metrics["prover/engine_failures"] = float(stats.failures)
        return metrics

    @staticmethod
    def _add_bonus(experience: Any, row: Row, token_bonus: Any) -> float:
        """``advantages[row] += token_bonus * action_mask[row]``; returns the sum of |what was added|."""
        adv = experience.advantages
        bonus = torch.as_tensor(token_bonus, dtype=adv.dtype, device=adv.device)
        mask = experience.action_mask[row.row].to(device=adv.device, dtype=adv.dtype)
        added = bonus * mask
        adv[row.row] += added
        return float(added.abs().sum())


def record_tokens(
    policy: EnginePolicy, experiences: list[Any], rows: list[Row], trajectories: list[Trajectory]
) -> None:
    """Each trajectory's row as ``(sequences[:1], sequences[1:length])`` in the policy's token store.

    Turn spans are runs of ``action_mask = mask[1:]``, i.e. positions in ``sequences[1:]``, so
    ``context_before(t) = sequences[:1 + a_t]``: the prompt and every token before turn ``t``'s action.
    """
    by_id = {row.trajectory_id: row for row in rows}
    policy.tokens.clear()
    for trajectory in trajectories:
        row = by_id[trajectory.id]
        exp = experiences[row.experience]
        length = int(exp.attention_mask[row.row].sum().item())
        ids = [int(i) for i in exp.sequences[row.row][:length].tolist()]
        policy.tokens.add(trajectory, ids[:1], ids[1:])


def any_mixed_group(trajectories: list[Trajectory]) -> bool:
    """Whether some group holds both a success and a failure (only such groups can trigger verification)."""
    outcomes: dict[str, set[bool]] = {}
    for t in trajectories:
        outcomes.setdefault(t.group_id, set()).add(t.success)
    return any(len(o) == 2 for o in outcomes.values())
