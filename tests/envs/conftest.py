"""Generated TextWorld games, compiled once per test session (about a second each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

GAME_SETTINGS: dict[str, Any] = {"recipe": 2, "take": 1}
"""Small one-room cooking games: about ten oracle commands, losable by a wrong cut or cooking."""


@pytest.fixture(scope="session")
def textworld_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("textworld-games")


@pytest.fixture(scope="session")
def cooking_game(textworld_cache: Path) -> Any:
    from prover_envs.textworld import make_cooking_game

    return make_cooking_game(3, cache_dir=textworld_cache, **GAME_SETTINGS)
