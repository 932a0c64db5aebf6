"""record_episode: what it records, and the episodes it refuses."""

import pytest

from prover_core import RolloutLimitError, Step
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.record import record_episode


def test_records_spans_info_and_the_outcome() -> None:
    t = record_episode(
        MDPEnv(VaultMDP()),
        vault_policy(),
        reset={"seed": 3},
        trajectory_id="a",
        group_id="g",
        seed=3,
        token_length=lambda x: len(str(x).split()),
        keep_info=("actions",),
    )
    first = t.turns[0]
    assert first.observation == "Room 1 of 7. You carry nothing." and first.info == {
        "actions": ("go east", "wait", "look around")
    }
    # [obs_0: 7 words][action_0]: the first action's span starts right after the first observation
    assert first.token_span is not None and first.token_span[0] == 7
    assert t.reset == {"seed": 3}
    assert t.success is (t.turns[-1].action == "open vault" and "brass key" in t.turns[-1].observation.split(". ")[-1])


def test_refuses_endless_and_empty_episodes() -> None:
    with pytest.raises(RolloutLimitError, match="within 5 turns"):
        record_episode(
            MDPEnv(VaultMDP(horizon=1000)),
            vault_policy({"go east": 1e-9, "wait": 1.0, "look around": 1.0, "take key": 1e-9, "open vault": 1e-9}),
            reset={},
            trajectory_id="a",
            group_id="g",
            seed=0,
            max_turns=5,
        )

    class OverAtOnce(MDPEnv):
        def reset(self, spec):  # type: ignore[no-untyped-def]
            return Step("The vault is already open.", done=True, success=True)

    with pytest.raises(RolloutLimitError, match="ended at reset"):
        record_episode(OverAtOnce(VaultMDP()), vault_policy(), reset={}, trajectory_id="a", group_id="g", seed=0)
