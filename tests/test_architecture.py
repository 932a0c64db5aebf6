"""docs/architecture.md's rules of what may import what in ``prover_core``, checked on its import graph.

The graph is read from the source (``ast``): every ``import``/``from ... import`` of a module, including those inside
functions, except where noted (imports inside functions are how the optional hosts are reached lazily).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "prover_core"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, top_level_only: bool = False) -> set[str]:
    """Modules ``path`` imports (all of them, or only those at module level)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


GRAPH = {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def internal(module: str) -> set[str]:
    """The ``prover_core`` modules ``module`` imports (a name imported from a package counts as the package)."""
    return {m for m in GRAPH[module] if m in GRAPH}


def under(prefix: str) -> list[str]:
    return [m for m in GRAPH if m == prefix or m.startswith(prefix + ".")]


def test_the_library_imports_no_benchmark_adapter_or_host_at_import_time() -> None:
    forbidden = ("prover_bench", "prover_trl", "prover_verl", "prover_openrlhf", "torch", "trl", "verl", "openrlhf")
    optional = ("ray", "gymnasium", "textworld", "matplotlib", "tqdm")
    for path in PACKAGE.rglob("*.py"):
        anywhere = {m.split(".")[0] for m in imports(path)}
        handed_over = {"prover_bench"} if path == PACKAGE / "cli.py" else set()  # `prover bench` delegates
        assert not anywhere - handed_over & {"prover_bench", "prover_trl", "prover_verl", "prover_openrlhf"}, path
        at_import = {m.split(".")[0] for m in imports(path, top_level_only=True)}
        assert not at_import & set(forbidden + optional), (path, at_import & set(forbidden + optional))
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, prover_core, prover_core.engine, prover_core.judges; print(*sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert not {m.split(".")[0] for m in loaded} & set(forbidden + optional)


def test_the_data_at_the_boundary_imports_none_of_the_stages() -> None:
    boundary = ("prover_core.data", "prover_core.config", "prover_core.protocols", "prover_core.errors")
    allowed = set(boundary) | {"prover_core._finite"}
    for module in boundary:
        assert internal(module) <= allowed, (module, internal(module) - allowed)


def test_the_stages_do_not_import_the_orchestration() -> None:
    stages = ("trigger", "propose", "verify", "continuations", "credit", "acceptance", "sequential", "clock")
    for stage in stages:
        assert "prover_core.bonus" not in internal(f"prover_core.{stage}"), stage
    for module in under("prover_core.judges"):
        assert not internal(module) & {"prover_core.verify", "prover_core.continuations", "prover_core.bonus"}, module
        assert not [m for m in internal(module) if m.startswith("prover_core.engine")], module
    for module in under("prover_core.engine"):
        assert not [m for m in internal(module) if m.startswith(("prover_core.judges", "prover_core.verify"))], module


def test_no_import_cycles() -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(internal(module)):
            if dep == module or module.startswith(dep + "."):
                continue  # a module importing its own package's __init__ (re-exports), not a cycle of modules
            if state.get(dep) == 1:
                raise AssertionError(" -> ".join([*path, module, dep]))
            if dep not in state:
                visit(dep, [*path, module])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [])
