"""The wheel a user installs: typed (``py.typed``), licensed, one version, and its types reach users' mypy.

The wheel is built with the project's own build backend (hatchling, PEP 517), installed the way an
installer installs a pure wheel (unpacked into a fresh virtual environment's site-packages), and a
user's file importing ``prover_core`` is checked by ``mypy --strict`` against that environment.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

import prover_core
from tests.conftest import importorskip

ROOT = Path(__file__).resolve().parents[1]

hatchling_build = importorskip("hatchling.build", reason="the dev extra installs hatchling")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    cwd = Path.cwd()
    os.chdir(ROOT)  # PEP 517 backends build the project in the working directory
    try:
        name = hatchling_build.build_wheel(str(out))
    finally:
        os.chdir(cwd)
    return out / name


def test_the_wheel_ships_py_typed_the_license_and_one_version(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f"prover_core-{prover_core.__version__}.dist-info"
        metadata = zf.read(f"{info}/METADATA").decode()
        license_text = zf.read(f"{info}/licenses/LICENSE").decode()
    assert "prover_core/py.typed" in names
    assert wheel.name.startswith(f"prover_core-{prover_core.__version__}-")
    assert re.search(r"^Version: (.+)$", metadata, re.M)[1] == prover_core.__version__  # type: ignore[index]
    assert "License-Expression: Apache-2.0" in metadata
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert (ROOT / "LICENSE").read_text() == license_text


def test_the_wheel_ships_no_benchmark_code(wheel: Path) -> None:
    """The benchmarks are their own distribution (benchmarks/, ``prover-bench``): the library's wheel holds the
    library and the demo, nothing of them, and no dependency of theirs."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(f"prover_core-{prover_core.__version__}.dist-info/METADATA").decode()
    assert names and all(n.startswith(("prover_core/", "prover_core-")) for n in names)
    assert not [n for n in names if "bench" in n]
    assert "prover_core/demo/run.py" in names  # the README's first command stays in the library
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and not [r for r in requires if "matplotlib" in r or "tqdm" in r]


def test_prover_bench_without_the_benchmarks_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prover_core.cli import main

    monkeypatch.setitem(sys.modules, "prover_bench.cli", None)  # as if prover-bench's package were gone
    assert main(["bench", "--quick"]) == 2
    assert "pip install -e . -e ./benchmarks" in capsys.readouterr().err
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **select: ())  # as if it were never installed
    assert main(["bench", "--quick"]) == 2
    assert "pip install -e . -e ./benchmarks" in capsys.readouterr().err


def test_prover_bench_runs_the_prover_bench_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    from prover_core.cli import main

    seen: list[list[str]] = []

    class Found:
        def load(self) -> object:
            return lambda argv: seen.append(argv) or 7

    def entry_points(**select: str) -> list[Found]:
        assert select == {"group": "console_scripts", "name": "prover-bench"}
        return [Found()]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert main(["bench", "judges", "--quick"]) == 7 and seen == [["judges", "--quick"]]


USER_FILE = """\
from prover_core import ProverConfig, Trajectory, Turn, compute_bonus

config = ProverConfig(k=8, lam=1.0)
run = Trajectory(id="r", group_id="g", reset={}, turns=(Turn(observation="o", action="a"),), success=True)
k: int = config.k
wrong: str = config.k
reveal_type(compute_bonus)
"""


def test_users_mypy_strict_sees_the_types_of_the_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    """Installed from the wheel, ``prover_core`` is typed for ``mypy --strict`` (no plugin): constructors
    check, attributes have their types (a wrong one is an error, which ``Any`` would let through)."""
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)  # what an installer does with a pure-Python wheel
    # prover_core's own dependencies (numpy, pydantic, ...) come from this interpreter, after the wheel
    (site / "zz_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    user = tmp_path / "user.py"
    user.write_text(USER_FILE)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable", str(python), "user.py"],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("user.py")]
    assert lines[0] == (
        'user.py:6: error: Incompatible types in assignment (expression has type "int", variable has type "str")'
        "  [assignment]"
    ), result.stdout
    assert lines[1].startswith('user.py:7: note: Revealed type is "def (trajectories: typing.Iterable[prover_core')
    assert lines[1].endswith('-> prover_core.bonus.BonusResult"')
    assert len(lines) == 2, result.stdout
    where = [python, "-c", "import prover_core; print(prover_core.__file__)"]
    assert str(site) in subprocess.run(where, cwd=tmp_path, env=clean, capture_output=True, text=True).stdout
