"""Every shell command in README.md and docs/ runs as written, each block in a fresh environment
(the substitutions and the block markers are in :mod:`tests.doc_commands`).

The install blocks (core, and each host's CPU recipe) create their own virtual environments with uv,
whose warm cache makes each take seconds to a minute; afterwards torch, where installed, must be the
CPU build with no nvidia or triton package. ``bash slow`` blocks run with ``PROVER_DOC_COMMANDS=all``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import skip
from tests.doc_commands import (
    ROOT,
    TORCH_CPU_INDEX,
    Block,
    command_blocks,
    inline_installs,
    script,
    unlabeled_commands,
)

BLOCKS = command_blocks()
RUN_ALL = os.environ.get("PROVER_DOC_COMMANDS") == "all"


def uv() -> str | None:
    local = ROOT / ".venvs" / "uv" / "bin" / "uv"
    return shutil.which("uv") or (str(local) if local.exists() else None)


def local_torch_links() -> str:
    """``PIP_FIND_LINKS`` when the PyTorch index cannot be reached and that folder holds its CPU wheel."""
    links = os.environ.get("PIP_FIND_LINKS", "")
    if not links or not list(Path(links).glob("torch-2.13.0+cpu-*.whl")):
        return ""
    try:
        httpx.head(TORCH_CPU_INDEX + "/", timeout=5.0)
    except httpx.HTTPError:
        return links
    return ""


def test_every_command_block_is_labelled_and_every_skipped_one_says_why() -> None:
    assert not unlabeled_commands(), "give these blocks a language (bash, bash slow or bash notest)"
    for block in BLOCKS:
        if block.kind == "notest":
            assert block.text.lstrip().startswith("#"), f"{block.name}: a notest block starts with why (# ...)"
    assert {b.kind for b in BLOCKS} >= {"run", "notest"}


@pytest.mark.parametrize(
    "line",
    ["./scripts/test", "./scripts/test --co -q", "PROVER_HOSTS=trl ./scripts/test --co -q", 'A="" B=1 ./scripts/test'],
)
def test_the_ci_command_is_not_run_recursively_and_other_scripts_are(line: str, tmp_path: Path) -> None:
    other = "./scripts/test-doc-commands"
    text = script(Block(ROOT / "README.md", 1, "bash", f"{line}\n{other}\n"), tmp_path)
    lines = text.splitlines()
    assert line not in lines and "true  # ./scripts/test: the CI command itself" in lines and other in lines


def block_lines() -> set[str]:
    return {" ".join(line.split("#")[0].split()) for b in BLOCKS if b.kind != "notest" for line in b.text.splitlines()}


INLINE = [(page, cmd) for page, cmd in inline_installs() if " ".join(cmd.split()) not in block_lines()]


@pytest.mark.parametrize("page, command", INLINE, ids=[f"{page}:{cmd}" for page, cmd in INLINE])
def test_an_install_command_in_the_text_resolves(page: str, command: str, tmp_path: Path) -> None:
    """An inline ``pip install ...`` that no block runs is resolved (``uv pip install --dry-run``) in a
    fresh environment from the repository root: it names distributions that exist and fit together."""
    found = need_uv()
    env = clean_env(found)
    subprocess.run([found, "venv", "-q", "--python", env["BASE_PYTHON"], str(tmp_path / "env")], env=env, check=True)
    args = shlex.split(command)[2:]
    done = subprocess.run(
        [found, "pip", "install", "--dry-run", "--python", str(tmp_path / "env" / "bin" / "python"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{page}: `{command}` does not resolve:\n{done.stderr[-3000:]}"


def need_uv() -> str:
    found = uv()
    if found is None:
        skip("uv not found: it runs the docs' commands (scripts/test bootstraps it into .venvs/uv)")
    return found


def clean_env(found: str) -> dict[str, str]:
    """This process's environment without uv settings, virtual environments or Python paths, plus what
    :data:`tests.doc_commands.PRELUDE` reads."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(
        UV=found,
        BASE_PYTHON=getattr(sys, "_base_executable", sys.executable),
        TORCH_CPU_INDEX=TORCH_CPU_INDEX,
        LOCAL_TORCH_LINKS=local_torch_links(),
        UV_NO_PROGRESS="1",
        PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT / ".venv"))),
    )
    return env


