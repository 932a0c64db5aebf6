"""docs/architecture.md's rules of what may import what, checked on the import graph of the whole tree (the runtime,
the engines, the environment families, the host adapters, the benchmarks, the scripts, the examples), its list of the
places a new piece touches, and the runtime's size.

The graph is read from the source (``ast``): every ``import``/``from ... import`` of a module, including those inside
functions, except where noted (imports inside functions are how the optional hosts are reached lazily).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "prover_core"
INTEGRATIONS = {"engine": "prover_engine", "envs": "prover_envs"}  # adapters/<dir>: the engines, the environments
ADAPTERS = sorted(  # the host adapters: every other distribution under adapters/
    p.name for p in (ROOT / "adapters").iterdir() if (p / "pyproject.toml").is_file() and p.name not in INTEGRATIONS
)


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


def files_of(package: str) -> list[Path]:
    """The source files of one of the integrations' packages (``prover_engine``, ``prover_envs``)."""
    folder = next(d for d, name in INTEGRATIONS.items() if name == package)
    return sorted((ROOT / "adapters" / folder / package).rglob("*.py"))


def package_of(path: Path) -> str:
    """The distribution-level package a file of the tree belongs to."""
    parts = path.relative_to(ROOT).parts
    if parts[0] == "adapters":
        return parts[2] if len(parts) > 3 else f"adapters/{parts[1]}"
    if parts[0] == "benchmarks":
        return "prover_bench" if parts[1] == "prover_bench" else "benchmarks (scripts)"
    return parts[0]


TREE_DIRS = ("prover_core", "adapters", "benchmarks", "scripts", "examples")
TREE_FILES = [p for d in TREE_DIRS for p in (ROOT / d).rglob("*.py")]
PACKAGES = {"prover_core", "prover_bench", *INTEGRATIONS.values(), *(f"prover_{host}" for host in ADAPTERS)}


def package_graph() -> dict[str, set[str]]:
    """Package -> the packages of the tree it imports (anywhere in its files)."""
    graph: dict[str, set[str]] = {}
    for path in TREE_FILES:
        mine = package_of(path)
        found = {m.split(".")[0] for m in imports(path)} & PACKAGES
        graph.setdefault(mine, set()).update(found - {mine})
    return graph


def test_the_whole_tree_is_read() -> None:
    graph = package_graph()
    expected = {"prover_core", "prover_bench", "benchmarks (scripts)", "scripts", "examples", *INTEGRATIONS.values()}
    assert expected | {f"prover_{host}" for host in ADAPTERS} <= set(graph)
    assert ADAPTERS == ["openrlhf", "trl", "verl"]
    assert sorted(p.name for p in (ROOT / "adapters").iterdir() if (p / "pyproject.toml").is_file()) == sorted(
        [*ADAPTERS, *INTEGRATIONS]
    )


def test_no_import_cycle_between_the_packages_of_the_tree() -> None:
    graph = package_graph()
    state: dict[str, int] = {}

    def visit(package: str, path: list[str]) -> None:
        state[package] = 1
        for dep in sorted(graph.get(package, ())):
            if state.get(dep) == 1:
                raise AssertionError(" -> ".join([*path, package, dep]))
            if dep not in state:
                visit(dep, [*path, package])
        state[package] = 2

    for package in sorted(graph):
        if package not in state:
            visit(package, [])


def test_the_layers_of_the_tree() -> None:
    """The runtime imports nothing else of the tree; the engines and the environments only the runtime; the host
    adapters the runtime and the engines; the benchmarks' package the runtime and the environments."""
    graph = package_graph()
    assert graph["prover_core"] == set()  # no benchmark, no adapter: not even the CLI (prover bench: an entry point)
    assert graph["prover_engine"] == graph["prover_envs"] == {"prover_core"}
    for host in ADAPTERS:
        assert graph[f"prover_{host}"] == {"prover_core", "prover_engine"}, host
    assert graph["prover_bench"] == {"prover_core", "prover_envs"}


