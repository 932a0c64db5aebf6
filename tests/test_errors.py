"""The exception tree drawn in errors.py's docstring is the classes' own, and every exception is exported."""

from __future__ import annotations

import builtins
import inspect
import re
from types import ModuleType

import prover_core
from prover_core import errors

LINE = re.compile(r"^(?P<indent> *)(?P<name>\w+)(?: \[(?P<also>[\w, ]+)\])?$")


def drawn_tree(module: ModuleType = errors) -> dict[str, tuple[str | None, set[str]]]:
    """``name -> (parent in the drawing, the other bases in brackets)``, from ``module``'s docstring."""
    doc = module.__doc__ or ""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    tree: dict[str, tuple[str | None, set[str]]] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = LINE.match(line)
        assert match, f"not a line of the tree: {line!r}"
        depth = len(match["indent"])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        also = {n.strip() for n in match["also"].split(",")} if match["also"] else set()
        tree[match["name"]] = (stack[-1][1] if stack else None, also)
        stack.append((depth, match["name"]))
    return tree


def test_the_drawn_tree_is_the_class_hierarchy() -> None:
    tree = drawn_tree()
    classes = {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == errors.__name__
    }
    assert set(tree) == set(classes)
    for name, (parent, also) in tree.items():
        bases = {b.__name__ for b in classes[name].__bases__}
        assert bases == ({parent} if parent else {"Exception"}) | also, name
        for other in also:  # a bracketed base is a builtin or another class of the tree
            assert other in classes or isinstance(getattr(builtins, other, None), type), other


def test_every_exception_is_exported_from_errors_and_the_package() -> None:
    names = {n for n in drawn_tree() if not n.startswith("_")}  # a leading _: internal, never leaves the library
    assert set(errors.__all__) == names
    assert names <= set(prover_core.__all__)
    assert all(getattr(prover_core, n) is getattr(errors, n) for n in names)


def test_the_engines_errors_live_with_the_engines_drawn_and_exported() -> None:
    """prover_engine.errors draws its classes under the core's EngineError and ProverError (roots it does not
    define), each class with the bases drawn, each exported from prover_engine; the core no longer has them."""
    import prover_engine
    from prover_engine import errors as engine_errors

    tree = drawn_tree(engine_errors)
    classes = {
        name: cls
        for name, cls in vars(engine_errors).items()
        if inspect.isclass(cls) and cls.__module__ == engine_errors.__name__
    }
    assert set(tree) - set(classes) == {"EngineError", "ProverError"}  # the core's, drawn as roots
    for name, cls in classes.items():
        parent, also = tree[name]
        assert {b.__name__ for b in cls.__bases__} == {parent} | also, name
        assert getattr(prover_engine, name) is cls and name in prover_engine.__all__
        assert not hasattr(errors, name) and not hasattr(prover_core, name)
    assert set(engine_errors.__all__) == set(classes)
    assert issubclass(engine_errors.EngineTimeoutError, errors.ContinuationTimeoutError)


def test_no_alias_of_an_unreleased_exception_name_is_left() -> None:
    import prover_core.judges.llm.stats as stats
    import prover_core.judges.llm.tools as tools

    assert not hasattr(stats, "Refused") and not hasattr(tools, "ToolError")
    assert "_ToolError" not in prover_core.__all__


def test_the_llm_judges_answer_timeout_lives_in_errors_and_is_a_timeout() -> None:
    from prover_core.judges.llm.client import AnswerTimeout

    assert AnswerTimeout is errors.AnswerTimeout is prover_core.AnswerTimeout
    assert issubclass(AnswerTimeout, errors.JudgeError) and issubclass(AnswerTimeout, TimeoutError)
