"""The judge harness's TextWorld truth: a pivot is a command after which the game's score rose."""

from __future__ import annotations

from pathlib import Path

from prover_bench.judge_cases import TEXTWORLD, textworld_case
from prover_envs.textworld import TextWorldEnv, make_cooking_game
from tests.hosts import require_host

require_host("textworld")


def test_textworld_pivots_are_the_scoring_commands(textworld_cache: Path) -> None:
    kind = TEXTWORLD[0]
    case = textworld_case(kind, groups=1, group_size=4, seed=0, cache_dir=str(textworld_cache))
    game = make_cooking_game(kind.game_seed, cache_dir=textworld_cache, **dict(kind.settings))
    env = TextWorldEnv(max_steps=kind.max_steps)
    for run in case.trajectories:
        # replay the run and read the score before and after every command from the game itself
        step = env.reset({"game_file": game.path, "max_steps": kind.max_steps})
        rose = set()
        for t, turn in enumerate(run.turns):
            before = step.info["score"]
            step = env.step(turn.action)
            if step.info["score"] > before and t < run.num_turns - 1:
                rose.add(t)
        assert case.pivots[run.id] == frozenset(rose)
        assert step.success == run.success
    env.close()
    assert any(case.pivots.values())
    assert set(case.continuations) == {"env", "policy"}
