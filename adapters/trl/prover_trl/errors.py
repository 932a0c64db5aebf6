"""The adapter's typed error."""

from __future__ import annotations

from prover_core.hosts import ProverError


class ProverTRLError(ProverError, ValueError):
    """What a TRL batch handed to ProVer is malformed (spans, turns, rewards, group layout)."""
