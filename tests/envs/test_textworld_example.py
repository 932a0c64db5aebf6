"""The TextWorld example end to end: accepted segments land on key commands more than random segments."""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

from tests.conftest import load_script
from tests.envs.conftest import GAME_SETTINGS
from tests.hosts import require_host

require_host("textworld")

EXAMPLE = Path(__file__).parents[2] / "examples" / "textworld_credit.py"


def load_example() -> ModuleType:
    return load_script(EXAMPLE, "textworld_credit_example")


def test_accepted_segments_hold_key_commands_more_often_than_random_segments(textworld_cache: Path) -> None:
    """One game (the session's game 3), 6 groups of 8, K = 8, the rule judge; see docs/environments.md for
    the per-game figures (on 2 of 6 games the rule judge's accepted segments do no better than random)."""
    example = load_example()
    progress: list[str] = []
    summary, batch = example.run(
        games=1,
        first_game_seed=3,
        groups=6,
        k=8,
        judges=["divergence"],
        cache_dir=str(textworld_cache),
        game_settings=GAME_SETTINGS,
        progress=progress.append,
    )
    assert len(batch) == 48
    wins = sum(t.success for t in batch)
    assert progress[0].startswith(f"game 3 (1/1): 6 groups of 8 rolled out, {wins} won (")
    assert progress[1:] == ["divergence judge: propose, verify (K = 8) and credit 48 episodes ..."]
    wins = sum(t.success for t in batch)
    assert 0 < wins < 48  # the follower's groups are mixed
    accepted = summary.of("divergence", "accepted")
    assert len(summary.random_share) >= 3 and len(accepted) >= 2
    assert all(r.delta > 0 for r in accepted)
    assert not math.isnan(summary.random_key_share)
    assert summary.key_share("divergence", "accepted") > summary.random_key_share
    assert summary.key_rate("divergence", "accepted") > summary.random_key_rate
    text = example.report(summary, batch)
    game = summary.games[3]
    assert game.scoring and all(c in text for c in game.walkthrough)
    assert "uniformly random admissible segments" in text
    share = summary.extra_turns["divergence"]  # the cost: continuation policy turns over the batch's own
    assert share > 0
    assert f"extra policy turns {100 * share:.0f}% of the batch's" in text
