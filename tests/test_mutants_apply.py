"""Every mutant of scripts/mutate.py still finds its code: its ``old`` text occurs exactly once in its file, and its
test files exist, so a refactor that moves the decision code cannot leave the mutation check testing nothing."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_every_mutant_finds_its_code_and_its_tests() -> None:
    mutate = load_script(ROOT / "scripts" / "mutate.py", "mutate")
    assert len(mutate.MUTANTS) >= 12 and len({m.name for m in mutate.MUTANTS}) == len(mutate.MUTANTS)
    for m in mutate.MUTANTS:
        text = (ROOT / m.path).read_text()
        assert text.count(m.old) == 1, f"{m.name}: {m.old!r} occurs {text.count(m.old)} times in {m.path}"
        assert m.old != m.new
        missing = [t for t in m.tests if not (ROOT / t).exists()]
        assert not missing, f"{m.name}: no such test files {missing}"
