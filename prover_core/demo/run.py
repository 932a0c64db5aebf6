"""``prover demo``: the whole propose/verify/credit loop on the vault, next to the exact answer."""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass

from prover_core.bonus import BonusResult, compute_bonus
from prover_core.config import ProverConfig
from prover_core.data import Trajectory
from prover_core.demo._finite_mdp import MDPEnv, exact_success_probability
from prover_core.demo.vault import VaultBatchPolicy, VaultMDP, vault_policy
from prover_core.judges import make_judge
from prover_core.progress import ProgressFn
from prover_core.protocols import Judge
from prover_core.record import record_episode
from prover_core.report import Report
from prover_core.restore import SnapshotEnv
from prover_core.text import shorten

__all__ = [
    "DemoRun",
    "render",
    "render_skips",
    "rollout_batch",
    "run_demo",
    "skip_reasons",
    "states_along",
    "word_count",
]


def word_count(text: object) -> int:
    """A stand-in tokenizer: one token per word."""
    return len(str(text).split())


def rollout_batch(mdp: VaultMDP, groups: int, group_size: int, seed: int) -> list[Trajectory]:
    """``groups`` groups of ``group_size`` episodes of the vault policy (one task, different seeds)."""
    policy = vault_policy()
    return [
        record_episode(
            MDPEnv(mdp),
            policy,
            reset={"seed": seed * 100_003 + g * 101 + i},
            trajectory_id=f"g{g:02d}-{i}",
            group_id=f"g{g:02d}",
            seed=seed * 7_919 + g * 31 + i,
            token_length=word_count,
        )
        for g in range(groups)
        for i in range(group_size)
    ]


def states_along(mdp: VaultMDP, trajectory: Trajectory) -> list[Hashable]:
    """The MDP state before each turn of ``trajectory`` (by replaying it)."""
    env = MDPEnv(mdp)
    env.reset(trajectory.reset)
    states = []
    for turn in trajectory.turns:
        states.append(env.state)
        env.step(turn.action)
    return states


@dataclass(frozen=True)
class DemoRun:
    mdp: VaultMDP
    trajectories: list[Trajectory]
    result: BonusResult
    judge_name: str
    k: int = 4
    """Continuations per boundary."""

    def exact_values(self, trajectory: Trajectory) -> list[float]:
        """``V(s_t)`` before every turn, plus the terminal outcome after the last one."""
        value = exact_success_probability(self.mdp, vault_policy())
        states = states_along(self.mdp, trajectory)
        return [value(s, self.mdp.horizon - t) for t, s in enumerate(states)] + [float(trajectory.success)]


def run_demo(
    groups: int = 16,
    group_size: int = 8,
    k: int = 4,
    seed: int = 0,
    judge: str = "choice",
    custom_judge: Judge | None = None,
    progress: ProgressFn | None = None,
) -> DemoRun:
    """Roll out a batch of the vault, run compute_bonus on it with the judge registered as ``judge``
    (:mod:`prover_core.judges.registry`); ``custom_judge`` replaces the named one; ``progress`` as
    :func:`~prover_core.compute_bonus` takes it."""
    mdp = VaultMDP()
    trajectories = rollout_batch(mdp, groups, group_size, seed)
    named = make_judge(judge, seed)  # an unknown name raises ValueError
    chosen: Judge = custom_judge or named
    judge = "llm" if custom_judge is not None else judge
    result = compute_bonus(
        trajectories,
        judge=chosen,
        env=SnapshotEnv(lambda: MDPEnv(mdp)),
        policy=VaultBatchPolicy(),  # one act_batch call per round of continuations
        config=ProverConfig(k=k, seed=seed),
        progress=progress,
    )
    return DemoRun(mdp, trajectories, result, judge, k)


def skip_reasons(report: Report) -> list[tuple[str, int]]:
    """``(stage: reason, count)`` over the skipped groups, most frequent first (ties: by text)."""
    counts = Counter(" ".join(f"{g.stage}: {g.reason}".split()) for g in report.groups if g.status == "skipped")
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def render_skips(report: Report, shown: int = 5, width: int = 100) -> list[str]:
    """Lines saying why groups were skipped (each keeps its GRPO credit), wrapped at ``width``; empty
    when none was."""
    reasons = skip_reasons(report)
    if not reasons:
        return []
    lines = [f"Skipped groups, by reason (each keeps its GRPO credit): {report.count('skipped')}"]
    for reason, n in reasons[:shown]:
        lines += textwrap.wrap(f"{n} x {reason}", width, initial_indent="  ", subsequent_indent="      ")
    if len(reasons) > shown:
        lines.append(f"  ... {sum(n for _, n in reasons[shown:])} more with {len(reasons) - shown} other reasons")
    return lines


