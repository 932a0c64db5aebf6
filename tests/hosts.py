"""Importing a host library (TRL, verl, OpenRLHF, gymnasium, ...) in tests.

Outside CI a missing host skips its tests with the reason; with ``PROVER_REQUIRE_HOSTS=1`` (set by
``.ci/run``, through ``scripts/test``) a missing host is an error, so CI never passes by skipping
(:func:`tests.conftest.skip`).
"""

from __future__ import annotations

from types import ModuleType

from tests.conftest import importorskip


def require_host(module: str) -> ModuleType:
    return importorskip(module, "PROVER_REQUIRE_HOSTS=1 makes this an error")
