"""Look at the credit of a batch: per trajectory, every turn's observation, action, GRPO advantage,
bonus and ``Delta``, with the judge's evidence for the segment and the verification's counts.

:func:`credit_view` returns the rows as data, :func:`render_credit` as text (lines of at most
``width`` characters, observations cut at word boundaries), and :func:`plot_credit` as a matplotlib
figure that a training log can store (matplotlib is optional: ``pip install matplotlib``; it is never
imported unless :func:`plot_credit` is called).

For a turn ``t`` of trajectory ``i``: ``advantage`` is ``A_GRPO(i)``, ``bonus`` is the bonus
``result.turn_bonus[i][t]`` (``lam * Delta`` on the turns of an accepted segment, 0 elsewhere) and
``delta`` is the group's verified ``Delta`` on the turns of the verified segment (accepted or not),
``None`` elsewhere. The trainable tokens of turn ``t`` get ``advantage + bonus``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prover_core.bonus import BonusResult
from prover_core.errors import HostImportError
from prover_core.report import GroupRecord
from prover_core.text import shorten

__all__ = ["TrajectoryCredit", "TurnCredit", "credit_view", "plot_credit", "render_credit"]


@dataclass(frozen=True)
class TurnCredit:
    """One turn of a trajectory with its credit."""

    turn: int
    observation: Any
    action: Any
    advantage: float
    """``A_GRPO`` of the trajectory (the same on every turn)."""
    bonus: float
    """The ProVer bonus on this turn (``lam * Delta`` inside an accepted segment, else 0)."""
    delta: float | None
    """The verified ``Delta`` on the turns of the verified segment, else ``None`` (also when curtailed)."""
    in_segment: bool
    """The turn lies in the segment the judge proposed."""

    @property
    def total(self) -> float:
        """``A_GRPO + bonus``: what the turn's trainable tokens get."""
        return self.advantage + self.bonus


@dataclass(frozen=True)
class TrajectoryCredit:
    """One trajectory: its group's path through the method, and its turns."""

    trajectory_id: str
    group: GroupRecord
    success: bool
    verified_run: bool
    """This is the run the judge segmented and the continuations verified."""
    turns: tuple[TurnCredit, ...]

    @property
    def evidence(self) -> str:
        """The judge's rationale for its segment, or why the group got no bonus."""
        g = self.group
        if g.proposal is not None and g.proposal.rationale:
            return g.proposal.rationale
        return g.reason


def credit_view(result: BonusResult, trajectory_ids: Sequence[str] | None = None) -> list[TrajectoryCredit]:
    """The credit of ``trajectory_ids`` (default: the verified run of every group the judge proposed a
    segment for, in batch order). Raises ``KeyError`` for an id not in the batch."""
    by_group = {g.group_id: g for g in result.report.groups}
    if trajectory_ids is None:
        trajectory_ids = [g.trajectory_id for g in result.report.groups if g.proposal is not None and g.trajectory_id]
    out = []
    for tid in trajectory_ids:
        if tid not in result.trajectories:
            raise KeyError(f"trajectory {tid!r} is not in this batch")
        traj = result.trajectories[tid]
        group = by_group[traj.group_id]
        verified_run = group.trajectory_id == tid and group.proposal is not None
        segment = group.proposal.segment if verified_run and group.proposal is not None else None
        verification = group.verification if verified_run else None
        delta = verification.delta if verification is not None and not verification.curtailed else None
        rows = []
        for t, turn in enumerate(traj.turns):
            inside = segment is not None and segment.start <= t <= segment.end
            rows.append(
                TurnCredit(
                    turn=t,
                    observation=turn.observation,
                    action=turn.action,
                    advantage=float(result.advantages[tid]),
                    bonus=float(result.turn_bonus[tid][t]),
                    delta=delta if inside else None,
                    in_segment=inside,
                )
            )
        out.append(TrajectoryCredit(tid, group, traj.success, verified_run, tuple(rows)))
    return out


