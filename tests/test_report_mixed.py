"""Every report metric on one mixed batch, against values worked out by hand (issue 55).

Gain-only batches cannot tell a metric that counts every group from one that counts the gain groups, nor a skip for
the budget from a skip for another reason. This batch has a gain group accepted, a gain group rejected, a drop group
accepted (negative credit), a control group, a group the judge declined, one whose judge raised, one whose restore
failed, one outside the trigger band, one left out by ``max_verified_groups``, one by ``lift_throttle``, one by the
turn cap's plan, one the cap's admission never started and one the cap cut short, all in ONE ``ProverRun`` step.

Continuations are exact: :class:`ScriptedEnv` replays the recorded turns (observations ``s0, s1, ...``) and then
ends every continuation from turn ``t`` of group ``g`` after ``SCRIPT[g][t] = (success, turns)`` policy turns,
whatever the seed, so every boundary's successes and every policy turn spent are known. The continuations run
here (env and policy, metered) and each runs to its end without yielding to the event loop (a synchronous
environment and policy), one after another in launch order: group by group in batch order, a group's pre
continuations before its post ones. ``curtail=False``: both boundaries run in full. ``k = 2``, ``lam = 1``,
``negative_lam = 0.25``, trajectories of 4 runs whose every turn has a 2-token span.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import pytest

from prover_core import Decline, Proposal, ProverConfig, ReplayEnv, Segment, SegmentRules, Trajectory
from prover_core.bonus import BonusResult
from prover_core.chance import Lift
from prover_core.protocols import Step
from prover_core.report import GroupRecord
from prover_core.run import ProverRun
from tests.conftest import make_trajectory

LENGTHS: dict[str, tuple[int, list[int]]] = {
    # group: (successes, turns of its 4 runs; the successes first)
    "gain": (1, [3, 3, 3, 3]),
    "drop": (3, [4, 4, 4, 4]),
    "ctrl": (1, [3, 3, 3, 3]),
    "rej": (1, [3, 3, 3, 3]),
    "declined": (1, [3, 3, 3, 3]),
    "judgeerr": (1, [3, 3, 3, 3]),
    "restore": (1, [3, 3, 3, 3]),
    "flat": (2, [6, 6, 6, 6]),
    "throttled": (1, [3, 3, 3, 3]),
    "capped-out": (1, [3, 3, 3, 3]),
    "planout": (1, [12, 12, 12, 12]),
    "notstarted": (1, [3, 3, 3, 11]),
    "cut": (1, [3, 3, 3, 3]),
}
"""Rollout turns: 9 groups x 12 + drop 16 + flat 24 + planout 48 + notstarted 20 = 216; 52 episodes; longest 12."""

SEGMENTS: dict[str, tuple[int, int]] = {
    "gain": (1, 1),
    "drop": (1, 2),  # on drop's (only) failed run: negative credit segments the longest failure
    "ctrl": (0, 1),  # a 3-turn run's only admissible 2-turn segment: the control draws it too
    "rej": (1, 1),
    "restore": (1, 1),
    "throttled": (1, 1),
    "capped-out": (1, 1),
    "planout": (1, 1),
    "notstarted": (1, 1),
    "cut": (1, 1),
}

SCRIPT: dict[str, dict[int, tuple[bool, int]]] = {
    # group: {start turn: (success, policy turns)} of every continuation from there
    "gain": {1: (False, 2), 2: (True, 1)},  # pre 0/2 (4 turns), post 2/2 (2 turns): Delta = +1
    "drop": {1: (True, 1), 3: (False, 1)},  # pre 2/2 (2), post 0/2 (2): Delta = -1
    "ctrl": {0: (True, 1), 2: (True, 1)},  # pre 2/2 (2), post 2/2 (2): Delta = 0, rejected
    "rej": {1: (True, 1), 2: (False, 1)},  # pre 2/2 (2), post 0/2 (2): Delta = -1, rejected (a gain)
    "restore": {1: (False, 2)},  # pre 0/2 (4); post: replaying to turn 2 raises (BROKEN)
    "cut": {1: (False, 8), 2: (True, 8)},  # 32 turns wanted; the cap leaves it 20 (CONFIG)
}
BROKEN = {"restore": 2}
"""Replaying a recorded action into this state raises (a restore failure)."""
BAD_CLOSE = {"restore"}
"""Groups whose environments raise in ``close()``."""


class ScriptedEnv:
    """Observations ``s0, s1, ...`` while the recorded actions replay; then the policy's ``go`` runs the scripted
    continuation from the turn it was restored to."""

    def __init__(self) -> None:
        self.task, self.t, self.went = "", 0, 0

    def reset(self, spec: Mapping[str, Any]) -> Step:
        self.task, self.t, self.went = spec["task"], 0, 0
        return Step(observation="s0")

    def reseed(self, seed: int) -> None:  # deterministic
        pass

    def step(self, action: Any) -> Step:
        if action != "go":  # a recorded action, replayed
            self.t += 1
            if self.t >= BROKEN.get(self.task, math.inf):
                raise RuntimeError(f"{self.task}: state s{self.t} cannot be reached again")
            return Step(observation=f"s{self.t}")
        self.went += 1
        success, turns = SCRIPT[self.task][self.t]
        return Step(observation="end", done=True, success=success) if self.went == turns else Step(observation="..")

    def close(self) -> None:
        if self.task in BAD_CLOSE:
            raise OSError(f"{self.task}: close failed")


class Go:
    def act(self, context: Any) -> str:
        return "go"


class ScriptedJudge:
    """The segment of ``SEGMENTS`` on the run it is shown; declines ``declined``; raises on ``judgeerr``."""

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        if success.group_id == "declined":
            return Decline(reason="nothing stands out")
        if success.group_id == "judgeerr":
            raise RuntimeError("the judge's server is down")
        start, end = SEGMENTS[success.group_id]
        return Proposal(segment=Segment(trajectory_id=success.id, start=start, end=end), rationale="scripted")


def batch() -> list[Trajectory]:
    runs = []
    for gid, (successes, lengths) in LENGTHS.items():
        for i, n in enumerate(lengths):
            t = make_trajectory(f"{gid}-{i}", gid, i < successes, [f"a{j}" for j in range(n)])
            runs.append(t.model_copy(update={"reset": {"task": gid, "member": i}}))
    return runs


SEED = 185806
CONFIG = ProverConfig(
    k=2,
    curtail=False,
    negative_credit=True,
    negative_lam=0.25,
    control_share=0.4,
    lift_throttle=True,
    max_verified_groups=11,
    max_extra_share=0.25,
    seed=SEED,
)
"""The turn cap: floor(0.25 x 216) = 54 policy turns. The plan (``budget_plan="batch"``) keeps the proposed groups
in batch order while their expected costs, k x (mean turns the group's runs had left after l + after r + 1), fit:
gain 2 x (2 + 1) = 6, drop 2 x (3 + 1) = 8, ctrl 2 x (3 + 1) = 8, rej 6, restore 6 (34 so far); planout
2 x (11 + 10) = 42 does not fit (76 > 54); notstarted 2 x (mean(2, 2, 2, 10) + mean(1, 1, 1, 9)) = 2 x (4 + 3) = 14
does (48); cut 6 does (54). Admission then reserves each kept group's cautious cost, k x (the most turns left after
l + after r + 1), while what is left covers it: gain 6, drop 8, ctrl 8, rej 6, restore 6 (20 left); notstarted
2 x (10 + 9) = 38 waits; cut 6 (14 left). Each group spends its own share first: gain 6 of its 6; drop, ctrl, rej
and restore 4 each; cut wants 4 x 8 = 32 turns and gets its 6 and the pool's 14: pre 8 + 8, then post 4 turns before
the cap stops it (``budget_turns`` 4), and the last post continuation is stopped before its first turn. Cut's pre
0/2 with no post outcome is not settled (post 1/2 would accept it, 0/2 reject it): skipped. Once every group has
ended, 54 - 42 spent = 12 turns are left, fewer than notstarted's 38: it is never started.

