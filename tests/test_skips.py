"""No silent skip (issue 47): the one skip guard (tests/conftest.py) and the allow-list check of scripts/test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXPECTED_SKIPS, importorskip, skip
from tests.skips import ROOT, allow_list, allowed, check, node_id, skipped

ALLOW_LIST = ROOT / "tests" / "expected-skips.txt"


def test_the_guard_fails_an_unexpected_skip_only_under_require_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROVER_REQUIRE_HOSTS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="gizmo is missing"):
        skip("gizmo is missing")
    monkeypatch.setenv("PROVER_REQUIRE_HOSTS", "1")
    with pytest.raises(pytest.fail.Exception, match="unexpected skip under PROVER_REQUIRE_HOSTS=1: gizmo is missing"):
        skip("gizmo is missing")
    with pytest.raises(pytest.fail.Exception, match="no_such_module_xyz is not installed"):
        importorskip("no_such_module_xyz")
    for reason in EXPECTED_SKIPS:  # what CI cannot run by design still skips, visibly
        with pytest.raises(pytest.skip.Exception):
            skip(f"{reason} (and why)")
    assert importorskip("json").dumps([1]) == "[1]"


def test_no_skip_bypasses_the_guard() -> None:
    """Every skip in the tests goes through tests.conftest.skip: no pytest.skip, importorskip, skip or xfail marker."""
    bypass = re.compile(r"pytest\.(skip|importorskip|xfail)\(|mark\.(skip|skipif|xfail)\b")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path.name not in {"conftest.py", "test_skips.py"}
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if bypass.search(line)
    ]
    assert not found, f"skips around the guard: {found}"


def _pytest(tmp_path: Path, body: str, require: bool, junit: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_lonely.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("PROVER_REQUIRE_HOSTS", None)
    if require:
        env["PROVER_REQUIRE_HOSTS"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-c", os.devnull,
         f"--junitxml={junit}", str(tmp_path / "test_lonely.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


BODY = """
from tests.conftest import skip, importorskip

def test_needs_a_gizmo():
    importorskip("no_such_gizmo_xyz")

def test_real_server():
    skip("no llama-server: PROVER_LLAMA_URL is not set")

def test_runs():
    assert True
"""


def test_a_run_with_an_unexpected_skip_fails_twice(tmp_path: Path) -> None:
    """Under PROVER_REQUIRE_HOSTS=1 the test itself fails; without it, it skips, and scripts/test's check of the
    junit report (the same command line) fails on the skip that is not allow-listed."""
    reports = tmp_path / "reports"
    reports.mkdir()
    strict = _pytest(tmp_path, BODY, True, tmp_path / "strict.xml")
    assert strict.returncode == 1
    assert "unexpected skip under PROVER_REQUIRE_HOSTS=1: no_such_gizmo_xyz is not installed" in strict.stdout
    assert re.search(r"1 failed, 1 passed, 1 skipped", strict.stdout), strict.stdout
    lax = _pytest(tmp_path, BODY, False, reports / "core.xml")
    assert lax.returncode == 0 and "1 passed, 2 skipped" in lax.stdout, lax.stdout
    assert (
        "tests.skips" in (ROOT / "scripts/test").read_text()
        and "tests/expected-skips.txt" in (ROOT / "scripts/test").read_text()
    )
    listed = tmp_path / "expected.txt"
    listed.write_text("core test_lonely.py::test_real_server  # a real server\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.skips", str(reports), str(listed)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    assert "skipped (core): test_lonely.py::test_needs_a_gizmo" in done.stdout
    assert "NOT on the allow-list" in done.stdout
    assert "1 unexpected skip(s)" in done.stdout
    listed.write_text("core test_lonely.py::test_real_server\ncore test_lonely.py::test_needs_*\ncore gone.py\n")
    assert check(reports, listed, tmp_path) == 0  # all allow-listed; the unused entry is only noted


def test_junit_names_become_test_ids(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    assert node_id("tests.test_a", "test_b[x.y]", tmp_path) == "tests/test_a.py::test_b[x.y]"
    assert node_id("tests.test_a.TestC", "test_d", tmp_path) == "tests/test_a.py::TestC::test_d"
    assert node_id("", "tests.test_a", tmp_path) == "tests/test_a.py"  # skipped at import
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite><testcase classname="tests.test_a" name="test_b"><skipped message="why"/></testcase>'
        '<testcase classname="tests.test_a" name="test_ok"/><testcase classname="" name="tests.test_a">'
        "<skipped message=\"collection skipped\">('/x/conftest.py', 39, 'Skipped: no server')</skipped></testcase>"
        "</testsuite></testsuites>"
    )
    assert skipped(report, tmp_path) == [("tests/test_a.py::test_b", "why"), ("tests/test_a.py", "no server")]


def test_the_allow_list_names_real_tests_and_only_what_ci_cannot_run() -> None:
    entries = allow_list(ALLOW_LIST)
    assert entries and {env for env, _ in entries} == {"core"}
    for _, pattern in entries:
        path = ROOT / pattern.split("::")[0]
        assert path.is_file(), pattern
        name = pattern.split("::")[1].split("[")[0] if "::" in pattern else None
        assert name is None or f"def {name}(" in path.read_text(), pattern
    # the skips a plain CI run has: the real-server modules and the slow doc blocks
    for test in ("tests/test_engine_llama_real.py", "tests/test_doc_commands.py::test_the_block_runs_as_written[x:1]"):
        assert allowed("core", test, entries)
    assert allowed("core", "tests/test_engine_llama_real.py::test_generate", entries)  # a module covers its tests
    assert not allowed("trl", "tests/test_engine_llama_real.py", entries)
    assert not allowed("core", "tests/test_doc_commands.py::test_an_install_command_in_the_text_resolves[x]", entries)
    assert not allowed("core", "tests/test_doc_commands.py::test_the_block_runs_as_writtenX", entries)


def test_a_malformed_allow_list_line_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "expected.txt"
    bad.write_text("# fine\ncore tests/test_a.py\ntests/test_b.py\n")
    with pytest.raises(ValueError, match=r"expected.txt:3: expected '<env> <test id>'"):
        allow_list(bad)
