"""The embedded demo: its exact values agree with Monte Carlo, and `prover demo` prints the table."""

import math

import numpy as np

from prover_core.cli import main
from prover_core.demo import MDPEnv, VaultMDP, exact_success_probability, vault_policy
from prover_core.demo.run import rollout_batch, run_demo


def test_exact_value_matches_monte_carlo() -> None:
    mdp = VaultMDP(rooms=4, key_room=1, horizon=8)
    exact = exact_success_probability(mdp, vault_policy())((0, False), mdp.horizon)
    trajs = rollout_batch(mdp, 50, 40, seed=9)
    rate = np.mean([t.success for t in trajs])
    assert abs(rate - exact) < 4 * math.sqrt(exact * (1 - exact) / len(trajs))


def test_exact_value_by_hand_on_a_two_room_vault() -> None:
    # rooms=2, key in room 0, no slip, horizon 3. From (0, no key): actions go east, wait, look, take key
    # with weights 4,1,1,1.2 (sum 7.2). Success needs: take key (turn 1), go east (turn 2), open (turn 3).
    mdp = VaultMDP(rooms=2, key_room=0, slip=0.0, horizon=3)
    v = exact_success_probability(mdp, vault_policy())
    # V((1, key), 1) = P(open) = 4/5; V((0, key), 2) = P(east)*V((1,key),1) = 4/6 * 4/5
    assert math.isclose(v((1, True), 1), 0.8)
    assert math.isclose(v((0, True), 2), 4 / 6 * 0.8)
    assert math.isclose(v((0, False), 3), 1.2 / 7.2 * (4 / 6 * 0.8))
    env = MDPEnv(mdp)
    env.reset({"seed": 0})
    assert env.step("take key").info["actions"] == ("go east", "wait", "look around")


def test_demo_runs_the_whole_loop_and_prints_the_table(capsys) -> None:  # type: ignore[no-untyped-def]
    run = run_demo(groups=6, group_size=8, k=8, seed=0)
    assert run.result.report.count("accepted") >= 1
    assert main(["demo", "--groups", "6"]) == 0
    out = capsys.readouterr().out
    assert "take key" in out and "Delta" in out and "A+bonus" in out and "accepted" in out
    assert main(["demo", "--groups", "4", "--json"]) == 0
    assert '"prover/groups": 4.0' in capsys.readouterr().out


def test_demo_with_the_llm_judge_against_a_local_server(capsys) -> None:  # type: ignore[no-untyped-def]
    from tests.chat_server import ChatServer, answer

    def key_turn(body, index):  # type: ignore[no-untyped-def]
        # the scripted "model" reads the rendered trajectory and names the turn that took the key
        text = body["messages"][1]["content"]
        before = text.split("action: take key")[0]
        turn = int(before.rsplit("--- turn ", 1)[1].split(" ---")[0])
        return answer(turn, turn)

    with ChatServer(key_turn) as server:
        assert main(["demo", "--groups", "6", "--judge-url", server.url, "--judge-model", "test-model"]) == 0
    out = capsys.readouterr().out
    assert "llm judge" in out and "take key" in out and "accepted" in out