``SEED`` makes the seeded draws fall as built (asserted below): ctrl the one control, throttled the one gain group
the throttle leaves out (rate 0.4 / 0.6), capped-out the one eligible group ``max_verified_groups=11`` leaves out."""
PRIOR = Lift(1, 2, 1, 2)
"""The window before the step: lift 0, its interval holds 0, so the throttle keeps the judge's own groups at the
controls' rate 0.4 / 0.6."""


@cache
def step() -> BonusResult:
    run = ProverRun(ScriptedJudge(), CONFIG, env=ReplayEnv(ScriptedEnv), policy=Go())
    assert run.window is not None
    run.window.add(PRIOR)
    return run.step(batch())


def records() -> dict[str, GroupRecord]:
    return {g.group_id: g for g in step().report.groups}


def test_each_group_ends_where_the_batch_was_built_to_send_it() -> None:
    """The scenario itself, so that a metric's failure below is about the metric: each group's status, stage and
    why, and each verification's counts and policy turns."""
    r = records()
    expected = {
        "gain": ("accepted", "verify", "Delta = +1.000"),
        "drop": ("accepted", "verify", "drop (roles of pre and post swapped)"),
        "ctrl": ("rejected", "verify", "Delta = +0.000"),
        "rej": ("rejected", "verify", "Delta = -1.000"),
        "declined": ("declined", "propose", "nothing stands out"),
        "judgeerr": ("skipped", "propose", "JudgeError"),
        "restore": ("skipped", "verify", "too few finished continuations"),
        "flat": ("not_eligible", "trigger", "success rate 2/4"),
        "throttled": ("unverified", "trigger", "lift_throttle"),
        "capped-out": ("unverified", "trigger", "eligible, not verified: max_verified_groups=11"),
        "planout": ("unverified", "verify", "budget plan (batch): expected cost 42 turns"),
        "notstarted": ("unverified", "verify", "budget: not started, the cap's 12 turns left cannot cover the 38"),
        "cut": ("skipped", "verify", "budget: the turn budget stopped 0 pre and 2 post"),
    }
    assert {gid: (g.status, g.stage, g.reason[: len(expected[gid][2])]) for gid, g in r.items()} == expected
    assert [gid for gid, g in r.items() if g.control] == ["ctrl"]
    assert [gid for gid, g in r.items() if g.direction == "drop"] == ["drop"]
    # (pre successes, pre finished, post successes, post finished, failed, policy turns) of each verification
    counts = {
        gid: (v.pre_successes, v.pre_count, v.post_successes, v.post_count, v.failed_continuations, v.policy_turns)
        for gid, g in r.items()
        if (v := g.verification) is not None
    }
    assert counts == {
        "gain": (0, 2, 2, 2, 0, 6),  # pre 2 x 2 turns, post 2 x 1
        "drop": (2, 2, 0, 2, 0, 4),  # 2 x 1 + 2 x 1
        "ctrl": (2, 2, 2, 2, 0, 4),
        "rej": (2, 2, 0, 2, 0, 4),
        "restore": (0, 2, 0, 0, 2, 4),  # pre 2 x 2 turns; the 2 post continuations failed to restore
        "cut": (0, 2, 0, 0, 2, 20),  # pre 2 x 8 turns, then post 4 turns and 0 before the cap stopped them
    }
    stats = {gid: g.verify_stats for gid, g in r.items() if g.verify_stats is not None}
    assert {gid: s.failures for gid, s in stats.items() if s.failures} == {
        "restore": {"restore": 2},
        "cut": {"budget": 2},
    }
    assert {gid: s.budget_turns for gid, s in stats.items() if s.budget_turns} == {"cut": 4}


