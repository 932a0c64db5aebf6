"""Invariants of compute_bonus over random batches (hypothesis)."""

import zlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prover_core import ProverConfig, RandomJudge, compute_bonus, grpo_advantages
from prover_core.bonus import group_batch
from prover_core.trigger import representative
from tests.conftest import make_trajectory


@st.composite
def batches(draw):  # type: ignore[no-untyped-def]
    trajs = []
    for g in range(draw(st.integers(1, 4))):
        size = draw(st.integers(1, 6))
        for i in range(size):
            n = draw(st.integers(1, 7))
            trajs.append(make_trajectory(f"g{g}-{i}", f"g{g}", draw(st.booleans()), [f"a{j}" for j in range(n)]))
    return trajs


def hashed_continuer(p_scale: float):  # type: ignore[no-untyped-def]
    def go(trajectory, turn, seed):  # type: ignore[no-untyped-def]
        p = min(1.0, p_scale * (turn + 1) / trajectory.num_turns)
        return bool(np.random.default_rng([seed, zlib.crc32(trajectory.id.encode()), turn]).random() < p)

    return go


@settings(max_examples=60, deadline=None)
@given(batches(), st.floats(0.0, 2.0), st.floats(0.1, 1.5), st.integers(1, 6), st.booleans())
def test_bonus_only_on_accepted_segments_of_representatives(trajs, lam, p_scale, k, normalize) -> None:  # type: ignore[no-untyped-def]
    config = ProverConfig(k=k, lam=lam, normalize_std=normalize)
    r = compute_bonus(trajs, judge=RandomJudge(3), continue_from=hashed_continuer(p_scale), config=config)
    groups = group_batch(trajs)
    assert r.advantages == grpo_advantages(groups, normalize_std=normalize, eps=config.std_eps)
    credited = {}
    for rec in r.report.groups:
        members = groups[rec.group_id]
        if rec.status == "accepted":
            assert rec.proposal is not None and rec.verification is not None
            assert rec.trajectory_id == representative(members).id
            assert rec.verification.delta > 0
            credited[rec.trajectory_id] = (rec.proposal.segment, rec.verification.delta)
        if rec.status == "not_eligible":
            assert not 0 < rec.successes / rec.size < 0.5
    for t in trajs:
        bonus = r.turn_bonus[t.id]
        if t.id not in credited:
            assert not bonus.any()
            assert not r.token_bonus(t.id, 64).any()
            continue
        seg, delta = credited[t.id]
        expect = np.zeros(t.num_turns)
        expect[seg.start : seg.end + 1] = lam * delta
        np.testing.assert_allclose(bonus, expect)
        tokens = r.token_bonus(t.id, 64)
        inside = np.zeros(64, dtype=bool)
        for turn in t.turns[seg.start : seg.end + 1]:
            assert turn.token_span is not None
            inside[turn.token_span[0] : turn.token_span[1]] = True
        assert not tokens[~inside].any()
        np.testing.assert_allclose(tokens[inside], lam * delta)
