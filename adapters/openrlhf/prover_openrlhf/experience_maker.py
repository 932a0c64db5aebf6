"""``ProverExperienceMaker``: OpenRLHF's ``RemoteExperienceMaker`` plus the ProVer bonus.

``compute_advantages_and_returns`` runs OpenRLHF's own computation unchanged (any estimator:
``group_norm``, ``reinforce_baseline``, ``rloo``, ``dr_grpo``, ...), then for every accepted segment
adds ``lam * Delta`` on its action tokens:

    A[i, p] = A_stock[i, p] + bonus_t * action_mask[i, p]     for p in the span of turn t of row i

where turn ``t`` is the ``t``-th run of 1s of ``action_mask[i]`` and ``bonus_t`` is
``BonusResult.turn_bonus``. Every other position keeps OpenRLHF's value exactly (OpenRLHF leaves
non-zero advantages on environment tokens before the last action; they are not touched). With
``reinforce_baseline`` the bonus comes after OpenRLHF's batch whitening, i.e. in whitened units.

Importing this module imports OpenRLHF and torch; ``import prover_openrlhf`` does not.
"""

from __future__ import annotations

from typing import Any

import torch
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker  # type: ignore[import-untyped]
from openrlhf.utils.logging_utils import init_logger  # type: ignore[import-untyped]

from prover_core.bonus import compute_bonus
from prover_core.report import Report
from prover_openrlhf.batch import Row, batch_rows, plan_batch
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

    def __init__(self, *args: Any, prover: ProverSetup | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prover = prover
        self.prover_step = 0
        self.last_report: Report | None = None

    @property
    def prover(self) -> ProverSetup:
        if self._prover is None:
            self._prover = load_setup(self)
        return self._prover

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
        # A new root seed every step: continuations differ across steps but stay reproducible.
        config = setup.config.model_copy(update={"seed": setup.config.seed + self.prover_step})
        self.prover_step += 1
        turn_bonus: dict[str, Any] = {}
        result = None
        if plan.trajectories:
            result = compute_bonus(
                plan.trajectories,
                judge=setup.judge,
                env=setup.env,
                policy=setup.policy,
                continue_from=setup.continue_from,
                config=config,
            )
            turn_bonus = dict(result.turn_bonus)
        report = result.report if result is not None else Report()
        groups = sorted([*report.groups, *plan.left_out], key=lambda g: int(g.group_id))
        self.last_report = report.model_copy(update={"groups": groups})

        for exp in experiences:
            exp.info[BONUS_INFO_KEY] = torch.zeros(len(exp.action_mask), dtype=torch.float32)
        for row in rows:
            bonus = turn_bonus.get(row.trajectory_id)
            if bonus is None or not bonus.any():
                continue
            assert result is not None
            self._add_bonus(experiences[row.experience], row, result.token_bonus(row.trajectory_id, row.length))
            experiences[row.experience].info[BONUS_INFO_KEY][row.row] = float(bonus[abs(bonus).argmax()])
        logger.info(f"ProVer step {self.prover_step - 1}: {self.last_report.summary()}")
        return list(experiences)

    @staticmethod
    def _add_bonus(experience: Any, row: Row, token_bonus: Any) -> None:
        """``advantages[row] += token_bonus * action_mask[row]``."""
        adv = experience.advantages
        bonus = torch.as_tensor(token_bonus, dtype=adv.dtype, device=adv.device)
        mask = experience.action_mask[row.row].to(device=adv.device, dtype=adv.dtype)
        adv[row.row] += bonus * mask
