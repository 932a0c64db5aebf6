"""One story everywhere: the judge and K that the docs, the examples and the core call the default are the same.

Every code block of README.md and docs/ and every example that builds a judge or a ``ProverConfig`` with an
explicit ``k`` uses the library's default (``prover_core.default_judge()``, ``ProverConfig().k``), unless the
line, or the comment line above it, says why not ("not the default", "the paper's", a comparison of judges).
The adapters' own defaults are checked in their environments (tests/adapters/test_*_defaults.py).
"""

from __future__ import annotations

import re

import pytest

from prover_core import ChoiceJudge, ProverConfig, default_judge
from tests.doc_commands import ROOT

JUDGE = re.compile(r"judge\s*=\s*(?:judge\s+or\s+)?([A-Z]\w*Judge)\(|def judge\(self\)\s*->\s*([A-Z]\w*Judge)")
K = re.compile(r"ProverConfig\([^)]*\bk\s*=\s*(\d+)")
EXPLAINED = ("not the default", "the paper's", "compare", "ablation", "baseline")


def code_lines() -> list[tuple[str, int, str, str]]:
    """``(file, line number, line, previous line)`` of every code line in the docs' blocks and the examples."""
    out: list[tuple[str, int, str, str]] = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        inside, previous = False, ""
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                inside, previous = not inside, ""
                continue
            if inside:
                out.append((str(page.relative_to(ROOT)), n, line, previous))
                previous = line
    for example in sorted((ROOT / "examples").rglob("*.py")):
        lines = example.read_text().splitlines()
        out += [(str(example.relative_to(ROOT)), n, line, lines[n - 2] if n > 1 else "") for n, line in
                enumerate(lines, 1)]  # fmt: skip
    return out


def explained(line: str, previous: str) -> bool:
    return any(reason in (line + previous).lower() for reason in EXPLAINED)


def test_the_default_judge_is_the_one_the_readme_and_judges_page_name() -> None:
    assert type(default_judge()) is ChoiceJudge
    readme = (ROOT / "README.md").read_text()
    assert "`ChoiceJudge()` (default; no model)" in readme
    assert "| `ChoiceJudge()` (default) |" in (ROOT / "docs" / "judges.md").read_text()


def test_every_doc_block_and_example_builds_the_default_judge_or_says_why() -> None:
    default = type(default_judge()).__name__
    odd = [
        f"{file}:{n}: {line.strip()}"
        for file, n, line, previous in code_lines()
        for m in JUDGE.finditer(line)
        if (m.group(1) or m.group(2)) != default and not explained(line, previous)
    ]
    assert not odd, "judges other than the default, without a word on why:\n" + "\n".join(odd)


def test_every_doc_block_and_example_uses_the_default_k_or_says_why() -> None:
    default = ProverConfig().k
    odd = [
        f"{file}:{n}: {line.strip()}"
        for file, n, line, previous in code_lines()
        for m in K.finditer(line)
        if int(m.group(1)) != default and not explained(line, previous)
    ]
    assert not odd, f"K other than the default {default}, without a word on why:\n" + "\n".join(odd)


@pytest.mark.parametrize(
    ("line", "previous", "caught"),
    [
        ("    judge=DivergenceJudge(),", "", True),
        ("    judge=judge or AnchorJudge(),  # the paper's", "", False),
        ("    def judge(self) -> RandomJudge:", "# not the default: a baseline", False),
        ("    judge=ChoiceJudge(),", "", False),
    ],
)
def test_the_scan_catches_what_it_should(line: str, previous: str, caught: bool) -> None:
    found = [m for m in JUDGE.finditer(line) if (m.group(1) or m.group(2)) != "ChoiceJudge"]
    assert bool(found and not explained(line, previous)) is caught
