"""Environments built in :class:`~prover_core.isolate.IsolatedEnv`'s worker processes (tests/test_isolate.py).

Kept in a module of their own with light imports: each worker process unpickles its factory, importing this module.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from prover_core import SnapshotEnv
from prover_core.data import Trajectory
from prover_core.demo import MDPEnv, VaultMDP
from prover_core.protocols import Step


def vault_env() -> SnapshotEnv:
    """The demo's vault, restored from snapshots (as tests/verify_support.py's ``make_restorable_env``)."""
    return SnapshotEnv(lambda: MDPEnv(VaultMDP()))


class _Faulty:
    """An episode of the vault that hangs (sleeps an hour) or kills its process while ``flag`` holds that word."""

    def __init__(self, episode: Any, flag: Path) -> None:
        self.episode, self.flag = episode, flag
        self.last = episode.last

    def step(self, action: Any) -> Step:
        fault = self.flag.read_text() if self.flag.exists() else ""
        if fault == "hang":
            time.sleep(3600)
        if fault == "die":
            os._exit(3)
        if fault == "raise":
            raise ValueError("the environment refused the action")
        self.last = self.episode.step(action)
        return self.last


class FaultyVault:
    """The vault (:func:`vault_env`) whose ``step`` misbehaves as the file ``flag`` says: ``hang``, ``die`` or
    ``raise``; with no such file it is the vault itself, step for step."""

    def __init__(self, flag: str) -> None:
        self.flag = Path(flag)
        self.env = vault_env()

    def restore(self, trajectory: Trajectory, turn: int, seed: int) -> _Faulty:
        return _Faulty(self.env.restore(trajectory, turn, seed), self.flag)


def failing_factory() -> SnapshotEnv:
    raise OSError("no such simulator")
