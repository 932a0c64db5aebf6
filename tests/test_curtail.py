"""Curtailed fixed-K verification: the same decisions and bonuses, fewer continuations.

``ProverConfig(curtail=True)`` runs the boundary acceptance needs higher first and skips the other one when no
outcome of it could be accepted. That is only sound if every rule's best case for the skipped boundary is
``0`` successes of ``K``; checked exhaustively here, then end to end against the uncurtailed run.
"""

import asyncio
import itertools
import math

import numpy as np
import pytest

from prover_core import Outcome, ProverConfig, Segment, SnapshotEnv, compute_bonus
from prover_core.acceptance import AcceptanceRule
from prover_core.continuations import hook_continuer
from prover_core.curtail import curtailed_cost, hopeless
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.demo.run import rollout_batch
from prover_core.judges import AnchorJudge, ChoiceJudge, RandomJudge
from prover_core.progress import Progress, format_progress
from prover_core.verify import verify_segment_detailed
from prover_core.view import credit_view, render_credit
from tests.conftest import make_trajectory

RULES = [
    ProverConfig(),
    ProverConfig(acceptance="beta_posterior"),
    ProverConfig(acceptance="beta_posterior", posterior_threshold=0.6),
    ProverConfig(acceptance="lower_confidence_bound"),
    ProverConfig(acceptance="lower_confidence_bound", lcb_alpha=0.4),
]


@pytest.mark.parametrize("rule", RULES, ids=lambda c: f"{c.acceptance}")
@pytest.mark.parametrize("direction", ["gain", "drop"])
def test_the_skipped_boundarys_best_case_is_zero_of_k(rule: ProverConfig, direction: str) -> None:
    """Exhaustive: whenever some outcome of the second boundary is accepted, 0/K is, so `hopeless` never lies."""
    for k in range(1, 9):
        accepts = rule.stages.verify.rule.accept
        for n1, n2 in itertools.product(range(1, k + 1), repeat=2):
            for y, x in itertools.product(range(n1 + 1), range(n2 + 1)):
                # gain: first = post (y of n1), second = pre (x of n2); drop: first = pre, second = post
                args = (x, n2, y, n1) if direction == "gain" else (y, n1, x, n2)
                if accepts(*args, direction)[0]:  # type: ignore[arg-type]
                    assert not hopeless(y, n1, k, rule.stages.verify.rule, direction), (k, n1, n2, x, y)  # type: ignore[arg-type]


def test_hopeless_by_hand() -> None:
    paper = AcceptanceRule()
    assert hopeless(0, 4, 4, paper) and not hopeless(1, 4, 4, paper)  # Delta > 0 needs post > 0 when pre is 0/4
    assert hopeless(4, 4, 4, paper, "drop") is False and hopeless(0, 4, 4, paper, "drop")  # a drop needs pre > 0
    beta = AcceptanceRule("beta_posterior")
    # P(p_post > p_pre) for post 1/4 against pre 0/4 under Beta(1,1) priors: Beta(2,4) vs Beta(1,5) = 0.738 < 0.9
    assert hopeless(1, 4, 4, beta) and not hopeless(2, 4, 4, beta)
    # the best case is the second boundary's K (not the first's count): post 1/2 against pre 0/4 is accepted
    assert not hopeless(1, 2, 4, paper) and hopeless(0, 2, 4, paper)


class Counting:
    """A continuation hook: success iff u < p(turn), u from the seed only; counts calls by turn."""

    def __init__(self, p_by_turn: dict[int, float], fail_at: int | None = None) -> None:
        self.p, self.fail_at, self.calls = p_by_turn, fail_at, dict.fromkeys(p_by_turn, 0)

    def __call__(self, trajectory, turn, seed):  # type: ignore[no-untyped-def]
        self.calls[turn] += 1
        if turn == self.fail_at:
            raise RuntimeError("engine died")
        return Outcome(success=bool(np.random.default_rng(seed).random() < self.p[turn]), turns=2)


def run(p_by_turn: dict[int, float], config: ProverConfig, direction: str = "gain", fail_at: int | None = None):  # type: ignore[no-untyped-def]
    traj = make_trajectory("a", "g", direction == "gain", list("abcdef"))
    hook = Counting(p_by_turn, fail_at)
    ver, stats = asyncio.run(
        verify_segment_detailed(
            traj,
            Segment(trajectory_id="a", start=1, end=2),
            hook_continuer(hook),
            config.stages.verify,
            None,
            direction,
        )  # type: ignore[arg-type]
    )
    return ver, stats, hook.calls


