"""The real-model and real-judge runs are tied to the code they passed on (tests/fidelity.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import skip
from tests.fidelity import ROOT, RUNS, digests, record, staleness, tree_digest


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_last_real_run_passed_on_the_current_code(name: str) -> None:
    """A visible skip (allowed in CI, listed by scripts/test) when the code changed after the last pass."""
    assert (ROOT / f"scripts/test-{name}").exists() and all((ROOT / folder).is_dir() for folder in RUNS[name])
    why = staleness(name)
    if why is not None:
        skip(f"fidelity: {why}")


def test_a_stamp_records_the_code_and_goes_stale_when_it_changes(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for folder in RUNS["llm-judge"]:
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    assert "no recorded pass of scripts/test-llm-judge" in str(staleness("llm-judge", root))
    path = record("llm-judge", root)  # no git repository here: the commit is "unknown"
    stamp = json.loads(path.read_text())
    assert stamp["run"] == "scripts/test-llm-judge" and stamp["commit"] == "unknown"
    assert stamp["digests"] == digests("llm-judge", root) == digests("llm-judge")  # the copy is the same code
    assert staleness("llm-judge", root) is None
    (root / "prover_core/judges/llm/__pycache__").mkdir(exist_ok=True)
    (root / "prover_core/judges/llm/__pycache__/x.pyc").write_bytes(b"cache")  # caches do not count
    assert staleness("llm-judge", root) is None
    prompt = root / "prover_core/judges/llm/prompt.py"
    prompt.write_text(prompt.read_text() + "\n# one more line\n")
    why = staleness("llm-judge", root)
    assert why is not None and why.startswith("prover_core/judges/llm changed after scripts/test-llm-judge last passed")


def test_the_digest_covers_names_and_contents(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    first = tree_digest(tmp_path)
    (tmp_path / "a.py").rename(tmp_path / "b.py")
    assert tree_digest(tmp_path) != first  # a renamed file is other code
    (tmp_path / "b.py").rename(tmp_path / "a.py")
    assert tree_digest(tmp_path) == first
