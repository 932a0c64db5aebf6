"""Shared builders for the core tests."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest
from hypothesis import settings

from prover_core import Trajectory, Turn

# No per-example deadline: the suite runs on a shared 2-core machine, and speed is measured in benchmarks.
settings.register_profile("prover", deadline=None)
settings.load_profile("prover")

EXPECTED_SKIPS: tuple[str, ...] = (
    "no llama-server",  # the real-server tests: scripts/test-real-model, scripts/test-llm-judge start one
    "no real LLM server",
    "a slow block",  # the docs' slow install recipes: scripts/test-doc-commands
    "a slow figure",  # the docs' figures whose commands take minutes: scripts/test-doc-commands
    "fidelity:",  # no real-model or real-judge pass recorded on the current engine or judge code (tests/fidelity.py)
)
"""Reason prefixes of the only skips allowed under ``PROVER_REQUIRE_HOSTS=1``: what CI cannot run by design."""


def skip(reason: str, *, allow_module_level: bool = False) -> NoReturn:
    """The one way a test skips: ``pytest.skip(reason)``, except that under ``PROVER_REQUIRE_HOSTS=1`` (CI) a skip
    whose reason does not start with one of :data:`EXPECTED_SKIPS` fails instead, so that no test vanishes
    silently (``scripts/test`` also lists the skipped tests and compares them with ``tests/expected-skips.txt``)."""
    if os.environ.get("PROVER_REQUIRE_HOSTS") == "1" and not reason.startswith(EXPECTED_SKIPS):
        pytest.fail(f"unexpected skip under PROVER_REQUIRE_HOSTS=1: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=allow_module_level)


def importorskip(module: str, reason: str | None = None) -> ModuleType:
    """``module`` imported, else a :func:`skip` (a failure under ``PROVER_REQUIRE_HOSTS=1``)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        skip(f"{module} is not installed ({exc}){f': {reason}' if reason else ''}", allow_module_level=True)


def make_trajectory(
    tid: str,
    group: str,
    success: bool,
    actions: Sequence[str],
    observations: Sequence[str] | None = None,
    span_width: int = 2,
    gap: int = 3,
) -> Trajectory:
    """A trajectory whose turn t has tokens [gap*(t+1) + t*span_width, ... + span_width)."""
    obs = observations if observations is not None else [f"s{t}" for t in range(len(actions))]
    turns = []
    cursor = 0
    for o, a in zip(obs, actions, strict=True):
        start = cursor + gap
        turns.append(Turn(observation=o, action=a, token_span=(start, start + span_width)))
        cursor = start + span_width
    return Trajectory(id=tid, group_id=group, turns=turns, success=success, reset={"seed": 0})


@pytest.fixture
def group_one_success() -> list[Trajectory]:
    """Group g: 1 success of 4 (t0, 4 turns) and 3 failures (5 turns)."""
    return [make_trajectory("t0", "g", True, ["a", "b", "c", "d"])] + [
        make_trajectory(f"t{i}", "g", False, ["a", "x", "c", "d", "e"]) for i in range(1, 4)
    ]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A real local Ray with 2 CPUs, started once per test module (reused if another test started one)."""
    ray = importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def library_warnings(records: Iterable[logging.LogRecord]) -> list[str]:
    """The messages of WARNING (or worse) records from the library's own loggers (``prover_core``, the adapters'):
    a shipped example or documented command must log none (issue 37: one story, no false warning)."""
    return [r.getMessage() for r in records if r.levelno >= logging.WARNING and r.name.startswith("prover")]


def load_script(path: Path, name: str) -> ModuleType:
    """A script (an example, a benchmark) imported as module ``name``, registered in ``sys.modules`` (its
    dataclasses resolve their annotations there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
