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
    local = ROOT / ".venv" / "uv" / "bin" / "uv"
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
        skip("uv not found: it runs the docs' commands (scripts/test bootstraps it into .venv/uv)")
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
