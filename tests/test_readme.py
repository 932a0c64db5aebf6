"""The README as a new user meets it: its figures are what ``prover demo`` prints, and its code (and the
examples') passes ``mypy --strict`` as a user's own code would be checked, without pydantic's plugin."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from prover_core.cli import main
from prover_core.protocols import PolicyContext
from tests.conftest import library_warnings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)
# the examples whose imports the core environment has (the TRL/OpenRLHF ones are checked in their hosts' tests)
CACHE = ROOT / ".venvs" / "mypy-users-cache"  # reused across runs: the first takes a minute, later ones seconds
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
    first_screen = re.search(r"(\d+)% more than the batch's rollout in `prover demo`", README)
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


class LongestContinuation:
    """Patches ``VaultBatchPolicy.act_batch`` to count each continuation's turns (a continuation: a trajectory, its
    boundary and its seed), so that a test can compare the rounds a run reports with its longest continuation."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from prover_core.demo import VaultBatchPolicy

        self.turns: Counter[tuple[str, int | None, int]] = Counter()
        original = VaultBatchPolicy.act_batch

        def counted(policy: VaultBatchPolicy, contexts: Sequence[PolicyContext]) -> list[str]:
            for c in contexts:
                assert c.trajectory is not None
                self.turns[(c.trajectory.id, c.boundary, c.seed)] += 1
            return original(policy, contexts)

        monkeypatch.setattr(VaultBatchPolicy, "act_batch", counted)

    @property
    def longest(self) -> int:
        return max(self.turns.values())


def test_the_readme_trainer_block_verifies_in_no_more_rounds_than_its_longest_continuation(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The custom-trainer block, run as written: one act_batch call per round, so verification's rounds are at most
    its longest continuation's turns; the figures the README gives are the ones it prints. The same block with a
    one-context policy costs what the README says."""
    block = python_blocks(README)[0]
    counter = LongestContinuation(monkeypatch)
    exec(compile(block, "README.md", "exec"), {})
    printed = re.search(r"verification: (\d+) rounds of policy calls, the rollout (\d+)", capsys.readouterr().out)
    assert printed and int(printed[1]) <= counter.longest < int(printed[2])
    said = re.search(r"the block above prints both: (\d+) and (\d+)", README)
    assert said, "the README's rounds sentence changed: update this test with it"
    assert (said[1], said[2]) == (printed[1], printed[2])
    plain = re.search(r"\((\d+) rounds for the block above, where `act_batch` takes (\d+)\)", README)
    assert plain and plain[2] == printed[1]
    one_context = block.replace("my_policy = VaultBatchPolicy()", "my_policy = vault_policy()")
    assert one_context != block
    exec(compile("from prover_core.demo import vault_policy\n" + one_context, "README.md", "exec"), {})
    printed = re.search(r"verification: (\d+) rounds of policy calls", capsys.readouterr().out)
    assert printed and printed[1] == plain[1]


def test_prover_demo_verifies_in_no_more_rounds_than_its_longest_continuation(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = LongestContinuation(monkeypatch)
    assert main(["demo"]) == 0
    printed = re.search(r"Rounds of policy calls: verification (\d+), the rollout (\d+)", capsys.readouterr().out)
    assert printed and int(printed[1]) <= counter.longest <= int(printed[2])


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


def test_the_readme_ranking_status_is_the_committed_seed_files() -> None:
    """The bottom line's ranking sentence counts the seeds whose files are committed (issue 42's design: no verdict
    before all 48 are in); once they are, every figure the README gives for the ranking (its bottom line and "Where
    it could pay") is one the ranking's report prints from those files."""
    done = len(list((ROOT / "benchmarks" / "results" / "llm-rank").glob("R12-lr0.000333333-seed*.json")))
    said = re.search(r"under way,\s+(\d+) of 48 paired seeds in, no verdict before all are", README)
    if done < 48:
        assert said, "the README's ranking sentence changed: update this test with it"
        assert int(said[1]) == done, f"the README says {said[1]} of 48 seeds; {done} are committed: update it"
        return
    assert not said, "all 48 seeds are in: the README must state the ranking's verdict"
    from tests.conftest import load_script

    script = load_script(ROOT / "benchmarks" / "llm_regime.py", "llm_regime")
    printed = script.rank_report(script.RANK_RESULTS, script.REGIMES["R12"], range(32, 80), True, "cmd")
    assert printed.startswith("regime check (fixed lr): pass") and "- 48 of 48 seeds finished." in printed
    paragraphs = [p for p in README.split("\n\n") if "--rank R12" in p]
    figures = [f for p in paragraphs for f in re.findall(r"[+-]\d\.\d{3} ± \d\.\d{3}", p)]
    assert len(paragraphs) == 2 and len(figures) >= 10, (paragraphs, figures)
    missing = [f for f in figures if f not in printed]
    assert not missing, f"README figures the ranking's report does not print: {missing}"
    assert "48 paired seeds" in paragraphs[0] and "--report-only" in paragraphs[0]


def test_the_ceiling_figures_are_what_the_ceiling_report_prints() -> None:
    """Every figure between ``<!-- ceiling figures: --seeds N -->`` and ``<!-- /ceiling figures -->`` in the README
    and docs/benchmarks.md (each ``± `` pair and each percentage) is one that ``python benchmarks/llm_ceiling.py
    --report-only --seeds N`` prints from the committed seed files; the seed count they state is N, and N seeds are
    committed."""
    from tests.conftest import load_script

    script = load_script(ROOT / "benchmarks" / "llm_ceiling.py", "llm_ceiling")
    regions = []
    for path in (ROOT / "README.md", ROOT / "docs" / "benchmarks.md"):
        regions += re.findall(
            r"<!-- ceiling figures: --seeds (\d+)[^>]*-->(.*?)<!-- /ceiling figures -->", path.read_text(), re.S
        )
    assert len(regions) >= 3, regions
    for n, text in regions:
        seeds = int(n)
        assert all((script.RESULTS / f"C1-seed{s}.json").exists() for s in script.SEEDS[:seeds])
        printed = script.full_report(script.RESULTS, script.SEEDS[:seeds], script.R12_SEEDS[:seeds],
                                     (script.SHARED_LR, script.R12_LR))  # fmt: skip
        assert f"{seeds} of 48 seeds finished" in printed
        figures = re.findall(r"[+-]\d\.\d{3} ± \d\.\d{3}", text) + re.findall(r"\d+\.\d\d%", text)
        assert figures, text
        missing = [f for f in figures if f not in printed]
        assert not missing, f"ceiling figures the report (--seeds {seeds}) does not print: {missing}"
        if f"{seeds} of 48" in text or "seeds" in text:
            assert f"{seeds} of 48" in text, f"the region states another seed count than --seeds {seeds}"