def test_the_engines_and_the_environments_use_the_runtimes_public_modules_only() -> None:
    for package in INTEGRATIONS.values():
        for path in files_of(package):
            used = {m for m in imports(path) if m.split(".")[0] == "prover_core"}
            private = {m for m in used if any(part.startswith("_") for part in m.split("."))}
            assert not private, (path, private)


def test_the_adapters_use_the_library_through_prover_core_hosts_only() -> None:
    for host in ADAPTERS:
        for path in (ROOT / "adapters" / host).rglob("*.py"):
            used = {m for m in imports(path) if m.split(".")[0] == "prover_core"}
            modules = {m for m in used if not m.startswith("prover_core.hosts.")}
            assert modules <= {"prover_core.hosts"}, (path, modules)


def declares_all(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def test_every_runtime_module_declares_all_or_is_private() -> None:
    undeclared = {
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        if not declares_all(p) and not any(part.startswith("_") and part != "__init__" for part in p.parts)
    }
    undeclared -= {"prover_core.__main__"}
    assert undeclared == set()


def test_the_library_imports_no_benchmark_adapter_or_host_at_import_time() -> None:
    tree = ("prover_bench", "prover_engine", "prover_envs", "prover_trl", "prover_verl", "prover_openrlhf")
    forbidden = (*tree, "torch", "trl", "verl", "openrlhf")
    optional = ("ray", "gymnasium", "textworld", "matplotlib", "tqdm")
    for path in PACKAGE.rglob("*.py"):
        anywhere = {m.split(".")[0] for m in imports(path)}
        assert not anywhere & set(tree), path
        at_import = {m.split(".")[0] for m in imports(path, top_level_only=True)}
        assert not at_import & set(forbidden + optional), (path, at_import & set(forbidden + optional))
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, prover_core, prover_core.hosts, prover_core.judges; print(*sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert not {m.split(".")[0] for m in loaded} & set(forbidden + optional)


def test_the_data_at_the_boundary_imports_none_of_the_stages() -> None:
    boundary = ("prover_core.data", "prover_core.config", "prover_core.protocols", "prover_core.errors")
    allowed = set(boundary) | {"prover_core._finite"}
    # the config builds each stage's settings (prover_core.stages), whose rule objects are the two leaf modules of
    # decision math: values that import nothing of the library but the data
    settings = {"prover_core.stages", "prover_core.acceptance", "prover_core.sequential"}
    for module in boundary:
        assert internal(module) <= allowed | (settings if module == "prover_core.config" else set()), module
    for module in settings:
        assert internal(module) <= {"prover_core.data", "prover_core.errors", *settings}, module


def test_the_stages_do_not_import_the_orchestration() -> None:
    stages = ("trigger", "propose", "verify", "continuations", "credit", "acceptance", "sequential", "clock")
    for stage in stages:
        assert "prover_core.bonus" not in internal(f"prover_core.{stage}"), stage
    for module in under("prover_core.judges"):
        assert not internal(module) & {"prover_core.verify", "prover_core.continuations", "prover_core.bonus"}, module
    for path in files_of("prover_engine"):
        assert not [m for m in imports(path) if m.startswith(("prover_core.judges", "prover_core.verify"))], path


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


ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()


def row(piece: str) -> str:
    """The "Where a new piece goes" row of ``piece``."""
    match = re.search(rf"^\| {re.escape(piece)} \|(.*)$", ARCHITECTURE, re.M)
    assert match, piece
    return match[1]


def test_a_judge_touches_the_places_its_row_names() -> None:
    from prover_core.judges import registered_judges

    places = row("a judge without a model")
    for place in ("prover_core/judges/<module>.py", "register_judge", "prover_core/judges/__init__.py", "docs/api.md"):
        assert place in places, place
    registrations = (PACKAGE / "judges" / "__init__.py").read_text()
    api = (ROOT / "docs" / "api.md").read_text()
    tests = {p.name: p.read_text() for p in (ROOT / "tests").glob("test_*judge*.py")}
    for name, factory in registered_judges().items():
        kind = type(factory(0))
        assert re.fullmatch(r"prover_core\.judges\.[a-z_]+", kind.__module__), (name, kind.__module__)
        assert f'register_judge("{name}",' in registrations, name
        assert f"| `{name}` | `{kind.__module__}.{kind.__qualname__}` |" in api, name
        assert [f for f, text in tests.items() if kind.__name__ in text], (name, "no test names it")


ENGINE_INFRASTRUCTURE = {"__init__", "errors", "layout", "parity", "policy", "protocol", "schedule", "tokens"}


def test_an_engine_touches_the_places_its_row_names() -> None:
    import prover_engine as engine

    places = row("an inference engine")
    for place in (
        "adapters/engine/prover_engine/<server>.py",
        "adapters/engine/prover_engine/__init__.py",
        "tests/test_engine_<server>.py",
    ):
        assert place in places, place
    assert "docs/engines.md" in places
    servers = sorted(p.stem for p in files_of("prover_engine") if p.stem not in ENGINE_INFRASTRUCTURE)
    assert servers == ["llama", "openai", "sglang"]
    exported = {name: getattr(engine, name) for name in engine.__all__ if name.endswith("Engine")}
    engines_doc = (ROOT / "docs" / "engines.md").read_text()
    for server in servers:
        classes = [name for name, cls in exported.items() if cls.__module__ == f"prover_engine.{server}"]
        assert len(classes) == 1, (server, classes)  # exported lazily from prover_engine/__init__.py
        assert (ROOT / "tests" / f"test_engine_{server}.py").is_file(), server
        assert f"`{classes[0]}`" in engines_doc, classes[0]


def test_an_environment_family_touches_the_places_its_row_names() -> None:
    import importlib

    places = row("an environment family")
    for place in ("adapters/envs/prover_envs/<family>.py", "adapters/envs/prover_envs/__init__.py"):
        assert place in places, place
    assert "adapters/envs/pyproject.toml" in places
    assert "tests/envs/test_<family>.py" in places and "docs/environments.md" in places
    families = sorted(p.stem for p in files_of("prover_envs") if p.stem != "__init__")
    assert families == ["gymnasium", "textworld"]
    listing = importlib.import_module("prover_envs").__doc__ or ""
    extras = (ROOT / "adapters" / "envs" / "pyproject.toml").read_text()
    extras = extras.split("[project.optional-dependencies]")[1].split("\n\n")[0]
    environments = (ROOT / "docs" / "environments.md").read_text().lower()
    for family in families:
        module = importlib.import_module(f"prover_envs.{family}")
        assert callable(module.replay_env) and callable(module.snapshot_env), family
        assert f":mod:`prover_envs.{family}`" in listing, family
        assert f'"{family}>=' in extras, family  # its library is an extra
        assert (ROOT / "tests" / "envs" / f"test_{family}.py").is_file(), family
        assert family in environments, family


def test_a_host_adapter_touches_the_places_its_row_names() -> None:
    places = row("a host adapter")
    for place in (
        "adapters/<host>/",
        "prover_core.hosts",
        "prover_engine",
        "[tool.mypy]",
        "tests/adapters/test_<host>_*.py",
    ):
        assert place in places, place
    assert "scripts/test" in places and "docs/adapters/<host>.md" in places
    mypy = (ROOT / "pyproject.toml").read_text().split("[tool.mypy]")[1].split("\n\n")[0]
    script = (ROOT / "scripts" / "test").read_text()
    for host in ADAPTERS:
        assert (ROOT / "adapters" / host / f"prover_{host}" / "__init__.py").is_file(), host
        assert f'"prover_{host}"' in mypy and f"adapters/{host}" in mypy, host
        assert list((ROOT / "tests" / "adapters").glob(f"test_{host}_*.py")), host
        assert f"./adapters/{host}" in script, host
        assert '"prover-engine>=' in (ROOT / "adapters" / host / "pyproject.toml").read_text(), host
        assert (ROOT / "docs" / "adapters" / f"{host}.md").is_file(), host