MODES = ["overlap", "wait"]


@pytest.mark.parametrize("mode", MODES)
def test_a_hopeless_post_boundary_skips_the_pre_continuations(mode: str) -> None:
    """A hook that answers at once: in either mode the post outcomes settle it before any pre continuation starts."""
    ver, stats, calls = run({1: 0.5, 3: 0.0}, ProverConfig(k=4, curtail=True, curtail_mode=mode))  # type: ignore[arg-type]
    assert calls == {1: 0, 3: 4}  # post 0/4: Delta <= 0 whatever pre does; pre never ran
    assert ver.curtailed and not ver.accepted and not ver.incomplete
    assert (ver.pre_count, ver.post_successes, ver.post_count, ver.policy_turns) == (0, 0, 4, 8)
    assert math.isnan(ver.delta) and ver.delta_text == "Delta not measured (curtailed)"
    assert "curtailed: post 0/4" in ver.reason and "Delta = +0.000 <= 0" in ver.reason
    assert (stats.stop, stats.spent, stats.rounds, stats.fixed_budget) == ("curtailed", 4, 1, 8)


@pytest.mark.parametrize("mode", MODES)
def test_a_hopeful_post_boundary_runs_both_and_matches_the_uncurtailed_run(mode: str) -> None:
    """A continue_from hook cannot be stopped, so in either mode its pre boundary runs after post (tests/test_overlap.py
    has the overlap schedule with a policy)."""
    rounds = 2
    p = {1: 0.3, 3: 0.8}
    ver, stats, calls = run(p, ProverConfig(k=6, seed=2, curtail=True, curtail_mode=mode))  # type: ignore[arg-type]
    plain, plain_stats, _ = run(p, ProverConfig(k=6, seed=2, curtail=False))
    assert calls == {1: 6, 3: 6} and not ver.curtailed
    assert ver == plain and ver.post_successes > 0  # same seeds, same outcomes, same decision
    assert (stats.stop, stats.spent, stats.rounds, stats.cancelled) == ("fixed", 12, rounds, 0)
    assert plain_stats.rounds == 1


@pytest.mark.parametrize("mode", MODES)
def test_drops_run_the_pre_boundary_first(mode: str) -> None:
    config = ProverConfig(k=4, curtail=True, curtail_mode=mode)  # type: ignore[arg-type]
    ver, stats, calls = run({1: 0.0, 3: 0.7}, config, direction="drop")
    assert calls == {1: 4, 3: 0} and ver.curtailed and not ver.accepted and stats.stop == "curtailed"
    assert "curtailed: pre 0/4" in ver.reason and "the 4 post continuations were not run" in ver.reason


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_first_boundary_is_incomplete_and_the_second_never_runs(mode: str) -> None:
    config = ProverConfig(k=4, curtail=True, curtail_mode=mode)  # type: ignore[arg-type]
    ver, stats, calls = run({1: 0.5, 3: 0.5}, config, fail_at=3)
    assert calls == {1: 0, 3: 4} and ver.incomplete and not ver.curtailed and not ver.accepted
    assert "(pre not run, post 0/4, need 4)" in ver.reason and "engine died" in ver.reason
    assert (stats.stop, stats.failures) == ("incomplete", {"error": 4})


def test_the_terminal_post_boundary_is_free_and_the_pre_boundary_runs() -> None:
    traj = make_trajectory("a", "g", True, list("abcd"))
    hook = Counting({3: 0.0})
    ver, stats = asyncio.run(
        verify_segment_detailed(
            traj,
            Segment(trajectory_id="a", start=3, end=3),
            hook_continuer(hook),
            ProverConfig(k=4, curtail=True).stages.verify,
        )
    )
    assert (ver.post_successes, ver.pre_count, ver.delta, ver.accepted) == (4, 4, 1.0, True)
    assert hook.calls == {3: 4} and stats.spent == 4


