"""Typed errors of the OpenRLHF adapter (all are :class:`prover_core.ProverError`)."""

from __future__ import annotations

from prover_core.hosts import InvalidBatchError, ProverError


class ProverOpenRLHFError(ProverError):
    """Base class of the adapter's own errors."""


class SetupError(ProverOpenRLHFError, RuntimeError):
    """ProVer is installed in the trainer but no usable :class:`~prover_openrlhf.ProverSetup` was given."""


class ExperienceBatchError(ProverOpenRLHFError, InvalidBatchError):
    """The experiences handed to the experience maker cannot be credited (non-binary reward, bad index, ...)."""
