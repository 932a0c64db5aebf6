"""``prover bench --only delta``: the lr search, pairing and the table (the figures come from the full run)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prover_bench.delta_training import (
    ARMS,
    QUICK_DELTA,
    Curve,
    best_lr,
    environments,
    markdown,
    run_delta,
    train_curve,
)
from prover_bench.tabular import compile_mdp, value_table
from prover_core.cli import main


def peaked(at: float) -> tuple[list[float], object]:
    """A run whose area under the curve is ``-(log lr - log at)^2``, recording the lrs it was asked for."""
    asked: list[float] = []

    def run(lr: float) -> Curve:
        asked.append(lr)
        return Curve(success=[[0.0, -((math.log(lr) - math.log(at)) ** 2)]], env_steps=[0])

    return asked, run


@pytest.mark.parametrize(
    ("at", "lr", "edge", "asked"),
    [
        (1.0, 1.0, False, [0.3, 1.0, 3.0]),  # inside the grid: no widening
        (5.0, 3.0, False, [0.3, 1.0, 3.0, 9.0]),  # 3 was on the edge; 9 is worse, so 3 is inside now
        (27.0, 9.0, True, [0.3, 1.0, 3.0, 9.0]),  # widened once, still on the edge: flagged
        (0.05, 0.1, True, [0.3, 1.0, 3.0, 0.1]),  # the same at the low end
    ],
)
def test_the_lr_search_widens_once_and_flags_an_edge(at: float, lr: float, edge: bool, asked: list[float]) -> None:
    calls, run = peaked(at)
    result = best_lr(run, (0.3, 1.0, 3.0))  # type: ignore[arg-type]
    assert (result.lr, result.edge) == pytest.approx((lr, edge))
    assert calls == pytest.approx(asked)


def test_every_arm_starts_from_the_exact_start_value_with_paired_seeds() -> None:
    env = next(e for e in environments() if e.name == "traps")
    c = compile_mdp(env.make())
    start = float(value_table(c, env.policy(c))[c.horizon, c.initial])
    curves = {arm: train_curve(env, arm, 1.0, QUICK_DELTA) for arm in ARMS[:3]}
    for curve in curves.values():
        assert [s[0] for s in curve.success] == [start] * QUICK_DELTA.seeds
        assert all(len(s) == QUICK_DELTA.steps + 1 for s in curve.success)
    # environment steps: GRPO's are its rollout turns, a ProVer arm's those plus its continuations' policy turns
    grpo, states = curves["GRPO"], curves["ProVer, Delta of states"]
    assert grpo.extra_turns == 0 and states.extra_turns > 0
    assert sum(grpo.env_steps) == grpo.rollout_turns
    assert sum(states.env_steps) == states.rollout_turns + states.extra_turns
    again = train_curve(env, "ProVer, Delta of choices", 1.0, QUICK_DELTA)
    assert again.success == curves["ProVer, Delta of choices"].success  # reproducible


def test_the_table_pairs_differences_by_seed() -> None:
    results = run_delta(QUICK_DELTA, say=lambda line: None)
    kinds = {e.name: e.kind for e in environments(QUICK_DELTA.only)}
    text = markdown(results, kinds, QUICK_DELTA)
    by_arm = results["traps"]
    a, b = by_arm["ProVer, Delta of choices"].curve.auc(), by_arm["ProVer, Delta of states"].curve.auc()
    d = np.subtract(a, b)
    half = 12.706 * np.std(d, ddof=1) / math.sqrt(2)  # t_{0.975, 1}
    assert f"{d.mean():+.3f} ± {half:.3f}" in text.split("| traps |")[1].split("\n")[0]
    assert "| luck | 1 |" in text and "| corridor | 1 |" in text


def test_the_command_writes_its_tables(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["bench", "--only", "delta", "--quick", "--out", str(tmp_path)]) == 0
    assert "choices - states" in (tmp_path / "delta.md").read_text()
    assert main(["bench", "--only", "delta,training", "--quick", "--out", str(tmp_path)]) == 2
