import pytest

from prover_core.trigger import capped, is_eligible, representative, success_rate
from tests.conftest import make_trajectory


@pytest.mark.parametrize(
    "successes, size, eligible",
    [
        (0, 8, False),
        (1, 8, True),
        (3, 8, True),
        (4, 8, False),
        (8, 8, False),
        (1, 2, False),
        (1, 3, True),
        (2, 4, False),
    ],
)
def test_trigger_is_strictly_inside_zero_half(successes: int, size: int, eligible: bool) -> None:
    group = [make_trajectory(f"t{i}", "g", i < successes, ["a"]) for i in range(size)]
    assert success_rate(group) == successes / size
    assert is_eligible(success_rate(group)) is eligible


def test_trigger_bounds_are_configurable() -> None:
    assert is_eligible(0.5, 0.0, 0.75)
    assert not is_eligible(0.75, 0.0, 0.75)
    assert not is_eligible(0.25, 0.25, 0.75)


def test_representative_is_shortest_success_with_id_tie_break() -> None:
    group = [
        make_trajectory("b", "g", True, ["a", "b", "c"]),
        make_trajectory("z", "g", True, ["a", "b"]),
        make_trajectory("c", "g", True, ["a", "b"]),
        make_trajectory("a", "g", False, ["a"]),
    ]
    assert representative(group).id == "c"
    assert representative(list(reversed(group))).id == "c"  # independent of batch order
    with pytest.raises(ValueError):
        representative([make_trajectory("a", "g", False, ["a"])])


def test_capped_keeps_a_uniform_random_subset_whatever_the_order() -> None:
    ids = ["a", "b", "c", "d"]
    assert capped(ids, None) == (ids, []) and capped(ids, 4) == (ids, []) and capped(ids, 9) == (ids, [])
    assert capped(ids, 0) == ([], ids)
    counts: dict[tuple[str, ...], int] = {}
    for seed in range(6000):
        kept, left = capped(ids, 2, seed)
        assert len(kept) == 2 and sorted(kept + left) == ids and kept == sorted(kept)  # input order kept
        assert set(capped(ids[::-1], 2, seed)[0]) == set(kept)  # the order of the ids does not matter
        counts[tuple(kept)] = counts.get(tuple(kept), 0) + 1
    assert len(counts) == 6  # every pair of 4 ...
    assert all(abs(n / 6000 - 1 / 6) < 0.02 for n in counts.values())  # ... equally often (sd of a share: 0.005)
