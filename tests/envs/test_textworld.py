"""TextWorld games generated locally, played, and restored by replay and by fork at any turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prover_core import ReplayMismatchError, RestoreError, Trajectory, Turn
from prover_core.protocols import Step
from prover_envs import rollout
from prover_envs.textworld import (
    CookingGame,
    GameFile,
    TextPolicy,
    TextWorldEnv,
    WalkthroughFollower,
    clean_feedback,
    make_cooking_game,
    replay_env,
    snapshot_env,
)
from tests.envs.conftest import GAME_SETTINGS
from tests.hosts import require_host

require_host("textworld")  # the modules above import it lazily; skip (or fail in CI) without it

MAX_STEPS = 30


def spec(game: GameFile) -> dict[str, Any]:
    return {"game_file": game.path, "max_steps": MAX_STEPS}


def record(game: GameFile, epsilon: float, seed: int) -> Trajectory:
    env = TextWorldEnv()
    try:
        return rollout(
            env, spec(game), WalkthroughFollower(epsilon), trajectory_id=f"run{seed}", group_id="g", seed=seed
        )
    finally:
        env.close()


def go_on(env: Any, step: Step, policy: WalkthroughFollower, seed: int) -> list[tuple[str, str, bool, bool]]:
    """A continuation: the policy acts with ``default_rng(seed)`` until the episode ends."""
    rng = np.random.default_rng(seed)
    out = []
    while not step.done:
        action = policy.choose(step.info, rng)
        step = env.step(action)
        out.append((action, step.observation, step.done, step.success))
    return out


def test_clean_feedback_drops_the_status_line_and_prompt() -> None:
    raw = (
        "You take the knife from the table.\n\n\n\n>          "
        "                                             -= Kitchen =-4/10"
    )
    assert clean_feedback(raw) == "You take the knife from the table."
    assert clean_feedback("\n-= Kitchen =-\nYou arrive.\n\n>  ") == "-= Kitchen =-\nYou arrive."


def test_games_are_cached_by_settings(cooking_game: GameFile, textworld_cache: Path) -> None:
    game = CookingGame(seed=3, **GAME_SETTINGS)
    path = game.compile(textworld_cache)
    assert path == cooking_game.path
    stamp = Path(path).stat().st_mtime_ns
    assert make_cooking_game(3, cache_dir=textworld_cache, **GAME_SETTINGS) == cooking_game
    assert Path(path).stat().st_mtime_ns == stamp  # not compiled again
    by_settings = TextWorldEnv(cache_dir=textworld_cache).reset({"game": game.spec})
    by_file = TextWorldEnv().reset(spec(cooking_game))
    assert by_settings == by_file
    assert CookingGame.from_spec(game.spec) == game
    with pytest.raises(ValueError, match="unknown"):
        CookingGame.from_spec({**game.spec, "rooms": 3})
    with pytest.raises(ValueError, match="take"):
        CookingGame(seed=1, recipe=1, take=2)


def test_following_the_oracle_plan_wins(cooking_game: GameFile) -> None:
    assert cooking_game.plan and set(cooking_game.plan) <= set(cooking_game.walkthrough)
    t = record(cooking_game, epsilon=0.0, seed=0)
    assert t.success
    assert [x.action for x in t.turns] == list(cooking_game.plan)


def test_a_second_cooking_loses_and_running_out_of_steps_fails(cooking_game: GameFile) -> None:
    env = TextWorldEnv()
    step = env.reset(spec(cooking_game))
    cook = next(i for i, c in enumerate(cooking_game.plan) if c.startswith("cook "))
    for command in cooking_game.plan[: cook + 1]:
        step = env.step(command)
        assert not step.done
    assert step.info["score"] > 0 and step.info["actions"]
    step = env.step(cooking_game.plan[cook])  # burns it
    assert step.done and step.info["lost"] and not step.success
    step = env.reset({**spec(cooking_game), "max_steps": 3})
    for _ in range(3):
        assert not step.done
        step = env.step("look")
    assert step.done and not step.success and not step.info["lost"]
    with pytest.raises(TypeError):
        env.step(3)


def test_the_follower_is_a_text_policy_driven_by_its_seed(cooking_game: GameFile) -> None:
    policy = WalkthroughFollower(0.5)
    assert isinstance(policy, TextPolicy)
    info = {"plan": ("open fridge",), "actions": ("look", "open fridge", "eat apple")}
    picks = [policy.choose(info, np.random.default_rng(s)) for s in range(40)]
    assert picks == [policy.choose(info, np.random.default_rng(s)) for s in range(40)]
    assert {"look", "eat apple", "open fridge"} == set(picks)
    assert WalkthroughFollower(0.0).choose(info, np.random.default_rng(0)) == "open fridge"
    with pytest.raises(ValueError):
        WalkthroughFollower(1.5)


@pytest.mark.parametrize("restorer", ["replay", "snapshot"])
def test_restored_games_continue_exactly_like_the_original(cooking_game: GameFile, restorer: str) -> None:
    """At turns of a recorded game, a restored game follows the recorded commands to the recorded end, and
    the policy's continuation under a seed is the original game's continuation under that seed."""
    env = replay_env(max_steps=MAX_STEPS) if restorer == "replay" else snapshot_env(max_steps=MAX_STEPS)
    policy = WalkthroughFollower(0.5)
    t = record(cooking_game, epsilon=0.5, seed=2)
    actions = [x.action for x in t.turns]
    assert t.num_turns >= 6
    for turn, seed in ((0, 11), (t.num_turns // 2, 12), (t.num_turns - 1, 13)):
        episode = env.restore(t, turn, seed=0)
        assert episode.last.observation == t.turns[turn].observation
        replayed = [episode.step(a) for a in actions[turn:]]
        assert [s.observation for s in replayed[:-1]] == [x.observation for x in t.turns[turn + 1 :]]
        assert replayed[-1].done and replayed[-1].success == t.success

        original = TextWorldEnv()
        step = original.reset(t.reset)
        for a in actions[:turn]:
            step = original.step(a)
        expected = go_on(original, step, policy, seed)
        original.close()
        restored = env.restore(t, turn, seed)
        assert go_on(restored.env, restored.last, policy, seed) == expected
        assert expected  # the continuation did something


def test_a_changed_observation_raises_replay_mismatch(cooking_game: GameFile) -> None:
    t = record(cooking_game, epsilon=0.3, seed=4)
    assert t.num_turns >= 4
    turns = list(t.turns)
    turns[2] = Turn(observation=turns[2].observation + " (edited)", action=turns[2].action)
    tampered = t.model_copy(update={"turns": tuple(turns)})
    with pytest.raises(ReplayMismatchError) as err:
        replay_env(max_steps=MAX_STEPS).restore(tampered, 3, seed=0)
    assert err.value.turn == 2
    replay_env(max_steps=MAX_STEPS).restore(tampered, 1, seed=0)


def test_replaying_in_another_game_raises_replay_mismatch(cooking_game: GameFile, textworld_cache: Path) -> None:
    other = make_cooking_game(4, cache_dir=textworld_cache, **GAME_SETTINGS)
    t = record(cooking_game, epsilon=0.0, seed=0)
    moved = t.model_copy(update={"reset": spec(other)})
    with pytest.raises(ReplayMismatchError) as err:
        replay_env(max_steps=MAX_STEPS).restore(moved, 2, seed=0)
    assert err.value.turn == 0
    missing = t.model_copy(update={"reset": {"max_steps": MAX_STEPS}})
    with pytest.raises(RestoreError, match="game_file"):
        replay_env().restore(missing, 1, seed=0)


def test_game_dir_keeps_a_reset_spec_from_naming_files_outside_it(cooking_game: GameFile, tmp_path: Path) -> None:
    """Issue 46: a reset spec comes from a trajectory; with ``game_dir`` its ``game_file`` must lie inside."""
    games = Path(cooking_game.path).parent
    env = TextWorldEnv(game_dir=games)
    assert "kitchen" in env.reset(spec(cooking_game)).observation.lower()
    outside = tmp_path / "elsewhere.z8"
    for path in (str(outside), str(games / ".." / games.name / ".." / "elsewhere.z8")):
        with pytest.raises(ValueError, match="not inside game_dir"):
            env.reset({"game_file": path})
    with pytest.raises(RestoreError, match="not inside game_dir"):
        replay_env(game_dir=tmp_path / "games").restore(record(cooking_game, 0.0, 1), 1, seed=0)
    twin = env.copy()  # a fork (what snapshot restorers make) keeps the restriction for its own later resets
    with pytest.raises(ValueError, match="not inside game_dir"):
        twin.reset({"game_file": str(outside)})
    twin.close()
    env.close()


@pytest.mark.parametrize("restorer", ["replay", "snapshot"])
def test_restorers_close_the_games_they_start(
    cooking_game: GameFile, restorer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restored game is closed when its episode ends; a snapshot's when the restorer is closed."""
    t = record(cooking_game, epsilon=0.3, seed=5)
    closed: list[Any] = []
    close = TextWorldEnv.close

    def counting(self: TextWorldEnv) -> None:
        if self.env is not None:
            closed.append(self.env)
        close(self)

    monkeypatch.setattr(TextWorldEnv, "close", counting)
    with replay_env(max_steps=MAX_STEPS) if restorer == "replay" else snapshot_env(max_steps=MAX_STEPS) as env:
        episode = env.restore(t, 2, seed=0)
        game = episode.env.env
        for turn in t.turns[2:]:
            assert not closed
            episode.step(turn.action)
        assert closed == [game] and episode.env.env is None
    assert len(closed) == (1 if restorer == "replay" else 2)  # the snapshot's game at the restorer's close