def render(run: DemoRun) -> str:
    """A readable account: the batch, one accepted group turn by turn, and how close Delta came."""
    r, mdp = run.result, run.mdp
    m = r.report.metrics(prefix="")
    lines = [
        f"prover demo: the vault ({mdp.rooms} rooms, key in room {mdp.key_room + 1}, {mdp.horizon}-turn limit), "
        f"{len(r.report.groups)} groups of {len(run.trajectories) // max(1, len(r.report.groups))}, "
        f"{run.judge_name} judge",
        "",
        "Groups: " + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in r.report.summary().items()),
        *textwrap.wrap(
            "(eligible: a success rate strictly between 0 and 0.5, the trigger; unverified: left out by "
            "max_verified_groups; declined: the judge saw no evidence; skipped: something failed; rejected or "
            "accepted: by Delta > 0)",
            100,
            initial_indent="  ",
            subsequent_indent="  ",
        ),
        f"Continuations: {m['continuations']:.0f} ({m['policy_turns']:.0f} policy turns, "
        f"{100 * m['extra_turn_share']:.1f}% of the batch's {r.report.rollout_turns} turns); "
        f"judge calls: {m['judge/propose_calls']:.0f}",
        f"Rounds of policy calls: verification {m['verify_policy_rounds']:.0f}, the rollout "
        f"{m['rollout_policy_rounds']:.0f} (act_batch: one call per round)",
        f"Credit share: {100 * m['credit_share']:.2f}% of the update (sum |bonus| / sum |GRPO A|, trainable tokens); "
        f"trigger share {m['trigger_share']:.2f}",
        *render_skips(r.report),
    ]
    errors = []
    for g in r.report.groups:
        measured = g.verification is not None and not g.verification.curtailed
        if g.status in ("accepted", "rejected") and measured and g.proposal and g.trajectory_id:
            v = run.exact_values(r.trajectories[g.trajectory_id])
            seg = g.proposal.segment
            errors.append((g, v[seg.end + 1] - v[seg.start]))
    shown = next((e for e in errors if e[0].status == "accepted"), errors[0] if errors else None)
    if shown is not None:
        g, exact = shown
        assert g.proposal and g.verification and g.trajectory_id
        traj, seg, ver = r.trajectories[g.trajectory_id], g.proposal.segment, g.verification
        values = run.exact_values(traj)
        lines += [
            "",
            f"Group {g.group_id}: {g.successes}/{g.size} succeeded; representative {traj.id} ({traj.num_turns} turns)",
            *textwrap.wrap(f"Judge: turns {seg.start}..{seg.end}: {g.proposal.rationale}", 100, subsequent_indent="  "),
            f"Verify: pre {ver.pre_successes}/{ver.pre_count}, post {ver.post_successes}/{ver.post_count}, "
            f"{ver.delta_text} (exact V(s_post) - V(s_pre) = {exact:+.3f}) -> {g.status}",
            "",
            "V(s_t): the exact probability that the current policy wins from the state before turn t; "
            "< marks the segment",
            f"{'turn':>4}  {'observation':<58} {'action':<12} {'GRPO A':>7} {'bonus':>7} {'A+bonus':>8} {'V(s_t)':>7}",
        ]
        adv = r.turn_advantages(traj.id)
        for t, turn in enumerate(traj.turns):
            mark = " <" if seg.start <= t <= seg.end else ""
            lines.append(
                f"{t:>4}  {shorten(turn.observation, 58):<58} {shorten(turn.action, 12):<12} "
                f"{r.advantages[traj.id]:>+7.3f} {r.turn_bonus[traj.id][t]:>7.3f} {adv[t]:>+8.3f} "
                f"{values[t]:>7.3f}{mark}"
            )
    if errors:
        mae = sum(abs((g.verification.delta if g.verification else 0.0) - ex) for g, ex in errors) / len(errors)
        curtailed = sum(g.verification is not None and g.verification.curtailed for g in r.report.groups)
        left_out = f"; {curtailed} curtailed, not measured" if curtailed else ""
        lines += [
            "",
            f"Across {len(errors)} verified groups: mean |Delta - exact| = {mae:.3f}, the Monte Carlo error of "
            f"K = {run.k} continuations per boundary{left_out}",
        ]
    lines.append("Every other turn and trajectory keeps its GRPO advantage; tokens get A+bonus on action spans only.")
    return "\n".join(lines)
