"""The exception tree drawn in errors.py's docstring is the classes' own, and every exception is exported."""

from __future__ import annotations

import builtins
import inspect
import re

import prover_core
from prover_core import errors

LINE = re.compile(r"^(?P<indent> *)(?P<name>\w+)(?: \[(?P<also>[\w, ]+)\])?$")


def drawn_tree() -> dict[str, tuple[str | None, set[str]]]:
    """``name -> (parent in the drawing, the other bases in brackets)``, from errors.py's docstring."""
    doc = errors.__doc__ or ""
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


def test_the_former_homes_of_two_exceptions_still_import() -> None:
    from prover_core.judges.llm.stats import Refused
    from prover_core.judges.llm.tools import ToolError

    assert Refused is errors.JudgeRefusedError and issubclass(Refused, errors.JudgeError)
    assert ToolError is errors._ToolError and "_ToolError" not in prover_core.__all__


def test_the_llm_judges_answer_timeout_lives_in_errors_and_is_a_timeout() -> None:
    from prover_core.judges.llm.client import AnswerTimeout

    assert AnswerTimeout is errors.AnswerTimeout is prover_core.AnswerTimeout
    assert issubclass(AnswerTimeout, errors.JudgeError) and issubclass(AnswerTimeout, TimeoutError)
