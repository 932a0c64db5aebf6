"""benchmarks/trl_step.py on CPU with the tiny model: every arm in its own process, the step table, and the
latency counts that must hold whatever the machine (no timing is asserted: the table prints ratios)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import load_script
from tests.hosts import require_host

require_host("trl")

PATH = Path(__file__).parents[2] / "benchmarks" / "trl_step.py"


def bench() -> Any:
    return load_script(PATH, "trl_step")


def test_the_menu_game_by_hand() -> None:
    game = bench().MenuGame
    env = game()
    env.reset({"prompt": "enter door"})  # task 1: room 2 wants option 1, room 5 wants option 0
    steps = [env.step(c) for c in (2, 2, 1, 0, 1, 0, 2, 2)]
    assert [s.done for s in steps] == [False] * 7 + [True] and steps[-1].success
    env.reset({"prompt": "enter door"})
    assert not [env.step(c) for c in (0, 0, 1, 0, 0, 1, 0, 0)][-1].success  # room 5 wanted 0, not 1
    env.reset({"prompt": "enter door"})
    trapped = [env.step(c) for c in (0, 0, 1, 0, 2)]
    assert trapped[-1].done and not trapped[-1].success  # room 4, option 2: the trap


def test_every_arm_runs_in_its_own_process_and_verification_takes_one_round(tmp_path: Path, capsys: Any) -> None:
    module = bench()
    assert module.main(["--steps", "3", "--arms", "grpo,prover,prover-wait", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "| tiny (" in text and "x GRPO" in text and "within the rollout's + 1" in text
    results = {r["arm"]: r for r in json.loads((tmp_path / "results.json").read_text())}
    assert set(results) == {"grpo", "prover", "prover-wait"} and all(len(r["steps"]) == 3 for r in results.values())
    rollouts = {arm: [s["rollout_tokens"] for s in r["steps"]] for arm, r in results.items()}
    assert rollouts["grpo"] == rollouts["prover"] == rollouts["prover-wait"]  # lr 0: the same rollouts in every arm
    assert all(s["verify_calls"] == 0 for s in results["grpo"]["steps"])
    for step in results["prover"]["steps"]:
        # the default: verification's generate calls one after another are the clock's rounds, within the rollout's
        assert step["verify_calls"] == step["prover/verify_policy_rounds"] == step["prover/policy_calls"]
        assert step["verify_calls"] <= step["rollout_calls"] + 1 and step["rollout_calls"] == 8
        assert step["verify_tokens"] == step["prover/continuation_tokens"] > 0
    waited = sum(s["verify_calls"] for s in results["prover-wait"]["steps"])
    assert waited > sum(s["verify_calls"] for s in results["prover"]["steps"])  # the second boundary's round
