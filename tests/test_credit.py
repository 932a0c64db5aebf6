import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prover_core import Segment, Trajectory, Turn
from prover_core.credit import action_mask, mask_runs, segment_bonus, spans_off_mask, spread_to_tokens
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


def test_mask_runs_by_hand() -> None:
    assert mask_runs([0, 1, 1, 0, 0, 1, 0, 1]) == [(1, 3), (5, 6), (7, 8)]
    assert mask_runs([1, 1]) == [(0, 2)] and mask_runs([0, 0]) == [] and mask_runs([]) == []
    assert mask_runs(np.array([0.0, 2.5, 1.0])) == [(1, 3)]
    with pytest.raises(ValueError, match="1-D"):
        mask_runs([[1, 0]])


@given(st.lists(st.booleans(), max_size=60))
def test_mask_runs_inverts_action_mask(bits: list[bool]) -> None:
    runs = mask_runs(bits)
    assert all(a < b for a, b in runs) and all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(runs))
    if runs:
        t = Trajectory(
            id="a",
            group_id="g",
            success=True,
            turns=[Turn(observation=i, action=i, token_span=s) for i, s in enumerate(runs)],
        )
        np.testing.assert_array_equal(action_mask(t, len(bits)), np.array(bits, dtype=bool))
    else:
        assert not any(bits)


def test_spans_off_mask_by_hand() -> None:
    """Trainable tokens in no span are named; an inclusive end is recognised by the uncovered token right after a
    span; masked tokens inside a span and a mask of all ones are fine."""
    mask = [1, 1, 0, 1, 1, 1, 0, 1]  # actions [0, 2), [3, 6), [7, 8)
    assert spans_off_mask([(0, 2), (3, 6), (7, 8)], mask) is None
    assert spans_off_mask([(0, 2), (3, 6), (6, 8)], mask) is None  # an observation token inside a span: masked
    inclusive = spans_off_mask([(0, 1), (3, 5), (7, 7)], mask)
    assert inclusive == (
        "3 trainable tokens lie in no turn's span (the first at position 1 right after a span ends: spans look "
        "inclusive (start, last); they are half-open [start, end), so pass (start, last + 1))"
    )
    assert spans_off_mask([(0, 2), (4, 6), (7, 8)], mask) == (
        "1 trainable tokens lie in no turn's span (the first at position 3)"
    )
    assert spans_off_mask([(0, 1)], [1, 1, 1]) is None  # all ones: the mask says nothing about turns
