"""The ``prover`` advantage estimator, registered in verl's own registry (imports torch and verl).

    A_i,k = A_GRPO,i + lam * Delta   on the tokens of the accepted segment's turns of trajectory i,
    A_i,k = A_GRPO,i                 on every other token with response_mask 1, and 0 where it is 0.

``A_GRPO`` is exactly what verl computes for ``adv_estimator=grpo`` on the same trainer path (honouring
``algorithm.norm_adv_by_std_in_grpo``; the paper's setting is ``false``): verl's
``compute_grpo_outcome_advantage`` over all rows on the legacy path, and on the v1 path (the step carries
``batch_keys``) verl's own ``compute_advantage_for_multi_trajectories`` with ``grpo``, which scores each
session once by its final output and broadcasts that to the session's other outputs. (verl routes every
estimator but ``grpo`` over all rows there, which would shift the baseline with several outputs per
session.) So with nothing accepted, ``prover`` equals ``grpo``. ``lam`` and everything else
of the method come from the :class:`~prover_verl.hook.ProverStep`'s ``ProverConfig``. Select it with
``algorithm.adv_estimator=prover``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from verl.trainer.ppo.core_algos import AdvantageEstimator, compute_grpo_outcome_advantage, register_adv_est

from prover_core.hosts import Trajectory, credit_masses, group_batch
from prover_verl.errors import RowAlignmentError
from prover_verl.hook import take_prover_step
from prover_verl.names import ESTIMATOR_NAME
from prover_verl.rows import bonus_matrix, check_rows, resolve_rows


def _norm_by_std(config: Any) -> bool:
    if config is None:
        return True  # verl's own default
    return bool(config.get("norm_adv_by_std_in_grpo", True))


def grpo_baseline(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    norm_adv_by_std_in_grpo: bool,
    batch_keys: Sequence[str] | None = None,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """What verl's ``adv_estimator=grpo`` gives these rows: over all rows, or per v1 session (``batch_keys``)."""
    if batch_keys is None:
        grpo, _ = compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            index=index,
            epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        )
        return grpo
    if len(batch_keys) != token_level_rewards.shape[0]:
        raise RowAlignmentError(f"{len(batch_keys)} batch_keys for {token_level_rewards.shape[0]} rows")
    from verl import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data = DataProto.from_dict(
        tensors={"token_level_rewards": token_level_rewards, "response_mask": response_mask},
        non_tensors={"uid": np.asarray(list(index), dtype=object)},
    )
    data = compute_advantage_for_multi_trajectories(
        data,
        batch_keys=list(batch_keys),
        adv_estimator=AdvantageEstimator.GRPO,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
    )
    return cast(torch.Tensor, data.batch["advantages"])


@register_adv_est(ESTIMATOR_NAME)  # type: ignore[untyped-decorator]
def compute_prover_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages plus the ProVer bonus on accepted segments; returns ``(advantages, returns)``.

    Consumes the pending :class:`~prover_verl.hook.ProverStep` (raises
    :class:`~prover_verl.errors.HookMissingError` without one) and stores the
    :class:`~prover_core.BonusResult` in its ``result``.
    """
    step = take_prover_step()
    if index is None:
        raise RowAlignmentError("adv_estimator='prover' needs the batch's uid (non_tensor_batch['uid'])")
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
        raise RowAlignmentError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must be equal (B, T) shapes"
        )
    batch = [t if isinstance(t, Trajectory) else Trajectory.model_validate(t) for t in step.trajectories]
    group_batch(batch)  # validates: non-empty, unique ids
    trajectories = {t.id: t for t in batch}  # in the step's order: rows=None means row i = batch[i]
    rows = resolve_rows(step.rows, trajectories, token_level_rewards.shape[0])
    scores = token_level_rewards.detach().sum(dim=-1).cpu().double().numpy() if step.check_rewards else None
    check_rows(rows, trajectories, index, scores)

    result = step.run.verify(batch, **step.hooks())
    mask = response_mask.detach().cpu().numpy()
    bonus = bonus_matrix(result, rows, mask)

    grpo = grpo_baseline(token_level_rewards, response_mask, index, _norm_by_std(config), step.batch_keys, epsilon)
    extra = torch.as_tensor(bonus, dtype=grpo.dtype, device=grpo.device) * response_mask.to(grpo.dtype)
    advantages = grpo + extra
    masses = credit_masses(extra.detach().cpu().numpy(), grpo.detach().cpu().numpy(), mask)  # verl's own advantage
    step.result = dataclasses.replace(result, report=step.run.finish([result.report], masses=masses))
    return advantages, advantages
