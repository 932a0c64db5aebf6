"""The public surface, guarded: every name a user imports from the packages, in one sorted snapshot.

``tests/public-surface.txt`` lists ``module.name`` for every name in the ``__all__`` of ``prover_core``,
``prover_core.hosts`` (what the adapters and engines build on), ``prover_engine``, ``prover_envs`` and each host
adapter, read from the source (no host library needed). A name added, removed or renamed fails here until the
snapshot is changed in the same commit, deliberately:

    python -m tests.test_public_surface > tests/public-surface.txt

A removed name is a breaking change for every user; the CHANGELOG says so in the same commit.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "public-surface.txt"
MODULES = {
    "prover_core": ROOT / "prover_core" / "__init__.py",
    "prover_core.hosts": ROOT / "prover_core" / "hosts.py",
    "prover_engine": ROOT / "adapters" / "engine" / "prover_engine" / "__init__.py",
    "prover_envs": ROOT / "adapters" / "envs" / "prover_envs" / "__init__.py",
    "prover_trl": ROOT / "adapters" / "trl" / "prover_trl" / "__init__.py",
    "prover_verl": ROOT / "adapters" / "verl" / "prover_verl" / "__init__.py",
    "prover_openrlhf": ROOT / "adapters" / "openrlhf" / "prover_openrlhf" / "__init__.py",
}


def declared(path: Path) -> list[str]:
    """The names of ``__all__`` in the module at ``path`` (a literal list or tuple of strings)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return [str(v) for v in ast.literal_eval(node.value)]
    raise AssertionError(f"{path} declares no literal __all__")


def surface() -> list[str]:
    return sorted(f"{module}.{name}" for module, path in MODULES.items() for name in declared(path))


def test_the_public_surface_is_the_snapshot() -> None:
    now, snapshot = surface(), SNAPSHOT.read_text().split()
    added, removed = sorted(set(now) - set(snapshot)), sorted(set(snapshot) - set(now))
    assert not added and not removed, (
        f"the public surface changed: added {added}, removed {removed}. If meant, regenerate the snapshot "
        "(python -m tests.test_public_surface > tests/public-surface.txt) and say so in the CHANGELOG"
    )
    assert snapshot == sorted(snapshot) and len(set(snapshot)) == len(snapshot)


def test_the_runtime_exports_what_its_all_says() -> None:
    import prover_core
    import prover_core.hosts as hosts

    for module in (prover_core, hosts):
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert not missing, (module.__name__, missing)
        assert module.__all__ == declared(MODULES[module.__name__])


if __name__ == "__main__":
    print("\n".join(surface()))