@pytest.mark.parametrize(
    "update",
    [
        {},
        {"acceptance": "beta_posterior"},
        {"acceptance": "lower_confidence_bound", "k": 6},
        {"negative_credit": True},
        {"delta_of": "choices"},
        {"paired_seeds": False, "k": 3},
    ],
    ids=["paper", "beta", "lcb", "negative", "choices", "unpaired"],
)
def test_curtailment_keeps_every_decision_and_bonus_on_the_vault(update: dict[str, object]) -> None:
    """End to end on the demo MDP with three judges, both curtailment modes against none: identical statuses,
    Deltas and advantages; fewer continuations and policy turns, ``wait`` fewest."""
    mdp = VaultMDP()
    env = SnapshotEnv(lambda: MDPEnv(mdp))
    saved = dict.fromkeys(MODES, 0.0)
    for seed, judge in itertools.product(range(3), [ChoiceJudge(), AnchorJudge(), RandomJudge(7)]):
        batch = rollout_batch(mdp, 12, 8, seed)
        out = {}
        for mode in ("off", *MODES):
            schedule = "wait" if mode == "wait" else "overlap"
            config = ProverConfig(seed=seed, curtail=mode != "off", curtail_mode=schedule, **update)  # type: ignore[arg-type]
            out[mode] = compute_bonus(batch, judge=judge, env=env, policy=vault_policy(), config=config)
        plain = out["off"]
        for mode in MODES:
            cut = out[mode]
            assert [g.status for g in plain.report.groups] == [g.status for g in cut.report.groups]
            for a, b in zip(plain.report.groups, cut.report.groups, strict=True):
                if b.verification is not None and b.verification.curtailed:
                    assert a.verification is not None and a.status == "rejected"
                elif b.verification is not None:
                    assert a.verification == b.verification  # same seeds: the same outcomes, the same Delta
            for tid in plain.trajectories:
                np.testing.assert_array_equal(plain.turn_advantages(tid), cut.turn_advantages(tid))
        cost = {mode: r.report.metrics(prefix="") for mode, r in out.items()}
        for key in ("continuations", "policy_turns"):
            assert cost["wait"][key] <= cost["overlap"][key] <= cost["off"][key]
        for mode in MODES:
            saved[mode] += cost["off"]["policy_turns"] - cost[mode]["policy_turns"]
    assert saved["wait"] > 0 and saved["overlap"] > 0  # each setting has rejected groups that curtailment spared


@pytest.mark.parametrize("p_post", [0.0, 0.1, 0.3, 0.6, 1.0])
def test_the_expected_cost_is_exact_and_the_pipeline_spends_it(p_post: float) -> None:
    """Closed form under the paper's rule, then the mean spend of 400 verifications within 4 standard errors."""
    config = ProverConfig(k=4, curtail=True)
    assert curtailed_cost(p_post, config.k, config.stages.verify.rule) == pytest.approx(4 * (2 - (1 - p_post) ** 4))
    spent = [run({1: 0.2, 3: p_post}, config.model_copy(update={"seed": s}))[1].spent for s in range(400)]
    skip = (1 - p_post) ** 4  # spend is 4 or 8: 4 more with probability 1 - skip
    se = 4 * math.sqrt(skip * (1 - skip) / len(spent))
    assert abs(np.mean(spent) - curtailed_cost(p_post, config.k, config.stages.verify.rule)) <= 4 * se + 1e-12


def test_a_curtailed_group_reads_as_not_measured_in_the_log_and_the_credit_view() -> None:
    """No NaN reaches a reader: the progress line and the credit view name the curtailment instead."""
    mdp = VaultMDP()
    env = SnapshotEnv(lambda: MDPEnv(mdp))
    result = None
    for seed in range(10):  # a batch in which the random judge's segment is curtailed
        result = compute_bonus(
            rollout_batch(mdp, 12, 8, seed), judge=RandomJudge(seed), env=env, policy=vault_policy(),
            config=ProverConfig(seed=seed),
        )  # fmt: skip
        if any(g.verification is not None and g.verification.curtailed for g in result.report.groups):
            break
    assert result is not None
    group = next(g for g in result.report.groups if g.verification is not None and g.verification.curtailed)
    line = format_progress(Progress(1, 1, group, 0.5))
    assert f"group {group.group_id} rejected (Delta not measured (curtailed))" in line and "nan" not in line
    assert group.trajectory_id is not None
    (view,) = credit_view(result, [group.trajectory_id])
    assert all(row.delta is None for row in view.turns)
    text = render_credit(result, [group.trajectory_id])
    assert "Delta not measured (curtailed): curtailed: post 0/4" in text and "nan" not in text
