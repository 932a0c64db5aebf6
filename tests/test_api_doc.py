"""docs/api.md lists every public name of prover_core with a summary, and is what the code says now."""

from __future__ import annotations

import prover_core
from tests.api_doc import DOC, public_modules, render, summary


def test_every_public_name_has_a_one_line_summary() -> None:
    missing = [
        f"{module.__name__}.{name}"
        for module in public_modules()
        for name in module.__all__
        if not summary(module, name, getattr(module, name))[1]
    ]
    assert not missing, f"write a docstring (or an attribute docstring) for: {missing}"


def test_the_api_page_is_up_to_date() -> None:
    assert DOC.read_text() == render(), "docs/api.md is stale: run `python -m tests.api_doc`"
    for name in prover_core.__all__:
        assert f"| `{name}` |" in DOC.read_text()