def _wilson(a: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson's score interval, written out again from its formula."""
    p = a / n
    centre, spread = 2 * n * p + z * z, z * math.sqrt(z * z + 4 * n * p * (1 - p))
    return (centre - spread) / (2 * (n + z * z)), (centre + spread) / (2 * (n + z * z))


def test_every_metric_by_hand() -> None:
    """Every metric the report logs (``time/*`` aside), each worked out by hand from the scenario above.

    Verified (a verification, decided or not): gain, drop, ctrl, rej, restore, cut; policy turns spent by them:
    gain 6 + drop 4 + ctrl 4 + rej 4 + restore 4 + cut 20 = 42. Accepted: gain (Delta +1 on 1 turn, lam 1: credit
    1 x 1 x 1 = 1) and drop (Delta -1 on 2 turns, negative_lam 0.25: credit 0.25 x |-1| x 2 = 0.5)."""
    # the lift: the window's prior (1 of 2, 1 of 2) + this step's judge (gain accepted, rej rejected: 1 of 2; the
    # skipped restore and cut were never decided) and control (ctrl rejected: 0 of 1) = judge 2/4, control 1/3
    (lj, uj), (lc, uc) = _wilson(2, 4), _wilson(1, 3)
    lift = 2 / 4 - 1 / 3
    expected = {
        "groups": 13,
        "groups_eligible": 12,  # inside either trigger band: every group but flat (2/4), drop's included
        "groups_unverified": 4,  # gain groups left out: throttled, capped-out, planout, notstarted
        "groups_proposed": 7,  # gain, ctrl, rej, restore, planout, notstarted, cut (declined, judgeerr: none)
        "groups_verified": 5,  # gain, ctrl, rej, restore, cut (drop: negative/*)
        "groups_accepted": 1,  # gain (drop's acceptance is negative credit)
        "groups_rejected": 2,  # ctrl, rej
        "groups_declined": 1,
        "groups_skipped": 3,  # judgeerr (judge), restore (restore), cut (budget)
        "acceptance_rate": 1 / 5,  # accepted gain / verified gain
        "continuations": 24,  # 4 launched by each of the 6 verifications (failed and stopped ones included)
        "continuations_failed": 4,  # restore's 2 post + cut's 2 post
        "continuations_saved_share": 0.0,  # 1 - 24 / (6 x 2K = 24): no curtailment
        "continuations_cancelled": 0,
        "verify_policy_rounds": 42,  # one continuation after another: every policy turn is a round of its own
        "rollout_policy_rounds": 12,  # planout's 12-turn runs
        "continuation_share": 24 / 52,  # continuations / rollout episodes (13 groups x 4)
        "policy_turns": 42,  # 6 + 4 + 4 + 4 + 4 + 20, drop's and the two skipped groups' included
        "extra_turn_share": 42 / 216,  # policy turns / rollout turns
        "mean_delta_accepted": 1.0,  # gain's +1 (drop's -1 is negative/*)
        "uncredited_turns": 0,
        # credit mass: gain-0 turn 1 (|1| x 2 tokens) + drop-3 turns 1, 2 (|-0.25| x 2 tokens x 2) = 2 + 1 = 3;
        # advantage mass, sum |r - mean| x tokens: 1-of-4 groups (A = 0.75, -0.25 x 3) of 3-turn runs:
        # 9 x (0.75 + 3 x 0.25) x 6 = 81; planout 1.5 x 24 = 36; notstarted 0.75 x 6 + 0.25 x (6 + 6 + 22) = 13;
        # drop (A = 0.25 x 3, -0.75) 1.5 x 8 = 12; flat 4 x 0.5 x 12 = 24: 81 + 36 + 13 + 12 + 24 = 166
        "credit_share": 3 / 166,
        "env_close_failures": 4,  # restore's 4 environments: 2 closed at their end, 2 when their replay failed
        "trigger_share": 12 / 13,  # 1 - not_eligible / groups
        "mean_segment_turns": 1.0,  # gain's segment [1, 1]
        "turn_budget": 54,  # floor(0.25 x 216)
        "groups_skipped_budget": 1,  # cut; judgeerr and restore were skipped for other reasons
        "budget_wasted_turns": 20,  # every turn of cut, cut short and undecided; no other group was stopped
        "credit_per_extra_turn": (1.0 + 0.5) / 42,  # |gain| + |drop| credit per policy turn
        "judge_lift": lift,
        "judge_lift_low": lift - math.hypot(2 / 4 - lj, uc - 1 / 3),  # Newcombe's hybrid score interval
        "judge_lift_high": lift + math.hypot(uj - 2 / 4, 1 / 3 - lc),
        "judge_accept_rate": 2 / 4,
        "control_accept_rate": 1 / 3,
        "judge_verified": 4,
        "control_verified": 3,
        "groups_control": 1,  # ctrl
        **{f"continuations_failed/{kind}": 0 for kind in ("turn_limit", "timeout", "worker_lost", "invalid_outcome")},
        "continuations_failed/restore": 2,
        "continuations_failed/budget": 2,
        "continuations_failed/error": 0,
        "negative/groups": 1,
        "negative/groups_verified": 1,
        "negative/groups_accepted": 1,
        "negative/mean_delta_accepted": -1.0,
        "batch_warnings/token_spans": 0,
        "batch_warnings/groups_of_one": 0,
        "batch_warnings/one_group": 0,
        "judge/propose_calls": 10,  # 12 eligible - capped-out - throttled (ctrl's judge is asked too)
    }
    m = step().report.metrics(prefix="")
    times = {k: m.pop(k) for k in [k for k in m if k.startswith("time/")]}
    assert sorted(times) == ["time/outside", "time/propose", "time/total", "time/verify"]
    assert all(v >= 0 for v in times.values())
    assert sorted(m) == sorted(expected)
    assert m == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert step().report.metrics()["prover/policy_turns"] == 42  # the default prefix


def test_the_reports_own_counts_and_credit_by_hand() -> None:
    """The report's properties beside ``metrics()``: the statuses, the skips, the lift of the step and of the
    window, each group's credit and the two masses of the credit share."""
    result = step()
    report = result.report
    assert report.summary() == {
        "not_eligible": 1, "unverified": 4, "declined": 1, "skipped": 3, "rejected": 2, "accepted": 2
    }  # fmt: skip
    assert report.count("skipped", "unverified") == 7
    assert [g.group_id for g in report.skips] == ["judgeerr", "restore", "cut"]
    assert len(report.verifications) == 6
    assert report.step_lift == Lift(1, 2, 0, 1)  # gain accepted, rej rejected; ctrl rejected
    assert report.lift == Lift(2, 4, 1, 3)  # the prior (1, 2, 1, 2) added
    assert report.rollout_turns == 216 and report.rollout_episodes == 52 and report.turn_budget == 54
    # credit = lam x |Delta| x segment turns: gain 1 x 1 x 1; drop 0.25 x 1 x 2, positive as a size
    assert {g.group_id: g.credit for g in report.groups if g.credit} == {"gain": 1.0, "drop": 0.5}
    bonus = {tid: b.tolist() for tid, b in result.turn_bonus.items() if b.any()}
    assert bonus == {"gain-0": [0.0, 1.0, 0.0], "drop-3": [0.0, -0.25, -0.25, 0.0]}
    assert (report.credit_mass, report.advantage_mass) == (3.0, 166.0)  # see test_every_metric_by_hand
