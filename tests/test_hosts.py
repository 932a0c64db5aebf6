"""An adapter used without its host library says what to install instead of a bare ImportError."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from prover_core import HostImportError
from prover_core.hosts import require_hosts
from tests.conftest import skip

ADAPTERS = Path(__file__).parents[1] / "adapters"


def test_missing_module_raises_with_the_hint() -> None:
    with pytest.raises(HostImportError, match=r"prover-x needs no_such_host_module_xyz, .* Install it so") as info:
        require_hosts("json", "no_such_host_module_xyz", adapter="prover-x", hint="Install it so.")
    assert isinstance(info.value, ImportError)  # still an ImportError for callers that catch that


def test_installed_modules_pass() -> None:
    require_hosts("json", "numpy", adapter="prover-x", hint="unused")


def test_trl_adapter_without_trl_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("trl") is not None:
        skip("needs an environment without trl (the core one)")
    monkeypatch.syspath_prepend(str(ADAPTERS / "trl"))
    monkeypatch.delitem(sys.modules, "prover_trl", raising=False)
    import prover_trl  # light: imports neither trl nor torch

    with pytest.raises(HostImportError, match=r"prover-trl needs .*trl.*pip install \./adapters/trl"):
        prover_trl.ProverGRPOTrainer  # noqa: B018
