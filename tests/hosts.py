"""Importing a host library (TRL, verl, OpenRLHF, gymnasium, ...) in tests.

Outside CI a missing host skips its tests with the reason; with ``PROVER_REQUIRE_HOSTS=1`` (set by
``.ci/run``) a missing host is an error, so CI never passes by skipping.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def require_host(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if os.environ.get("PROVER_REQUIRE_HOSTS") == "1":
            raise
        pytest.skip(
            f"{module} is not installed ({exc}); PROVER_REQUIRE_HOSTS=1 makes this an error", allow_module_level=True
        )
