"""examples/trl_prover_grpo.py trains and logs accepted ProVer credit."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.conftest import library_warnings, load_script
from tests.hosts import require_host

require_host("trl")


def test_trl_example_trains_with_prover_credit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    module = load_script(Path(__file__).parents[2] / "examples" / "trl_prover_grpo.py", "trl_prover_grpo")
    with caplog.at_level(logging.WARNING):
        history = module.main(steps=2, output_dir=str(tmp_path))
    assert not library_warnings(caplog.records)  # e.g. no "one group although they start from 4 tasks"
    logs = [log for log in history if "prover/groups" in log]
    assert len(logs) == 2
    for log in logs:
        assert log["prover/groups_accepted"] == 1.0
        assert log["prover/mean_delta_accepted"] == 1.0  # LuckyDoor: 4/4 from after the door, 0/4 before
        assert log["prover/bonus_tokens"] >= 1.0


def test_vllm_launch_example_builds_and_trains_against_a_loopback_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``examples/trl_prover_vllm.py``'s trainer, one process on CPU, against a loopback vLLM server."""
    require_host("requests")
    from examples.trl_toy import FixedJudge, tiny_causal_lm
    from tests.adapters.test_trl_chat import chatml_tokenizer
    from tests.adapters.vllm_loopback import LoopbackVLLM, trl_server_mode

    module = load_script(Path(__file__).parents[2] / "examples" / "trl_prover_vllm.py", "trl_prover_vllm")
    tokenizer = chatml_tokenizer()
    server = LoopbackVLLM(tiny_causal_lm(tokenizer, seed=1), eos_token_id=tokenizer.eos_token_id)
    with server, trl_server_mode(server), caplog.at_level(logging.WARNING):
        trainer = module.build_trainer(
            tiny_causal_lm(tokenizer, seed=0),
            tokenizer,
            vllm_url=server.url,
            output_dir=str(tmp_path),
            steps=1,
            k=2,
            per_device_batch=4,
            num_generations=4,
            max_action_tokens=3,
            use_cpu=True,
            judge=FixedJudge(1, 1),
        )
        trainer.train()
    (log,) = [log for log in trainer.state.log_history if "prover/groups" in log]
    assert log["prover/groups_accepted"] == 1.0 and log["prover/mean_delta_accepted"] == 1.0
    assert log["prover/continuation_share"] == 1.0  # 2K = 4 continuations over the batch's 4 episodes
    assert sum("seed" in r for r in server.requests) >= 2 * 2  # the continuations' seeded requests
    assert not library_warnings(caplog.records)


def test_the_push_door_example_learns_and_credits_the_pivot(tmp_path: Path) -> None:
    """``examples/trl_push_door.py``: with the library's default judge, the success rate rises over the steps on CPU
    and every accepted segment is the pivot (turn 1, the door), never the hall or the way through."""
    module = load_script(Path(__file__).parents[2] / "examples" / "trl_push_door.py", "trl_push_door")
    rows = module.main(steps=16, output_dir=str(tmp_path))
    assert len(rows) == 16
    first = sum(r["success"] for r in rows[:4]) / 4
    last = sum(r["success"] for r in rows[-4:]) / 4
    assert last > first + 0.2, (first, last)
    credited = [r for r in rows if r["accepted"]]
    assert credited and all(r["credited_turns"] == [1] for r in credited)
    assert all(0 < r["credit_share"] < 1 for r in credited)
