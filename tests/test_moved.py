"""The engines and the environment families left the runtime (prover_core/_moved.py): an old import fails with an
error that names the new home and its install line, and nothing else changes for other names."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import prover_core
import prover_core.hosts

OLD_IMPORTS = [
    ("from prover_core import EnginePolicy", "prover_core.EnginePolicy", "prover-engine", "prover_engine.EnginePolicy"),
    (
        "from prover_core import SamplingParams",
        "prover_core.SamplingParams",
        "prover-engine",
        "prover_engine.SamplingParams",
    ),
    (
        "from prover_core.hosts import TokenStore",
        "prover_core.hosts.TokenStore",
        "prover-engine",
        "prover_engine.TokenStore",
    ),
    ("import prover_core.engine", "prover_core.engine", "prover-engine", "prover_engine"),
    ("from prover_core.engine.openai import TokenId", "prover_core.engine", "prover-engine", "prover_engine"),
    ("from prover_core import engine", "prover_core.engine", "prover-engine", "prover_engine"),
    ("import prover_core.envs", "prover_core.envs", "prover-envs", "prover_envs"),
    ("import prover_core.envs.gymnasium", "prover_core.envs", "prover-envs", "prover_envs"),
    ("from prover_core import envs", "prover_core.envs", "prover-envs", "prover_envs"),
]


@pytest.mark.parametrize("code, old, distribution, new", OLD_IMPORTS, ids=[c[0] for c in OLD_IMPORTS])
def test_an_old_import_names_the_new_home(code: str, old: str, distribution: str, new: str) -> None:
    message = f"{old} moved out of prover-core: pip install {distribution}, then use {new}"
    with pytest.raises(ModuleNotFoundError, match=f"^{re.escape(message)}$") as raised:
        exec(code, {})
    assert raised.value.name == old


def test_other_missing_names_are_still_attribute_errors() -> None:
    assert not hasattr(prover_core, "no_such_name") and not hasattr(prover_core.hosts, "no_such_name")
    with pytest.raises(ImportError, match="cannot import name 'no_such_name'"):
        exec("from prover_core import no_such_name", {})
    with pytest.raises(ModuleNotFoundError, match=r"No module named 'prover_core\.no_such_module'"):
        exec("import prover_core.no_such_module", {})


def test_the_new_homes_hold_the_moved_names() -> None:
    import prover_engine
    import prover_envs.gymnasium

    for name in ("EnginePolicy", "Generation", "SamplingParams", "TokenEngine", "TokenStore"):
        assert (
            name in prover_engine.__all__ and name not in prover_core.__all__ and name not in prover_core.hosts.__all__
        )
    assert callable(prover_envs.rollout) and callable(prover_envs.gymnasium.replay_env)


def test_a_leftover_engine_folder_still_names_the_new_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install upgraded in place keeps ``prover_core/engine/__pycache__``; the import system would take
    that folder for a namespace package, so the finder runs before it: the import still fails, naming the new home."""
    (tmp_path / "engine" / "__pycache__").mkdir(parents=True)
    monkeypatch.setattr(prover_core, "__path__", [*prover_core.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "prover_core.engine", raising=False)
    with pytest.raises(ModuleNotFoundError, match=r"^prover_core\.engine moved out of prover-core: pip install"):
        exec("import prover_core.engine", {})
