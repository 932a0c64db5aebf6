"""The project speaks for itself: no file refers to a path outside the repository or to how the project is made
(a GPU "lent" to it, "device time", a tool's call), and the paper is named and linked where the README first cites
it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(
    r"\.\./shared|REFERENCES\b|\b(?:is|was|were|a|been) lent\b|\blent (?:GPU|machine)|device time|device tool"
    r"|run\(command=|this session\b|another session's"
)


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = []
    for name in names.splitlines():
        path = ROOT / name
        if path.suffix in {".md", ".py", ".sh", ".toml", ".txt", ".yaml", ".yml", ""} and path.is_file():
            files.append(path)
    return files


def test_no_file_points_outside_the_repository_or_at_how_it_is_made() -> None:
    found = []
    for path in tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


def test_the_paper_is_named_and_linked_before_the_readme_first_calls_it_the_paper() -> None:
    readme = (ROOT / "README.md").read_text()
    link = readme.find("https://arxiv.org/abs/2609.36178")
    title = readme.find("Targeting Pivotal Decisions for Credit Assignment in")
    first_use = readme.find("the paper")
    assert 0 < title < link and link < first_use + 40
    algorithm = (ROOT / "docs" / "algorithm.md").read_text()
    assert algorithm.find("https://arxiv.org/abs/2609.36178") < algorithm.find("the paper's")
