"""The custom-trainer example keeps working (it mirrors the README's snippet), and logs no warning."""

import logging
from pathlib import Path

import pytest

from tests.conftest import library_warnings, load_script


def test_custom_trainer_example_runs_a_step(caplog: pytest.LogCaptureFixture) -> None:
    module = load_script(Path(__file__).parents[1] / "examples" / "custom_trainer.py", "custom_trainer")
    with caplog.at_level(logging.WARNING):
        metrics = module.trainer_step(0)
    assert metrics["prover/groups_accepted"] >= 1
    assert metrics["prover/max_token_advantage"] > 1.0  # GRPO advantage < 1, plus a positive bonus
    assert not library_warnings(caplog.records)
