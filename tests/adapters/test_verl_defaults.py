"""The verl adapter's default judge is the core's (issue 37)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.hosts import require_host

require_host("verl")

from prover_core import default_judge  # noqa: E402
from prover_verl.spec import ProverSpec  # noqa: E402


class Minimal(ProverSpec):
    def make_env(self) -> Any:
        raise AssertionError("not played here")

    def reset_spec(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        return dict(sample)


def test_a_spec_that_names_no_judge_gets_the_cores_default() -> None:
    assert type(Minimal(config=None, tokenizer=None).judge()) is type(default_judge())
