"""``ProverGRPOTrainer``: TRL's ``GRPOTrainer`` with ProVer credit (imports trl and torch).

After the stock ``_generate_and_score_completions`` (generation, rewards, GRPO advantages ``A_i``)
and before TRL shuffles rows, every process:

1. rebuilds its rows as :class:`~prover_core.Trajectory` objects (turn spans from ``prover_turn_spans``
   or the runs of ``completion_mask * tool_mask``; outcome from ``prover_success`` or the reward),
2. gathers all processes' trajectories, so groups split across processes are whole,
3. runs :func:`~prover_core.compute_bonus` on the groups whose representative successful row it holds,
4. returns advantages of shape ``(B, T)``: ``A[b, i] = A_b + lam * Delta`` on the trainable tokens of
   an accepted segment, ``A_b`` elsewhere. TRL's ``_compute_loss`` takes ``(B, T)`` advantages as is.

The bonus is also returned as ``inputs["prover_bonus"]`` and the global row index as
``inputs["prover_row"]``; the report's figures are logged under ``prover/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.utils import gather_object
from trl.trainer.grpo_trainer import GRPOTrainer

from prover_core import (
    BonusResult,
    ContinueFn,
    DivergenceJudge,
    Judge,
    Policy,
    ProverConfig,
    Report,
    RestorableEnv,
    compute_bonus,
)
from prover_trl.batch import PROVER_KEYS, RESET_KEY, Row, build_trajectory, group_layout, merge_reports, owners
from prover_trl.errors import ProverTRLError
from prover_trl.policy import TrainerPolicy, _mix, seeded


@dataclass
class ProverSetup:
    """How ProVer runs inside the trainer.

    Give ``env`` (a :class:`~prover_core.RestorableEnv`, e.g. ``ReplayEnv(make_env)``) and let
    continuations use the trainer's own generation (``policy=None``), or give a ``policy`` (a
    :class:`~prover_core.Policy`, or ``trainer -> Policy``), or give ``continue_from`` instead of both.
    """

    judge: Judge = field(default_factory=DivergenceJudge)
    env: RestorableEnv | None = None
    policy: Policy | Callable[[Any], Policy] | None = None
    continue_from: ContinueFn | None = None
    config: ProverConfig = field(default_factory=ProverConfig)
    enabled: bool = True
    policy_options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the default :class:`~prover_trl.policy.TrainerPolicy`."""


def _collective_generation(trainer: Any) -> bool:
    """True when generation needs every process at once (vLLM, DeepSpeed ZeRO-3, FSDP)."""
    zero3 = (
        bool(getattr(trainer, "is_deepspeed_enabled", False))
        and getattr(getattr(trainer.accelerator.state, "deepspeed_plugin", None), "zero_stage", 0) == 3
    )
    return bool(trainer.use_vllm) or zero3 or bool(getattr(trainer, "is_fsdp_enabled", False))


class ProverGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` plus Propose, Verify, Credit; all ``GRPOTrainer`` arguments, plus ``prover``."""

    def __init__(self, *args: Any, prover: ProverSetup | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prover = prover or ProverSetup()
        self.prover_policy: Policy | None = None
        self.prover_last_result: BonusResult | None = None
        self.prover_last_report: Report | None = None
        self._prover_generated: tuple[Any, ...] | None = None
        self._prover_rewards: torch.Tensor | None = None
        self._prover_calls = 0
        if not self.prover.enabled:
            return
        setup = self.prover
        if setup.continue_from is not None:
            if setup.env is not None or setup.policy is not None:
                raise ValueError("ProverSetup: give either continue_from or env (and optionally policy), not both")
            return
        if setup.env is None:
            raise ValueError("ProverSetup needs env (a RestorableEnv, e.g. prover_core.ReplayEnv) or continue_from")
        if setup.policy is None:
            if self.accelerator.num_processes > 1 and _collective_generation(self):
                raise NotImplementedError(
                    "ProVer continuations with the trainer's own generation are not supported on several processes "
                    "when generation is collective (vLLM, DeepSpeed ZeRO-3, FSDP): each process verifies only its "
                    "own groups. Pass ProverSetup(policy=...) or continue_from=... that serves its own requests."
                )
            self.prover_policy = TrainerPolicy(self, **setup.policy_options)
        elif isinstance(setup.policy, Policy):
            self.prover_policy = setup.policy
        else:
            self.prover_policy = setup.policy(self)

    # -- capture what the stock method computes but does not return -------------------------------------------
    def _generate(self, prompts: list[Any]) -> Any:
        result = super()._generate(prompts)
        self._prover_generated = result
        return result

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._prover_rewards = rewards_per_func
        return rewards_per_func

    # -- the hook ----------------------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.prover.enabled or not getattr(self.model, "training", False):
            return super()._generate_and_score_completions(inputs)
        resets = [{k: v for k, v in x.items() if k != "prompt"} for x in inputs]  # before extras are merged in
        output = super()._generate_and_score_completions(inputs)
        bonus = self._prover_bonus(output, resets)
        advantages = output["advantages"]
        output["advantages"] = advantages.unsqueeze(1) + bonus.to(advantages.dtype)
        output["prover_bonus"] = bonus
        start = self.accelerator.process_index * len(bonus)
        output["prover_row"] = torch.arange(start, start + len(bonus), device=bonus.device)
        return output

    def _loss_mask(self, output: dict[str, Any]) -> torch.Tensor:
        mask: torch.Tensor = output["completion_mask"]
        return mask if "tool_mask" not in output else mask * output["tool_mask"]

    def _prover_rows(self, resets: list[dict[str, Any]]) -> list[Row]:
        assert self._prover_generated is not None and self._prover_rewards is not None
        prompt_ids, completion_ids, tool_mask, _, _, extra_fields, _, _ = self._prover_generated
        weights = self.reward_weights.to(self._prover_rewards.device)
        rewards = (self._prover_rewards * weights.unsqueeze(0)).nansum(dim=1)
        unscorable = torch.isnan(self._prover_rewards).all(dim=1)
        start = self.accelerator.process_index * len(completion_ids)
        rows = []
        for i, ids in enumerate(completion_ids):
            extras = {k: v[i] for k, v in extra_fields.items() if k in PROVER_KEYS and isinstance(v, list)}
            reward = float("nan") if bool(unscorable[start + i]) else float(rewards[start + i])
            rows.append(
                Row(
                    prompt_ids=list(prompt_ids[i]),
                    completion_ids=list(ids),
                    trainable=list(tool_mask[i]) if tool_mask is not None else [1] * len(ids),
                    reward=reward,
                    reset=extras.pop(RESET_KEY, resets[i]),
                    extras=extras,
                )
            )
        return rows

    def _gather_or_raise(self, items: list[Any], failure: Exception | None) -> list[Any]:
        """Every process's ``items``, concatenated; if any process failed, raise on every process.

        A process that raised on its own would leave the others waiting at the gather for ever; here
        the failure travels with the gather, so all processes raise :class:`ProverTRLError` together.
        """
        if self.accelerator.num_processes == 1:
            if failure is not None:
                raise failure
            return items
        here = self.accelerator.process_index
        note = None if failure is None else f"{type(failure).__name__}: {failure}"
        gathered = gather_object([(here, note, items)])
        errors = [f"process {rank}: {text}" for rank, text, _ in gathered if text is not None]
        if errors:
            raise ProverTRLError("ProVer failed on " + "; ".join(errors)) from failure
        return [item for _, _, part in gathered for item in part]

    def _prover_bonus(self, output: dict[str, Any], resets: list[dict[str, Any]]) -> torch.Tensor:
        """The ``(B, T)`` bonus of this process's rows, zero outside trainable tokens."""
        setup = self.prover
        loss_mask = self._loss_mask(output)
        local, length = loss_mask.shape
        rows = self._prover_rows(resets)
        tag = f"{self.state.global_step}.{self._prover_calls}"
        self._prover_calls += 1
        size: int = self.num_generations  # type: ignore[assignment]  # always set in train mode
        group_layout(local * self.accelerator.num_processes, size)
        start = self.accelerator.process_index * local
        tokenizer: Any = getattr(self.processing_class, "tokenizer", self.processing_class)

        def decode(ids: Any) -> str:
            return str(tokenizer.decode(list(ids), skip_special_tokens=True))

        failure: Exception | None = None
        try:
            mine = [
                build_trajectory(
                    row,
                    trajectory_id=f"{tag}:{start + i}",
                    group_id=f"{tag}:g{(start + i) // size}",
                    decode=decode,
                )
                for i, row in enumerate(rows)
            ]
        except Exception as exc:
            mine, failure = [], exc
        everyone = self._gather_or_raise(mine, failure)
        owner = owners(everyone, local, setup.config)
        here = self.accelerator.process_index
        batch = [t for t in everyone if owner[t.group_id] == here]

        if isinstance(self.prover_policy, TrainerPolicy):
            self.prover_policy.clear()
            self.prover_policy.generated_tokens = 0
            for i, row in enumerate(rows):
                self.prover_policy.sequences[mine[i].id] = (list(row.prompt_ids), list(row.completion_ids))
        result: BonusResult | None = None
        report = Report()
        if batch:
            try:
                with seeded(_mix(setup.config.seed, tag)):  # continuations never disturb the training RNG stream
                    result = compute_bonus(
                        batch,
                        judge=setup.judge,
                        env=setup.env if setup.continue_from is None else None,
                        policy=self.prover_policy if setup.continue_from is None else None,
                        continue_from=setup.continue_from,
                        config=setup.config,
                    )
                report = result.report
            except Exception as exc:
                failure = exc
        if isinstance(self.prover_policy, TrainerPolicy):
            self.prover_policy.clear()

        bonus = torch.zeros(local, length, dtype=torch.float32)
        if result is not None:
            for i, traj in enumerate(mine):
                if traj.id in result.turn_bonus and result.turn_bonus[traj.id].any():
                    bonus[i] = torch.from_numpy(result.token_bonus(traj.id, length)).float()
        bonus = bonus.to(loss_mask.device) * loss_mask.float()

        reports = self._gather_or_raise([report], failure)
        merged = merge_reports(reports)
        self.prover_last_result, self.prover_last_report = result, merged
        metrics = merged.metrics()
        generated = self.prover_policy.generated_tokens if isinstance(self.prover_policy, TrainerPolicy) else 0
        counts = torch.tensor([float((bonus != 0).sum()), float(generated)], device=bonus.device)
        bonus_tokens, continuation_tokens = self.accelerator.gather(counts).view(-1, 2).sum(dim=0).tolist()
        metrics["prover/bonus_tokens"] = bonus_tokens
        if isinstance(self.prover_policy, TrainerPolicy):
            metrics["prover/continuation_tokens"] = continuation_tokens
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)
        self._prover_generated = self._prover_rewards = None  # drop this step's references
        return bonus