def installed(python: Path) -> dict[str, str]:
    out = subprocess.run(
        [
            python,
            "-c",
            "import importlib.metadata as m; print('\\n'.join(f'{d.name}=={d.version}' for d in m.distributions()))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.lower().split("==", 1) for line in out.splitlines() if "==" in line)


UNIQUE = list({b.text: b for b in reversed(BLOCKS) if b.kind != "notest"}.values())[::-1]  # one run per text


@pytest.mark.parametrize("block", UNIQUE, ids=lambda b: b.name)
def test_the_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    """(A block repeated word for word on two pages runs once, under its first page's name.)"""
    if block.kind == "slow" and not RUN_ALL:
        skip("a slow block: runs with PROVER_DOC_COMMANDS=all (scripts/test-doc-commands)")
    env = clean_env(need_uv())
    done = subprocess.run(
        ["bash", "-c", script(block, tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, f"{block.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for python in tmp_path.glob("**/bin/python"):
        packages = installed(python)
        if "torch" in packages:
            assert packages["torch"].endswith("+cpu"), f"{block.name}: torch {packages['torch']} is not the CPU build"
        # CUDA wheels (nvidia-cublas-cu12, ...) and triton; nvidia-ml-py is NVML's pure-Python binding (DeepSpeed's)
        gpu = sorted(p for p in packages if re.match(r"(nvidia-|triton)", p) and p != "nvidia-ml-py")
        assert not gpu, f"{block.name} brought GPU packages: {gpu}"


# --- the figures the README names a command for are what that command prints ---------------------------------


def env_python(name: str) -> Path | None:
    """The Python of ``scripts/test``'s environment ``name`` (``core``, ``trl``, ...), if it has been built."""
    python = ROOT / ".venvs" / name / "bin" / "python"
    return python if python.exists() else None


def printed_by(env: str, *command: str) -> str:
    python = env_python(env) if env != "core" else Path(sys.executable)
    if python is None:
        skip(f"no {env} environment (PROVER_HOSTS={env} ./scripts/test --co -q builds it)")
    paths = [ROOT, ROOT / "benchmarks", *([ROOT / "adapters" / env] if env != "core" else [])]
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
    done = subprocess.run([str(python), *command], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


README = (ROOT / "README.md").read_text()


def said(pattern: str) -> re.Match[str]:
    found = re.search(pattern, " ".join(README.split()))
    assert found, f"the README no longer says {pattern!r}: update this test with it"
    return found


def test_the_overlap_schedules_extra_turns_are_what_verify_latency_prints() -> None:
    """The README's "a median 11.5% more policy turns ... `python benchmarks/verify_latency.py`" (about 3 minutes)."""
    if not RUN_ALL:
        skip("a slow figure: runs with PROVER_DOC_COMMANDS=all (scripts/test-doc-commands)")
    claim = said(
        r"spends a median ([\d.]+)% more policy turns than it on the tabular suite, "
        r"`python benchmarks/verify_latency.py`"
    )
    out = printed_by("core", "benchmarks/verify_latency.py")
    median = re.search(r"overlap / wait policy turns: median ([\d.]+)", out)
    assert median and "PARTIAL" not in out, out[-2000:]
    assert f"{100 * (float(median[1]) - 1):.1f}" == claim[1]


def test_the_trl_step_ratio_is_what_trl_step_prints() -> None:
    """The README's "1.08-1.16x ... 8M-parameter model on a quiet 2-core machine (`python benchmarks/trl_step.py
    --size small --steps 7 --arms grpo,prover`" (minutes, the TRL environment). A ratio of wall times moves with
    the machine's load: the printed one must lie in the stated range, widened by 0.1 either side for that noise."""
    if not RUN_ALL:
        skip("a slow figure: runs with PROVER_DOC_COMMANDS=all (scripts/test-doc-commands)")
    claim = said(
        r"costs ([\d.]+)-([\d.]+)x a stock `GRPOTrainer` step with an 8M-parameter model "
        r"on a quiet 2-core machine \(`python benchmarks/trl_step.py --size small --steps 7 --arms grpo,prover`"
    )
    out = printed_by("trl", "benchmarks/trl_step.py", "--size", "small", "--steps", "7", "--arms", "grpo,prover")
    ratio = re.search(r"small: ProVer step / GRPO step: ([\d.]+)x", out)
    assert ratio, out[-2000:]
    assert float(claim[1]) - 0.1 <= float(ratio[1]) <= float(claim[2]) + 0.1
