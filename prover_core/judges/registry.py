"""Judges by name: what ``prover demo --judge``, ``prover bench judges`` and docs/api.md list.

A name maps to a factory ``seed -> Judge`` (the seed matters to :class:`RandomJudge` only). The library's
judges register in :mod:`prover_core.judges`, in the order the commands show them; a new judge is one
module and one :func:`register_judge` call there.
"""

from __future__ import annotations

from collections.abc import Callable

from prover_core.protocols import Judge

__all__ = ["JudgeFactory", "judge_names", "make_judge", "register_judge", "registered_judges"]

JudgeFactory = Callable[[int], Judge]
"""Builds a judge from a seed."""

_FACTORIES: dict[str, JudgeFactory] = {}


def register_judge(name: str, factory: JudgeFactory) -> None:
    """Make ``factory`` the judge called ``name``; a name already taken raises ``ValueError``."""
    if name in _FACTORIES:
        raise ValueError(f"a judge named {name!r} is already registered")
    _FACTORIES[name] = factory


def judge_names() -> tuple[str, ...]:
    """The registered names, in registration order."""
    return tuple(_FACTORIES)


def registered_judges() -> dict[str, JudgeFactory]:
    """A copy of the registry: name -> factory, in registration order."""
    return dict(_FACTORIES)


def make_judge(name: str, seed: int = 0) -> Judge:
    """The judge registered as ``name``, built with ``seed``; an unknown name raises ``ValueError``."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown judge {name!r}; choose from {sorted(_FACTORIES)}")
    return _FACTORIES[name](seed)
