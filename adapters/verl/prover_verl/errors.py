"""Typed errors of the verl adapter (all derive from :class:`prover_core.ProverError`)."""

from __future__ import annotations

from prover_core.hosts import ProverError


class HookMissingError(ProverError, RuntimeError):
    """``adv_estimator=prover`` ran without a :class:`~prover_verl.hook.ProverStep` set for this batch."""


class RowAlignmentError(ProverError, ValueError):
    """The batch rows and the hook's trajectories disagree (count, uid, reward, coverage)."""


class TurnAlignmentError(RowAlignmentError):
    """A row's turns cannot be placed on its tokens (runs of 1s in ``response_mask`` or token spans)."""


class SetupError(HookMissingError):
    """At start-up: ``adv_estimator=prover`` is configured without ProVer's trainer (nothing would set the step)."""
