import numpy as np
import pytest

from prover_core import group_advantages, grpo_advantages
from tests.conftest import make_trajectory


def test_mean_centred_by_hand() -> None:
    # R = [1, 0, 0, 0]: mean 0.25 -> A = [0.75, -0.25, -0.25, -0.25]
    np.testing.assert_allclose(group_advantages([1, 0, 0, 0]), [0.75, -0.25, -0.25, -0.25])
    # R = [1, 1, 0, 0, 0, 0, 0, 0]: mean 0.25
    np.testing.assert_allclose(group_advantages([1, 1, 0, 0, 0, 0, 0, 0]), [0.75] * 2 + [-0.25] * 6)


def test_std_normalised_by_hand() -> None:
    # R = [1, 0, 0, 0]: sample std = sqrt(((0.75)^2 + 3 * 0.25^2) / 3) = sqrt(0.25) = 0.5
    got = group_advantages([1, 0, 0, 0], normalize_std=True, eps=0.0)
    np.testing.assert_allclose(got, [1.5, -0.5, -0.5, -0.5])
    # all equal: std 0, advantages 0 (eps keeps it finite)
    np.testing.assert_allclose(group_advantages([1, 1, 1], normalize_std=True), [0, 0, 0])


def test_single_member_group_has_zero_advantage() -> None:
    np.testing.assert_allclose(group_advantages([1]), [0.0])
    np.testing.assert_allclose(group_advantages([0], normalize_std=True), [0.0])


def test_rejects_empty_or_2d() -> None:
    with pytest.raises(ValueError):
        group_advantages([])
    with pytest.raises(ValueError):
        group_advantages([[1, 0]])


def test_grpo_by_group_id() -> None:
    groups = {
        "g": [make_trajectory("a", "g", True, ["x"]), make_trajectory("b", "g", False, ["x"])],
        "h": [make_trajectory("c", "h", False, ["x"])] * 1,
    }
    assert grpo_advantages(groups) == {"a": 0.5, "b": -0.5, "c": 0.0}