def _heading(view: TrajectoryCredit, width: int) -> list[str]:
    g = view.group
    outcome = "succeeded" if view.success else "failed"
    lines = [
        shorten(
            f"{view.trajectory_id}: {outcome}, {len(view.turns)} turns; group {g.group_id} "
            f"({g.successes}/{g.size} succeeded): {g.status.replace('_', ' ')}",
            width,
        )
    ]
    if view.verified_run and g.proposal is not None:
        seg = g.proposal.segment
        lines.append(f"  judge: turns {seg.start}..{seg.end}")
    if view.evidence:
        label = "  evidence: " if view.verified_run and g.proposal is not None else "  reason: "
        lines += textwrap.wrap(view.evidence, width, initial_indent=label, subsequent_indent="    ")
    v = g.verification
    if view.verified_run and v is not None:
        verdict = "accepted" if v.accepted else v.reason or "rejected"
        lines.append(
            "  "
            + shorten(
                f"verify: pre {v.pre_successes}/{v.pre_count}, post {v.post_successes}/{v.post_count}, "
                f"{v.delta_text}: {verdict}",
                width - 2,
            )
        )
    return lines


def render_credit(
    result: BonusResult, trajectory_ids: Sequence[str] | None = None, *, width: int = 100, action_width: int = 16
) -> str:
    """:func:`credit_view` as text: per trajectory a heading (outcome, group status, the judge's evidence,
    the verification), then a table of its turns; ``<`` marks the proposed segment. No line is longer
    than ``width`` (at least 60)."""
    if width < 60:
        raise ValueError(f"width must be at least 60, got {width}")
    # indent(2) turn(4) 1 observation 1 action 1 A(7) 1 bonus(7) 1 A+bonus(8) 1 Delta(7) mark(2)
    obs_width = width - (2 + 4 + 1 + 1 + action_width + 1 + 7 + 1 + 7 + 1 + 8 + 1 + 7 + 2)
    blocks = []
    for view in credit_view(result, trajectory_ids):
        lines = _heading(view, width)
        lines.append(
            f"  {'turn':>4} {'observation':<{obs_width}} {'action':<{action_width}} {'GRPO A':>7} {'bonus':>7} "
            f"{'A+bonus':>8} {'Delta':>7}"
        )
        for row in view.turns:
            delta = f"{row.delta:+7.3f}" if row.delta is not None else ""
            lines.append(
                f"  {row.turn:>4} {shorten(row.observation, obs_width):<{obs_width}} "
                f"{shorten(row.action, action_width):<{action_width}} {row.advantage:>+7.3f} {row.bonus:>7.3f} "
                f"{row.total:>+8.3f} {delta:>7}{' <' if row.in_segment else ''}".rstrip()
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def plot_credit(result: BonusResult, trajectory_id: str, path: str | Path | None = None) -> Any:
    """A bar chart of one trajectory's credit per turn (GRPO advantage, bonus on top, the proposed
    segment shaded), returned as a ``matplotlib.figure.Figure`` and saved to ``path`` if given (the
    format follows the suffix, e.g. ``.png``). Needs matplotlib (:class:`HostImportError` without it)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise HostImportError("plot_credit needs matplotlib: pip install matplotlib") from exc
    (view,) = credit_view(result, [trajectory_id])
    turns = [row.turn for row in view.turns]
    fig = Figure(figsize=(max(6.0, 0.35 * len(turns) + 2), 3.6), layout="constrained")
    ax = fig.subplots()
    ax.bar(turns, [row.advantage for row in view.turns], color="#9aa5b1", label="GRPO advantage")
    ax.bar(
        turns,
        [row.bonus for row in view.turns],
        bottom=[row.advantage for row in view.turns],
        color="#e8871e",
        label="ProVer bonus",
    )
    inside = [row.turn for row in view.turns if row.in_segment]
    if inside:
        ax.axvspan(min(inside) - 0.5, max(inside) + 0.5, color="#e8871e", alpha=0.12, label="proposed segment")
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_xlabel("turn")
    ax.set_ylabel("advantage")
    g, v = view.group, view.group.verification
    found = f", {v.delta_text}" if view.verified_run and v is not None else ""
    ax.set_title(shorten(f"{trajectory_id} (group {g.group_id}: {g.status}{found})", 80), fontsize=10)
    ax.legend(loc="best", fontsize=8)
    if path is not None:
        fig.savefig(path)
    return fig
