"""The engines and the environment families moved to distributions of their own; an old import names the new home.

``prover_core.engine`` is now ``prover_engine`` (``pip install prover-engine``) and ``prover_core.envs`` is
``prover_envs`` (``pip install prover-envs``). ``import prover_core.engine`` (or a module under it) and
``from prover_core import EnginePolicy`` raise ``ModuleNotFoundError`` saying so; the runtime never imports them.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

HOMES = {"engine": ("prover_engine", "prover-engine"), "envs": ("prover_envs", "prover-envs")}
NAMES = {"EnginePolicy", "Generation", "SamplingParams", "TokenEngine", "TokenStore"}  # once exported from prover_core


def moved(old: str, package: str, rest: str) -> ModuleNotFoundError:
    """The error for ``old``, now ``<package's new name>.<rest>``."""
    new, distribution = HOMES[package]
    target = f"{new}.{rest}" if rest else new
    return ModuleNotFoundError(
        f"{old} moved out of prover-core: pip install {distribution}, then use {target}", name=old
    )


def moved_name(module: str, name: str) -> ModuleNotFoundError | AttributeError:
    """For a module's ``__getattr__``: the error for ``module.name`` (a moved name or package, or no such name)."""
    if name in NAMES:
        return moved(f"{module}.{name}", "engine", name)
    if module == "prover_core" and name in HOMES:
        return moved(f"prover_core.{name}", name, "")
    return AttributeError(f"module {module!r} has no attribute {name!r}")


class MovedFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: ``prover_core.engine[...]``, ``prover_core.envs[...]`` raise :func:`moved`, even
    where an older install left its folder behind (the import system would take it for a namespace package)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        parts = fullname.split(".", 2)
        if parts[0] == "prover_core" and len(parts) > 1 and parts[1] in HOMES:
            raise moved(fullname, parts[1], ".".join(parts[2:]))
        return None


if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, MovedFinder())  # first: a leftover ``engine/`` folder must not import as a namespace
