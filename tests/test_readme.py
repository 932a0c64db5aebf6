"""The README as a new user meets it: its figures are what ``prover demo`` prints, and its code (and the
examples') passes ``mypy --strict`` as a user's own code would be checked, without pydantic's plugin."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prover_core.cli import main
from tests.conftest import library_warnings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)
# the examples whose imports the core environment has (the TRL/OpenRLHF ones are checked in their hosts' tests)
CACHE = ROOT / ".venv" / "mypy-users-cache"  # reused across runs: the first takes a minute, later ones seconds
CORE_EXAMPLES = ["examples/custom_trainer.py", "examples/textworld_credit.py"]


def test_the_readme_cost_figures_are_what_the_demo_prints(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    said = re.search(
        r"`prover demo` spends ([\d.]+)% more policy turns\s+than its batch \((\d+) continuation turns on a "
        r"(\d+)-turn rollout",
        README,
    )
    assert said, "the README's cost sentence changed: update this test with it"
    with caplog.at_level(logging.WARNING):
        assert main(["demo"]) == 0  # exactly the README's command (`prover demo`), defaults included
    assert not library_warnings(caplog.records)
    printed = re.search(
        r"Continuations: \d+ \((\d+) policy turns, ([\d.]+)% of the batch's (\d+) turns\)", capsys.readouterr().out
    )
    assert printed
    assert (said[1], said[2], said[3]) == (printed[2], printed[1], printed[3])
    first_screen = re.search(r"and (\d+)% more policy turns in `prover demo`", README)
    assert first_screen, "the README's bottom line changed: update this test with it"
    assert int(first_screen[1]) == round(float(printed[2]))


def python_blocks(text: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(text) if "notest" not in m.group(1)]


def mypy_strict(files: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``mypy --strict`` with no configuration file (so no pydantic plugin), as on a user's project."""
    empty = cwd / "mypy.ini"
    empty.write_text("[mypy]\n")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", empty, "--cache-dir", CACHE, *files],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def test_the_readme_code_and_the_core_examples_pass_mypy_strict_without_the_plugin(tmp_path: Path) -> None:
    blocks = python_blocks(README)
    assert blocks, "the README has its main code block"
    files = []
    for i, code in enumerate(blocks):
        files.append(tmp_path / f"readme_block_{i}.py")
        files[-1].write_text(code)
    for name in CORE_EXAMPLES:
        files.append(tmp_path / Path(name).name)
        files[-1].write_text((ROOT / name).read_text())
    done = mypy_strict(files, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_readme_credit_view_is_what_render_credit_prints() -> None:
    """The README's example output: each of its lines is a line of the output of the block above it."""
    from prover_core import render_credit
    from prover_core.demo.run import run_demo

    shown = re.search(r"prints \(abridged[^\n]*\n\n```text\n(.*?)```", README, re.S)
    assert shown, "the README's credit-view output changed: update this test with it"
    assert 'print(render_credit(result, ["g02-6"], width=100))' in README and "run_demo(groups=4)" in README
    printed = render_credit(run_demo(groups=4).result, ["g02-6"], width=100).splitlines()
    for line in shown[1].splitlines():
        assert line in printed, line
