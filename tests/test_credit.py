import numpy as np
import pytest

from prover_core import Segment, Trajectory, Turn
from prover_core.credit import action_mask, segment_bonus, spread_to_tokens
from tests.conftest import make_trajectory


def test_segment_bonus_by_hand() -> None:
    seg = Segment(trajectory_id="a", start=1, end=2)
    np.testing.assert_allclose(segment_bonus(5, seg, delta=0.375, lam=2.0), [0, 0.75, 0.75, 0, 0])
    with pytest.raises(ValueError):
        segment_bonus(2, seg, 0.5)


def test_spread_to_tokens_places_values_on_spans_only() -> None:
    t = make_trajectory("a", "g", True, ["x", "y", "z"], span_width=2, gap=3)  # spans (3,5) (8,10) (13,15)
    got = spread_to_tokens(t, np.array([1.0, 2.0, 3.0]), 16)
    want = np.zeros(16)
    want[3:5], want[8:10], want[13:15] = 1.0, 2.0, 3.0
    np.testing.assert_array_equal(got, want)
    assert action_mask(t, 16).sum() == 6


def test_spread_refuses_to_drop_credit() -> None:
    t = Trajectory(
        id="a",
        group_id="g",
        success=True,
        turns=[Turn(observation="o", action="x"), Turn(observation="p", action="y", token_span=(0, 2))],
    )
    np.testing.assert_array_equal(spread_to_tokens(t, np.array([0.0, 1.0]), 3), [1, 1, 0])
    with pytest.raises(ValueError, match="no token_span"):
        spread_to_tokens(t, np.array([1.0, 0.0]), 3)
    with pytest.raises(ValueError, match="does not fit"):
        spread_to_tokens(t, np.array([0.0, 1.0]), 1)
    with pytest.raises(ValueError, match="per-turn values"):
        spread_to_tokens(t, np.array([1.0]), 3)
    np.testing.assert_array_equal(action_mask(t, 3), [True, True, False])
