"""Writes docs/api.md: every public name of prover_core (then of prover_engine and prover_envs) with a one-line
summary, from the code.

    python -m tests.api_doc            # rewrite docs/api.md (tests/test_api_doc.py fails while it is stale)

A module is public when its name has no part starting with ``_`` and it defines ``__all__``; its public
names are ``__all__``. A summary is the first paragraph of the object's docstring, or for a constant or
type alias the string literal written right after its assignment (an attribute docstring).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import pkgutil
from pathlib import Path
from types import ModuleType

import prover_core
import prover_engine
import prover_envs

PACKAGES = (prover_core, prover_engine, prover_envs)
"""The runtime, then the engines and the environment families (adapters/engine, adapters/envs)."""
DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"

HEADER = """\
# API reference

Every public name of `prover_core`, by module, with the first line of its docstring; then those of the
engines (`prover_engine`, the distribution `prover-engine` in `adapters/engine`) and of the environment
families (`prover_envs`, `prover-envs` in `adapters/envs`). Generated from the code by `python -m tests.api_doc`;
`tests/test_api_doc.py` fails when this page is stale. A module is public when no part of its name starts with
`_` and it defines `__all__`. The details are in each docstring (`help(prover_core.compute_bonus)`) and in the
guides listed in the [README](../README.md).
"""


def modules() -> list[ModuleType]:
    """Each of :data:`PACKAGES` and every module in it, imported."""
    out: list[ModuleType] = []
    for package in PACKAGES:
        prefix = package.__name__ + "."
        names = [package.__name__] + [info.name for info in pkgutil.walk_packages(package.__path__, prefix)]
        out += [importlib.import_module(name) for name in sorted(names)]
    return out


def public_modules() -> list[ModuleType]:
    return [
        m for m in modules() if "__all__" in vars(m) and not any(part.startswith("_") for part in m.__name__.split("."))
    ]


def attribute_docs(module: ModuleType) -> dict[str, str]:
    """``NAME = ...`` (or ``NAME: T = ...``) followed by a string literal: that string, by name."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    body = tree.body
    for node, after in itertools.pairwise(body):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            for target in targets:
                if isinstance(target, ast.Name):
                    out[target.id] = after.value.value
    return out


def first_paragraph(text: str) -> str:
    return " ".join(inspect.cleandoc(text).split("\n\n")[0].split())


def summary(module: ModuleType, name: str, obj: object) -> tuple[str, str]:
    """``(kind, one-line summary)`` of ``module.name``."""
    if inspect.isclass(obj):
        kind = "protocol" if getattr(obj, "_is_protocol", False) else "class"
        if issubclass(obj, BaseException):
            kind = "exception"
        return kind, first_paragraph(obj.__doc__ or "")
    if inspect.isfunction(inspect.unwrap(obj)) or inspect.isbuiltin(obj):  # unwrap: through functools.cache
        kind = "async function" if inspect.iscoroutinefunction(inspect.unwrap(obj)) else "function"
        return kind, first_paragraph(obj.__doc__ or "")
    if inspect.ismodule(obj):
        return "module", first_paragraph(obj.__doc__ or "")
    kind = "alias" if _is_alias(obj) else "constant"
    for source in [module, *(m for m in modules() if m is not module)]:
        text = attribute_docs(source).get(name)
        if text:
            return kind, first_paragraph(text)
    return kind, ""


def _is_alias(obj: object) -> bool:
    return type(obj).__module__ in ("typing", "collections.abc", "types") or isinstance(obj, type)


def judges_by_name() -> list[str]:
    """The section listing every registered judge (:mod:`prover_core.judges.registry`): name, class, summary."""
    from prover_core.judges import registered_judges

    lines = [
        "## Judges by name\n",
        "The judges `prover demo --judge` accepts and `prover bench judges` measures "
        "(`prover_core.judges.make_judge`).\n",
        "| name | makes | summary |",
        "|---|---|---|",
    ]
    for name, factory in registered_judges().items():
        made = type(factory(0))
        cell = first_paragraph(made.__doc__ or "").replace("|", r"\|")
        lines.append(f"| `{name}` | `{made.__module__}.{made.__qualname__}` | {cell} |")
    return [*lines, ""]


def render() -> str:
    lines = [HEADER, *judges_by_name()]
    for module in public_modules():
        lines.append(f"## `{module.__name__}`\n")
        doc = first_paragraph(module.__doc__ or "")
        if doc:
            lines.append(doc + "\n")
        lines.append("| name | kind | summary |")
        lines.append("|---|---|---|")
        for name in sorted(module.__all__, key=str.lower):
            kind, text = summary(module, name, getattr(module, name))
            cell = text.replace("|", r"\|")
            lines.append(f"| `{name}` | {kind} | {cell} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    DOC.write_text(render())
    print(f"wrote {DOC}")
