"""``benchmarks/verify_latency.py`` says what it left out: without gymnasium its tables are dropped, and the output
and its headline say so (the README's 11.5% is over the whole table)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "verify_latency.py"


def row(env: str, wait: float, overlap: float) -> dict[str, float | str]:
    calls = {f"{s}/calls": 3.0 for s in ("all at once", "overlap (default)", "wait")}
    return {"env": env, "judge": "choice", "rollout": 10.0, "verified": 4.0, "wait/turns": wait,
            "overlap (default)/turns": overlap, "all at once/turns": overlap, **calls}  # fmt: skip


def test_without_gymnasium_its_tables_are_left_out_and_the_headline_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_script(SCRIPT, "verify_latency")
    left_out: list[str] = []
    with_gym = [name for name, _, _ in bench.environments(False)]
    monkeypatch.setitem(sys.modules, "gymnasium", None)  # import gymnasium now raises ImportError
    without = [name for name, _, _ in bench.environments(False, left_out)]
    assert left_out and sorted(without + left_out) == sorted(with_gym)
    rows = [row("vault (the demo)", 100.0, 110.0), row("corridor", 100.0, 120.0)]
    headline = bench.table(rows, left_out).splitlines()[-2]
    assert headline.startswith("overlap / wait policy turns: median 1.150, max 1.200; over +10% in 1 of 2 rows")
    assert f"(PARTIAL: {len(left_out)} environments left out, gymnasium is not installed: " in headline
    assert "PARTIAL" not in bench.table(rows).splitlines()[-2]  # the whole table: nothing to say
