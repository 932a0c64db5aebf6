"""The OpenRLHF adapter's default judge is the core's (issue 37)."""

from __future__ import annotations

from tests.hosts import require_host

require_host("openrlhf")

from prover_core import default_judge  # noqa: E402
from prover_openrlhf.prover_setup import ProverSetup  # noqa: E402
from prover_openrlhf.records import LocalRecordStore  # noqa: E402


def test_a_setup_that_names_no_judge_gets_the_cores_default() -> None:
    setup = ProverSetup(continue_from=lambda trajectory, turn, seed: True, store=LocalRecordStore())
    assert type(setup.judge) is type(default_judge())
