"""The shell commands of README.md and docs/: found, classified, and run as written in fresh environments.

A fenced block whose info string starts with ``bash`` (or ``sh``, ``shell``, ``console``) is a
command block; the rest of the info string says how it is checked:

* ``bash``: run by ``tests/test_doc_commands.py`` in the default test run;
* ``bash slow``: run by the same test only with ``PROVER_DOC_COMMANDS=all`` (``scripts/test-doc-commands``):
  it takes minutes (an example over generated games, say);
* ``bash notest``: never run here; the block's first line is a comment saying why (a GPU, a model
  server, a secret). ``test_doc_commands.py`` checks that every such block says why.

A block is run as one bash script from the repository root, after :data:`PRELUDE`, with these
substitutions, and nothing else changed:

* ``pip install ARGS`` is ``uv pip install ARGS`` (same arguments; uv resolves like pip and installs
  from its warm cache, which makes a fresh environment take seconds);
* ``python -m venv DIR`` is ``uv venv DIR`` (then ``. DIR/bin/activate`` as written);
* ``/tmp/`` is a fresh temporary directory (so runs never share an environment);
* ``--index-url https://download.pytorch.org/whl/cpu`` is ``--find-links $PIP_FIND_LINKS`` where the
  machine cannot reach the PyTorch index and ``PIP_FIND_LINKS`` holds the same CPU wheel
  (``torch-2.13.0+cpu``); the test then checks that torch is that CPU build and that no nvidia or triton
  package came in;
* a block that installs without creating an environment first runs in a fresh one (a user's own);
* ``./scripts/test`` (the CI command, which runs this test) is not run recursively, also when environment
  assignments come first (``PROVER_HOSTS=trl ./scripts/test --co -q``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL = ("bash", "sh", "shell", "console")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
COMMAND_START = re.compile(r"^\s*(pip|python|uv|prover|\./scripts|scripts/)\b", re.M)


def doc_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    info: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        """``run``, ``slow`` or ``notest`` (see the module docstring)."""
        words = self.info.split()[1:]
        return "notest" if "notest" in words else "slow" if "slow" in words else "run"


def fenced(path: Path) -> list[tuple[int, str, str]]:
    """``(line, info string, body)`` of every fenced block of ``path``."""
    text = path.read_text()
    return [(text[: m.start()].count("\n") + 1, m.group(1).strip(), m.group(2)) for m in FENCE.finditer(text)]


def command_blocks(paths: list[Path] | None = None) -> list[Block]:
    """Every shell block of the docs."""
    return [
        Block(path, line, info, body)
        for path in paths or doc_files()
        for line, info, body in fenced(path)
        if info.split(" ")[0] in SHELL
    ]


def unlabeled_commands(paths: list[Path] | None = None) -> list[str]:
    """Blocks without a language that hold commands (they should say ``bash``, and so be checked)."""
    return [
        f"{path.relative_to(ROOT)}:{line}"
        for path in paths or doc_files()
        for line, info, body in fenced(path)
        if not info and COMMAND_START.search(body)
    ]


def inline_installs(paths: list[Path] | None = None) -> list[tuple[str, str]]:
    """``(page, command)`` for every inline code span in prose that is a ``pip install`` command."""
    out = []
    for path in paths or doc_files():
        prose = FENCE.sub("", path.read_text())
        out += [(str(path.relative_to(ROOT)), m.group(1)) for m in re.finditer(r"`(pip install [^`]+)`", prose)]
    return out


PRELUDE = r"""
set -euo pipefail
pip() {
  if [ "${1:-}" = install ]; then
    shift
    local args=() a
    while [ $# -gt 0 ]; do
      a=$1; shift
      if [ "$a" = --index-url ] && [ "${1:-}" = "$TORCH_CPU_INDEX" ] && [ -n "${LOCAL_TORCH_LINKS:-}" ]; then
        args+=(--find-links "$LOCAL_TORCH_LINKS"); shift
      else
        args+=("$a")
      fi
    done
    "$UV" pip install -q "${args[@]}"
  else
    "$UV" pip "$@"
  fi
}
python() {
  if [ "${1:-}" = -m ] && [ "${2:-}" = venv ]; then
    "$UV" venv -q --python "$BASE_PYTHON" "$3"
  else
    command python "$@"
  fi
}
"""


CI_COMMAND = r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*\./scripts/test(?=\s|$).*$"
"""``./scripts/test``, also after environment assignments (``PROVER_HOSTS=trl ./scripts/test --co -q``)."""


def script(block: Block, tmp: Path) -> str:
    """The bash script that runs ``block`` as written, with the module docstring's substitutions."""
    body = block.text.replace("/tmp/", f"{tmp}/")
    body = re.sub(CI_COMMAND, "true  # ./scripts/test: the CI command itself", body, flags=re.M)
    fresh = (
        "" if re.search(r"^python -m venv ", body, re.M) else f"python -m venv {tmp}/env && . {tmp}/env/bin/activate\n"
    )
    return PRELUDE + fresh + body
