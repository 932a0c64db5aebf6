"""``ProverGRPOTrainer``: TRL's ``GRPOTrainer`` with ProVer credit (imports trl and torch).

After the stock ``_generate_and_score_completions`` (generation, rewards, GRPO advantages ``A_i``)
and before TRL shuffles rows, every process:

1. rebuilds its rows as :class:`~prover_core.Trajectory` objects (turn spans from ``prover_turn_spans``
   or the runs of ``completion_mask * tool_mask``; outcome from ``prover_success`` or the reward). A row
   that cannot be rebuilt exactly (e.g. an observation rendered to zero tokens merged two actions into
   one run of the mask) makes its whole group a recorded skip with plain GRPO credit (an error under
   ``ProverConfig(strict=True)``),
2. gathers all processes' trajectories and token records, so groups split across processes are whole,
3. runs :func:`~prover_core.compute_bonus` on the groups it verifies: those whose representative
   successful row it holds (``verify_on="owner"``), or every group on the main process
   (``verify_on="main"``: vLLM server mode, where only the main process holds TRL's ``VLLMClient``),
4. gathers the accepted bonuses and returns advantages of shape ``(B, T)``: ``A[b, i] = A_b + lam * Delta``
   on the trainable tokens of an accepted segment, ``A_b`` elsewhere. TRL's ``_compute_loss`` takes
   ``(B, T)`` advantages as is.

The bonus is also returned as ``inputs["prover_bonus"]`` and the global row index as
``inputs["prover_row"]``; the report's figures are logged through TRL's own ``self._metrics`` under ``prover/``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from accelerate.utils import gather_object
from trl.trainer.grpo_trainer import GRPOTrainer

from prover_core.hosts import (
    BonusResult,
    ContinueFn,
    GroupRecord,
    Judge,
    Policy,
    ProverConfig,
    ProverRun,
    Report,
    RestorableEnv,
    Trajectory,
    credit_masses,
    default_judge,
    mask_runs,
    spread_to_tokens,
)
from prover_engine import EnginePolicy, Generation, TokenEngine, TokenStore
from prover_engine.parity import merge_metrics
from prover_trl.backend import backend, collective_generation
from prover_trl.batch import (
    PROVER_KEYS,
    RESET_KEY,
    SUCCESS_KEY,
    Row,
    build_trajectory,
    group_layout,
    owners,
)
from prover_trl.engines import VLLMColocateEngine, VLLMServerEngine, trainer_sampling
from prover_trl.errors import ProverTRLError
from prover_trl.policy import TrainerPolicy, _mix, seeded
from prover_trl.rollout import rollout_policy_options

VerifyOn = Literal["auto", "owner", "main"]
logger = logging.getLogger(__name__)

DEFAULT_MAX_CONCURRENCY = 64
"""Continuation requests in flight on a vLLM engine unless ``policy_options["max_concurrency"]`` says otherwise."""


def ddp_timeout_note(seconds: float, ddp_timeout: float | None, processes: int, verify_on: str) -> str | None:
    """A warning when a verification of ``seconds`` used over half of TRL's ``ddp_timeout`` (default 1800 s).

    While one process verifies, the others wait at the next gather under ``ddp_timeout``; past it,
    torch.distributed aborts the job. ``None`` when nothing waits or the time is well within it.
    """
    if processes < 2 or not ddp_timeout or seconds <= 0.5 * float(ddp_timeout):
        return None
    who = "the main process verifies every group" if verify_on == "main" else "processes verify their groups"
    return (
        f"ProVer verification took {seconds:.0f} s, over half of ddp_timeout={ddp_timeout:.0f} s; {who} while the "
        "other processes wait at the next collective, which aborts the job past ddp_timeout: raise "
        "GRPOConfig(ddp_timeout=...), lower ProverConfig.k, or raise policy_options['max_concurrency']"
    )


@dataclass
class ProverSetup:
    """How ProVer runs inside the trainer.

    Give ``env`` (a :class:`~prover_core.RestorableEnv`, e.g. ``ReplayEnv(make_env)``) and let
    continuations use the trainer's own generation (``policy=None``: vLLM server or colocate engine,
    or transformers ``generate``), or give a ``policy`` (a :class:`~prover_core.Policy`, or
    ``trainer -> Policy``), or give ``continue_from`` instead of both.

    ``verify_on``: ``"owner"`` verifies each group on the process holding its representative
    successful row; ``"main"`` verifies every group on the main process (a ``policy`` factory may then
    return ``None`` on the other processes); ``"auto"`` is ``"main"`` in vLLM server mode, else ``"owner"``.
    """

    judge: Judge = field(default_factory=default_judge)
    """The library's default (:func:`prover_core.default_judge`, a ``ChoiceJudge``) unless given."""
    env: RestorableEnv | None = None
    policy: Policy | Callable[[Any], Policy | None] | None = None
    continue_from: ContinueFn | None = None
    config: ProverConfig = field(default_factory=ProverConfig)
    enabled: bool = True
    verify_on: VerifyOn = "auto"
    policy_options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the default policy: ``render_observation`` and ``parse_action`` (token ids ->
    action; both must match the rollout's: taken from the trainer's ``rollout_func`` when
    :func:`~prover_trl.make_rollout_func` built it), ``max_action_tokens`` (likewise); for
    :class:`~prover_trl.policy.TrainerPolicy` also ``batched``; for the vLLM engines also ``max_concurrency`` and
    ``timeout_s``."""


@dataclass(frozen=True)
class _Built:
    """One row as every process sees it after the gather."""

    row: int
    group_id: str
    trajectory: Trajectory | None
    problem: str | None
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    success: bool
    turns: int


class _ParseIds:
    """``Generation -> action`` from a ``token ids -> action`` parser."""

    def __init__(self, parse: Callable[[Any], Any]) -> None:
        self.parse = parse

    def __call__(self, generation: Generation) -> Any:
        return self.parse(list(generation.token_ids))


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
        self._policy_built_with: dict[str, Any] | None = None  # the options the trainer's own policy was built with
        setup = self.prover
        self.prover_run = ProverRun(setup.judge, setup.config, env=setup.env, continue_from=setup.continue_from)
        """The run's ProVer state (the step's seed, the judge's window against chance, ...): one per trainer."""
        self.prover_verify_on: VerifyOn = setup.verify_on
        if setup.verify_on == "auto":
            self.prover_verify_on = "main" if backend(self) == "vllm_server" and setup.policy is None else "owner"
        if not setup.enabled:
            return
        if setup.continue_from is not None:
            if setup.env is not None or setup.policy is not None:
                raise ValueError("ProverSetup: give either continue_from or env (and optionally policy), not both")
            return
        if setup.env is None:
            raise ValueError("ProverSetup needs env (a RestorableEnv, e.g. prover_core.ReplayEnv) or continue_from")
        if setup.policy is None:
            self.prover_policy = self._default_policy()
            self._policy_built_with = self._policy_options()
        elif isinstance(setup.policy, Policy):
            self.prover_policy = setup.policy
        else:
            self.prover_policy = setup.policy(self)
        if self.prover_policy is None and (self.prover_verify_on == "owner" or self.accelerator.is_main_process):
            raise ValueError("ProverSetup.policy returned None on a process that verifies groups")

    def _default_policy(self) -> Policy | None:
        """The trainer's own generation: an engine over TRL's vLLM backend, or ``TrainerPolicy``."""
        kind = backend(self)
        if kind != "vllm_server" and collective_generation(self):
            raise NotImplementedError(
                "ProVer continuations with the trainer's own generation need every process to generate on its "
                "own, but here generation is collective (DeepSpeed ZeRO-3, FSDP, or vLLM colocate with tensor "
                "parallelism): use vLLM server mode, or pass ProverSetup(policy=...) or continue_from=..."
            )
        if kind == "transformers":
            return TrainerPolicy(self, **self._policy_options())
        if kind == "vllm_colocate":
            # colocated vLLM's context limit is GRPOConfig.vllm_max_model_length: clamp continuations to its room
            limit = getattr(self.args, "vllm_max_model_length", None)
            return self._engine_policy(VLLMColocateEngine(self.vllm_generation), max_model_len=limit)
        if self.prover_verify_on == "owner" and self.accelerator.num_processes > 1:
            raise ValueError("vLLM server mode: only the main process holds the client, so verify_on must be 'main'")
        if not self.accelerator.is_main_process:
            return None
        workers = int(self._policy_options().get("max_concurrency", DEFAULT_MAX_CONCURRENCY))
        return self._engine_policy(VLLMServerEngine(self.vllm_generation.vllm_client, max_workers=workers))

    def _policy_options(self) -> dict[str, Any]:
        """``ProverSetup.policy_options`` over what the ``rollout_func`` was built with (:func:`make_rollout_func`):
        continuations render observations and parse actions as the rollout did, without being told twice."""
        return {**rollout_policy_options(getattr(self, "rollout_func", None), self), **self.prover.policy_options}

    def _engine_policy(self, engine: TokenEngine, max_model_len: int | None = None) -> EnginePolicy:
        """An EnginePolicy over ``engine``; ``max_model_len`` (unless the user's policy options set one)
        clamps each action to the room left in the engine's context (server mode: pass the server's)."""
        options = self._policy_options()
        if max_model_len is not None:
            options.setdefault("max_model_len", max_model_len)
        tokenizer: Any = getattr(self.processing_class, "tokenizer", self.processing_class)
        render = options.pop("render_observation", None) or (
            lambda obs: tokenizer.encode(str(obs), add_special_tokens=False)
        )
        parse = options.pop("parse_action", None) or (
            lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True).strip()
        )
        options.pop("batched", None)  # the engines batch concurrent continuations themselves
        sampling = trainer_sampling(self, options.pop("max_action_tokens", None))
        options.setdefault("max_concurrency", DEFAULT_MAX_CONCURRENCY)
        return EnginePolicy(
            engine, TokenStore(), render_observation=render, parse_action=_ParseIds(parse), sampling=sampling, **options
        )

    def _engine_session(self) -> AbstractContextManager[None]:
        """The colocated engine's :meth:`~prover_trl.engines.VLLMColocateEngine.session` (weights pushed once)."""
        policy = self.prover_policy
        if isinstance(policy, EnginePolicy) and isinstance(policy.engine, VLLMColocateEngine):
            return policy.engine.session()
        return nullcontext()

    def _warn_if_near_ddp_timeout(self, seconds: float) -> None:
        """Warn when one process's verification took over half of ``args.ddp_timeout`` while others wait."""
        note = ddp_timeout_note(
            seconds, getattr(self.args, "ddp_timeout", None), self.accelerator.num_processes, self.prover_verify_on
        )
        if note is not None:
            logger.warning(note)

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

    def _build_rows(self, rows: list[Row], tag: str, start: int, size: int) -> list[_Built]:
        """This process's rows as trajectories; a row that cannot be rebuilt carries its ``problem`` instead."""
        tokenizer: Any = getattr(self.processing_class, "tokenizer", self.processing_class)

        def decode(ids: Any) -> str:
            return str(tokenizer.decode(list(ids), skip_special_tokens=True))

        out = []
        for i, row in enumerate(rows):
            group_id = f"{tag}:g{(start + i) // size}"
            trajectory, problem = None, None
            try:
                trajectory = build_trajectory(row, trajectory_id=f"{tag}:{start + i}", group_id=group_id, decode=decode)
            except ProverTRLError as exc:
                if self.prover.config.strict:
                    raise
                problem = str(exc)
            success = row.extras.get(SUCCESS_KEY, row.reward)
            out.append(
                _Built(
                    row=start + i,
                    group_id=group_id,
                    trajectory=trajectory,
                    problem=problem,
                    prompt_ids=tuple(int(t) for t in row.prompt_ids),
                    completion_ids=tuple(int(t) for t in row.completion_ids),
                    success=success is True or success == 1,
                    turns=trajectory.num_turns if trajectory is not None else len(mask_runs(row.trainable)),
                )
            )
        return out

    def _record_tokens(self, everyone: list[_Built]) -> None:
        """Hand the step's token records to the continuation policy (all rows, so any process may verify)."""
        policy = self.prover_policy
        if isinstance(policy, TrainerPolicy):
            policy.clear()
            policy.generated_tokens = 0
            for b in everyone:
                if b.trajectory is not None:
                    policy.sequences[b.trajectory.id] = (list(b.prompt_ids), list(b.completion_ids))
        elif isinstance(policy, EnginePolicy):
            policy.clear()
            policy.tokens.clear()
            for b in everyone:
                if b.trajectory is not None:
                    policy.tokens.add(b.trajectory, b.prompt_ids, b.completion_ids)

    def _continuation_tokens(self) -> int | None:
        policy = self.prover_policy
        if isinstance(policy, TrainerPolicy):
            return policy.generated_tokens
        if isinstance(policy, EnginePolicy):
            return policy.stats.generated_tokens
        return None

    def _prover_bonus(self, output: dict[str, Any], resets: list[dict[str, Any]]) -> torch.Tensor:
        """The ``(B, T)`` bonus of this process's rows, zero outside trainable tokens (the module docstring's steps).

        Every process makes the same collective calls in the same order (two gathers of objects, one of a
        tensor), whatever fails where: a failure travels with the gather and is raised on every process.
        """
        self._follow_the_rollouts_options()
        loss_mask = self._loss_mask(output)
        local, length = loss_mask.shape
        tag = f"{self.state.global_step}.{self._prover_calls}"
        self._prover_calls += 1
        mine, everyone, problems = self._rebuild_rows(resets, tag, local)  # steps 1 and 2
        batch = self._groups_to_verify(everyone, problems, local)
        self._record_tokens([b for b in everyone if b.group_id not in problems])
        result, failure = self._verify(batch, tag)  # step 3
        report = Report() if result is None else result.report
        credit = {} if result is None else {k: v for k, v in result.turn_bonus.items() if np.any(v)}
        gathered = self._gather_or_raise([(report, credit, self._take_continuation_tokens())], failure)
        accepted = {tid: bonus for _, part, _ in gathered for tid, bonus in part.items()}  # step 4
        bonus = self._bonus_tensor(mine, accepted, length).to(loss_mask.device) * loss_mask.float()
        base = output["advantages"].detach().unsqueeze(1).expand(local, length)  # TRL's own, before the bonus
        masses = credit_masses(bonus.cpu().numpy(), base.float().cpu().numpy(), loss_mask.cpu().numpy())
        self._log_step(result, gathered, everyone, problems, bonus, torch.tensor(masses, device=bonus.device))
        self._prover_generated = self._prover_rewards = None  # drop this step's references
        return bonus

    def _follow_the_rollouts_options(self) -> None:
        """The trainer's own policy renders and parses as the rollout that just ran did: a ``make_rollout_func``
        rollout wrapped by the user without ``functools.wraps`` hid its options at ``__init__``, but recorded them
        on the trainer when it ran; the default policy is rebuilt with them once."""
        if self._policy_built_with is None or self._policy_options() == self._policy_built_with:
            return
        self.prover_policy = self._default_policy()
        self._policy_built_with = self._policy_options()

    def _rebuild_rows(
        self, resets: list[dict[str, Any]], tag: str, local: int
    ) -> tuple[list[_Built], list[_Built], dict[str, str]]:
        """This process's rows as trajectories, every process's (gathered), and the groups that cannot be rebuilt
        exactly, with the first reason (each becomes a recorded skip)."""
        size: int = self.num_generations  # type: ignore[assignment]  # always set in train mode
        group_layout(local * self.accelerator.num_processes, size)
        failure: Exception | None = None
        try:
            mine = self._build_rows(self._prover_rows(resets), tag, self.accelerator.process_index * local, size)
        except Exception as exc:
            mine, failure = [], exc
        everyone: list[_Built] = self._gather_or_raise(mine, failure)
        problems: dict[str, str] = {}
        for b in everyone:
            if b.problem is not None:
                problems.setdefault(b.group_id, b.problem)
        return mine, everyone, problems

    def _groups_to_verify(self, everyone: list[_Built], problems: dict[str, str], local: int) -> list[Trajectory]:
        """The trajectories of the groups this process verifies (``verify_on``), the unrebuildable groups left out."""
        valid = [b.trajectory if b.group_id not in problems else None for b in everyone]
        if self.prover_verify_on == "main":
            owner = {t.group_id: 0 for t in valid if t is not None}
        else:
            owner = owners(valid, local, self.prover.config)
        here = self.accelerator.process_index
        return [t for t in valid if t is not None and owner[t.group_id] == here]

    def _verify(self, batch: list[Trajectory], tag: str) -> tuple[BonusResult | None, Exception | None]:
        """``compute_bonus`` on ``batch`` in a forked RNG (the training stream is untouched), or the failure."""
        if not batch:
            return None, None
        setup, started = self.prover, time.monotonic()
        policy = self.prover_policy if setup.continue_from is None else None
        try:
            with seeded(_mix(setup.config.seed, tag)), self._engine_session():
                return self.prover_run.verify(batch, policy=policy), None
        except Exception as exc:
            return None, exc
        finally:
            self._warn_if_near_ddp_timeout(time.monotonic() - started)

    def _take_continuation_tokens(self) -> int | None:
        """The tokens the default policy generated this step; its per-step state is cleared."""
        generated = self._continuation_tokens()
        if isinstance(self.prover_policy, TrainerPolicy):
            self.prover_policy.clear()
        return generated

    @staticmethod
    def _bonus_tensor(mine: list[_Built], accepted: dict[str, np.ndarray[Any, Any]], length: int) -> torch.Tensor:
        """The accepted per-turn bonuses of this process's rows, spread onto their token spans."""
        bonus = torch.zeros(len(mine), length, dtype=torch.float32)
        for i, b in enumerate(mine):
            if b.trajectory is not None and b.trajectory.id in accepted:
                bonus[i] = torch.from_numpy(spread_to_tokens(b.trajectory, accepted[b.trajectory.id], length)).float()
        return bonus

    def _log_step(
        self,
        result: BonusResult | None,
        gathered: list[tuple[Report, Any, int | None]],
        everyone: list[_Built],
        problems: dict[str, str],
        bonus: torch.Tensor,
        masses: torch.Tensor,
    ) -> None:
        """One report from every process's (the unrebuildable groups as skips), its metrics into TRL's log;
        ``masses``: this process's ``(sum |bonus|, sum |A|)`` over its trainable tokens, summed over processes."""
        skips = [
            GroupRecord(
                group_id=gid,
                size=sum(b.group_id == gid for b in everyone),
                successes=sum(b.success for b in everyone if b.group_id == gid),
                status="skipped",
                stage="trigger",
                reason=f"the rollout rows cannot be rebuilt exactly: {problem}",
            )
            for gid, problem in problems.items()
        ]
        reports = [r for r, _, _ in gathered] + [Report(groups=skips)]
        credit_mass, advantage_mass = self.accelerator.gather(masses.double()).reshape(-1, 2).sum(0).tolist()
        merged = self.prover_run.finish(  # every process ends the step with the same reports: the same run state
            reports,
            masses=(credit_mass, advantage_mass),
            engine_stats=merge_metrics([r.engine_stats for r in reports]),
        ).model_copy(
            update={
                "rollout_episodes": len(everyone),
                "rollout_turns": sum(b.turns for b in everyone),
                "rollout_rounds": max(b.turns for b in everyone),
            }
        )
        self.prover_last_result, self.prover_last_report = result, merged
        metrics = merged.metrics()
        if metrics.get("prover/policy_calls"):  # TrainerPolicy's generate calls: their mean batch
            metrics["prover/policy_batch_mean"] = metrics["prover/policy_rows"] / metrics["prover/policy_calls"]
        counts = torch.tensor([float((bonus != 0).sum())], device=bonus.device)
        metrics["prover/bonus_tokens"] = float(self.accelerator.gather(counts).sum())
        if any(g is not None for _, _, g in gathered):
            metrics["prover/continuation_tokens"] = float(sum(g for _, _, g in gathered if g is not None))
        mode = "train" if self.model.training else "eval"
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)
