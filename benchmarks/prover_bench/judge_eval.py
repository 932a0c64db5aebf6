"""``prover bench judges``: every judge on every environment of the harness, beside random segments.

For each eligible group (success rate in (0, 0.5)) the judge is asked for a segment of the group's
shortest successful run, and ``compute_bonus`` verifies it with ``K`` continuations from each end.
Figures per (judge, environment), pooled over groups:

* **localisation**: nominated segments that contain a true pivot / nominated segments;
* **chance**: the same for a uniformly random admissible segment, in exact expectation (the mean over
  every admissible segment of each eligible group's run);
* **nominated**: nominated / eligible groups (the rest were declined or skipped);
* **acceptance**: accepted (``Delta > 0``) / verified;
* **exact gain** (tabular environments): the mean exact ``V(s_post) - V(s_pre)`` of nominated segments,
  and **real accepted**: accepted segments whose exact gain is positive / accepted;
* **len**: mean turns per nominated segment;
* **decision value** (tabular): the mean over nominated segments of ``sum_t Q_h(s_t, a_t) - V_h(s_t)``
  over the segment's turns: what the *choices* in it added, without the luck of the transitions
  (the exact gain is decision value plus luck); beside it, the same for random admissible segments of
  the same lengths in the same runs (exact expectation);
* **no effect**: the share of nominated turns whose choice had no effect (``|Q - V| < NO_EFFECT``):
  the share of the credit (spread over a segment's turns) that lands on turns that do not matter;
* **random of its lengths**: a random admissible segment of the same length in the same group, for each
  group the judge nominated, put through the same ``compute_bonus`` verification: its acceptance,
  exact gain and decision value.

Beside the judges, on tabular environments, the ceiling (:mod:`prover_bench.oracle`): the admissible turn
with the largest exact decision value; where even it has no effect in every group, there was nothing to find.

A judge *beats random of its lengths* on an environment when its decision value is larger than the
same-length expectation (environments with exact values) or, without exact values (TextWorld), when its
localisation is larger than the same-length expectation.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from prover_bench.judge_cases import (
    CORRIDORS,
    HELD_OUT,
    LUCK,
    NO_EFFECT,
    NONCE,
    TEXTWORLD,
    TEXTWORLD_HELD_OUT,
    TOY_TEXT,
    Case,
    TabularEnv,
    TextWorldKind,
    tabular_case,
    textworld_case,
)
from prover_bench.methods import run_bonus_with
from prover_bench.oracle import ORACLE, BestTurn, nothing_to_find
from prover_bench.report_files import write_report
from prover_bench.tables import markdown_table
from prover_core.config import ProverConfig
from prover_core.data import Decline, Proposal, SegmentRules, Trajectory
from prover_core.judges import ChoiceJudge, judge_names, registered_judges
from prover_core.judges.combine import FirstOf
from prover_core.protocols import Judge
from prover_core.trigger import is_eligible, representative, success_rate


@dataclass
class JudgeTally:
    """Running totals of one judge on one environment."""

    eligible: int = 0
    nominated: int = 0
    hits: int = 0
    verified: int = 0
    accepted: int = 0
    real_accepted: int = 0
    turns: int = 0
    matched: list[float] = field(default_factory=list)
    gains: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    decision: list[float] = field(default_factory=list)
    decision_same: list[float] = field(default_factory=list)
    exact_turns: int = 0
    no_effect: int = 0
    verified_exact: int = 0
    """Verified segments with exact decision values (tabular)."""
    credited: float = 0.0
    """Sum of the observed ``Delta`` of the accepted ones among them: the credit handed out at ``lambda = 1``."""
    credited_value: float = 0.0
    """Sum of the exact decision value ``sum(Q - V)`` of those accepted segments: what the credit landed on."""
    credited_turns: float = 0.0
    """Sum over accepted segments of ``Delta x turns``: the bonus mass (every turn of a segment gets ``Delta``)."""
    credited_no_effect: float = 0.0
    """The part of it on turns with no effect (``|Q - V| < 0.05``)."""
    policy_turns: int = 0
    """Continuation policy turns spent by verification."""
    rollout_turns: int = 0
    """The batches' own turns."""
    lengths: dict[str, int] = field(default_factory=dict)
    """Trajectory id -> length of the nominated segment (what random of its lengths reproduces)."""
    same: JudgeTally | None = None
    """Random segments of the same lengths, through the same verification."""

    def add(self, other: JudgeTally) -> None:
        """Pool ``other`` into this tally (lengths are per batch and not pooled)."""
        for attr in (
            "eligible", "nominated", "hits", "verified", "accepted", "real_accepted", "turns", "verified_exact",
            "credited", "credited_value", "credited_turns", "credited_no_effect", "policy_turns", "rollout_turns",
        ):  # fmt: skip
            setattr(self, attr, getattr(self, attr) + getattr(other, attr))
        self.exact_turns += other.exact_turns
        self.no_effect += other.no_effect
        self.gains += other.gains
        self.matched += other.matched
        self.decision += other.decision
        self.decision_same += other.decision_same
        if other.same is not None:
            if self.same is None:
                self.same = JudgeTally()
            self.same.add(other.same)

    def row(self) -> dict[str, float]:
        nan = float("nan")
        same = self.same.row() if self.same is not None else {}
        return {
            "decision": _mean(self.decision),
            "decision_same": _mean(self.decision_same),
            "credited": self.credited / self.verified_exact if self.verified_exact else nan,
            "credited_value": self.credited_value / self.verified_exact if self.verified_exact else nan,
            "credited_no_effect": self.credited_no_effect / self.credited_turns if self.credited_turns > 0 else nan,
            "extra_turns": self.policy_turns / self.rollout_turns if self.rollout_turns else nan,
            "no_effect": self.no_effect / self.exact_turns if self.exact_turns else nan,
            "same_acceptance": same.get("acceptance", nan),
            "same_exact_gain": same.get("exact_gain", nan),
            "same_decision": same.get("decision", nan),
            "same_localisation": same.get("localisation", nan),
            "eligible": self.eligible,
            "nominated": self.nominated / self.eligible if self.eligible else nan,
            "localisation": self.hits / self.nominated if self.nominated else nan,
            "acceptance": self.accepted / self.verified if self.verified else nan,
            "exact_gain": sum(self.gains) / len(self.gains) if self.gains else nan,
            "real_accepted": self.real_accepted / self.accepted if self.accepted and self.gains else nan,
            "turns": self.turns / self.nominated if self.nominated else nan,
            "matched_chance": sum(self.matched) / len(self.matched) if self.matched else nan,
        }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def hit(pivots: frozenset[int], start: int, end: int) -> bool:
    """Whether the segment ``[start, end]`` holds a true pivot."""
    return any(start <= t <= end for t in pivots)


def chance(case: Case, rules: SegmentRules, config: ProverConfig) -> float:
    """The localisation of a uniformly random admissible segment, in exact expectation over eligible groups."""
    shares = chance_shares(case, rules, config)
    return sum(shares) / len(shares) if shares else float("nan")


def eligible_groups(
    case: Case, config: ProverConfig
) -> Iterator[tuple[Trajectory, list[Trajectory], list[Trajectory]]]:
    """Each eligible group of ``case`` as ``compute_bonus`` hands it to a judge: its representative (shortest
    successful) run, the failed runs, and the other successful runs (``others``)."""
    for members in groups_of(case.trajectories).values():
        if is_eligible(success_rate(members), config.trigger_low, config.trigger_high):
            run = representative(members)
            failures = [t for t in members if not t.success]
            yield run, failures, [t for t in members if t.success and t.id != run.id]


def chance_shares(case: Case, rules: SegmentRules, config: ProverConfig) -> list[float]:
    """Per eligible group: the share of its run's admissible segments that hold a true pivot."""
    shares: list[float] = []
    for run, _, _ in eligible_groups(case, config):
        candidates = rules.candidates(run)
        if candidates:
            shares.append(sum(hit(case.pivots[run.id], c.start, c.end) for c in candidates) / len(candidates))
    return shares


def matched_chance(case: Case, run: Trajectory, turns: int, config: ProverConfig) -> float:
    """The share of ``run``'s admissible segments of exactly ``turns`` turns that hold a true pivot: the
    localisation of a random segment as long as the judge's."""
    same = [c for c in config.stages.propose.rules.candidates(run) if c.num_turns == turns]
    return sum(hit(case.pivots[run.id], c.start, c.end) for c in same) / len(same) if same else float("nan")


def matched_decision(case: Case, run: Trajectory, turns: int, config: ProverConfig) -> float | None:
    """The mean decision value of ``run``'s admissible segments of exactly ``turns`` turns (exact
    expectation for a random segment as long as the judge's); ``None`` without exact values."""
    same = [c for c in config.stages.propose.rules.candidates(run) if c.num_turns == turns]
    values = [case.decision_value(run.id, c.start, c.end) for c in same]
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


class SameLengthRandom:
    """A uniformly random admissible segment of a given length in each group: random of a judge's lengths.

    ``lengths`` maps the successful run's id to the length to draw; a run without a length is declined
    (the judge declined it), so both are verified on the same groups.
    """

    def __init__(self, lengths: Mapping[str, int], seed: int = 0) -> None:
        self.lengths, self.seed = dict(lengths), seed

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        turns = self.lengths.get(success.id)
        same = [c for c in rules.candidates(success) if c.num_turns == turns]
        if not same:
            return Decline(reason="the judge nominated nothing of this length here")
        rng = np.random.default_rng([self.seed, 1, zlib.crc32(success.id.encode())])
        return Proposal(segment=same[int(rng.integers(len(same)))], rationale="random segment of the judge's length")


def groups_of(trajectories: Sequence[Trajectory]) -> dict[str, list[Trajectory]]:
    out: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        out.setdefault(t.group_id, []).append(t)
    return out


def evaluate(case: Case, judge: Judge, config: ProverConfig, same_length: bool = False, seed: int = 0) -> JudgeTally:
    """Run ``compute_bonus`` on the case with ``judge`` and score every eligible group's nomination;
    with ``same_length``, also random segments of the judge's lengths through the same verification."""
    result = run_bonus_with(case.trajectories, judge, config, **case.continuations)
    tally = JudgeTally()
    tally.policy_turns = int(result.report.metrics(prefix="")["policy_turns"])
    tally.rollout_turns = result.report.rollout_turns
    for g in result.report.groups:
        if g.status == "not_eligible":
            continue
        tally.eligible += 1
        tally.statuses[g.status] = tally.statuses.get(g.status, 0) + 1
        if g.proposal is None or g.trajectory_id is None:
            continue
        seg = g.proposal.segment
        tally.nominated += 1
        tally.turns += seg.num_turns
        run = result.trajectories[g.trajectory_id]
        tally.lengths[run.id] = seg.num_turns
        tally.matched.append(matched_chance(case, run, seg.num_turns, config))
        tally.hits += hit(case.pivots[g.trajectory_id], seg.start, seg.end)
        value, same_value = (
            case.decision_value(run.id, seg.start, seg.end),
            matched_decision(case, run, seg.num_turns, config),
        )
        no_effect = case.no_effect(run.id, seg.start, seg.end) or 0
        if value is not None and same_value is not None:
            tally.decision.append(value)
            tally.decision_same.append(same_value)
            tally.exact_turns += seg.num_turns
            tally.no_effect += no_effect
        gain = case.gain(g.trajectory_id, seg.start, seg.end) if case.gain is not None else None
        if gain is not None:
            tally.gains.append(gain)
        if g.verification is not None and not g.verification.incomplete:
            tally.verified += 1
            tally.verified_exact += value is not None
            if g.status == "accepted":
                tally.accepted += 1
                tally.real_accepted += gain is not None and gain > 0
                if value is not None:
                    delta = g.verification.delta
                    tally.credited += delta
                    tally.credited_value += value
                    tally.credited_turns += delta * seg.num_turns
                    tally.credited_no_effect += delta * no_effect
    if same_length:
        tally.same = evaluate(case, SameLengthRandom(tally.lengths, seed), config)
    return tally


def offline_judges(seed: int) -> dict[str, Judge]:
    """The judges that need no server, by registered name (:mod:`prover_core.judges.registry`): the choice
    judge, the anchor (rate-jump) judge, the divergence rule, random segments, and any judge registered since."""
    return {name: factory(seed) for name, factory in registered_judges().items()}


@dataclass(frozen=True)
class JudgeBenchSettings:
    """How much to run: groups per environment, batches (independent seeds), which families."""

    groups: int = 16
    batches: int = 4
    group_size: int = 8
    k: int = 8
    textworld_groups: int = 8
    textworld: bool = True
    seed: int = 0
    held_out: bool = False
    """Run the held-out designs and games (:data:`HELD_OUT`, :data:`TEXTWORLD_HELD_OUT`) instead."""
    only: tuple[str, ...] = ()
    """Run only the environments of these names (all when empty)."""
    delta_of: Literal["states", "choices"] = "states"
    """What verification measures (:attr:`ProverConfig.delta_of`)."""
    sampling: Literal["fixed", "adaptive"] = "fixed"
    """Fixed K or adaptive sampling (:attr:`ProverConfig.sampling`; at most ``ceil(1.5 K)`` per boundary)."""


QUICK_JUDGES = JudgeBenchSettings(groups=16, batches=2, textworld_groups=4)
FULL_JUDGES = JudgeBenchSettings()


@dataclass
class JudgeBench:
    """``results[env][judge]`` rows, the chance level per environment, and notes."""

    results: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    tallies: dict[str, dict[str, JudgeTally]] = field(default_factory=dict)
    chance: dict[str, float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def beats_same_length(self, judge: str, rows: Mapping[str, float]) -> bool | None:
        """Whether ``rows`` (one environment or family) show ``judge`` beating random of its lengths:
        decision value where exact, else localisation; ``None`` when there is nothing to compare."""
        if not math.isnan(rows.get("decision_same", float("nan"))):
            return not math.isnan(rows["decision"]) and rows["decision"] > rows["decision_same"]
        theirs = rows.get("matched_chance", float("nan"))
        if math.isnan(theirs):
            return None
        return not math.isnan(rows["localisation"]) and rows["localisation"] > theirs

    def families(self) -> dict[str, dict[str, dict[str, float]]]:
        """``families[kind][judge]``: the rows of every environment of a kind, pooled."""
        pooled: dict[str, dict[str, JudgeTally]] = {}
        for env, by_judge in self.tallies.items():
            for judge, tally in by_judge.items():
                pooled.setdefault(self.kinds[env], {}).setdefault(judge, JudgeTally()).add(tally)
        return {kind: {j: t.row() for j, t in by.items()} for kind, by in pooled.items()}

    def wins(self, judge: str, over: str = "chance") -> tuple[int, int]:
        """Environments where ``judge``'s localisation beats random segments: ``over="chance"`` (any length),
        ``"matched"`` (as long as the judge's) or another judge's name. Returns (wins, environments)."""
        won = total = 0
        for env, rows in self.results.items():
            mine = rows.get(judge, {}).get("localisation", float("nan"))
            if over == "chance":
                theirs = self.chance[env]
            elif over == "matched":
                theirs = rows.get(judge, {}).get("matched_chance", float("nan"))
            else:
                theirs = rows.get(over, {}).get("localisation", float("nan"))
            if math.isnan(theirs):
                continue
            total += 1
            won += not math.isnan(mine) and mine > theirs
        return won, total

    def markdown(self) -> str:
        judges = sorted({j for rows in self.results.values() for j in rows}, key=_judge_order)
        header = [
            "environment",
            "kind",
            "groups",
            "chance",
            *[f"{j}: loc (same-length chance) / nom / acc / gain / len" for j in judges],
        ]
        detail_header = [
            "environment",
            *[f"{j}: value (same-length) / no-effect / same-length verified: acc, gain" for j in judges],
        ]
        details = []
        rows = []
        for env, by_judge in self.results.items():
            eligible = max((int(r["eligible"]) for r in by_judge.values()), default=0)
            cells = [env, self.kinds[env], str(eligible), _fmt(self.chance[env])]
            for j in judges:
                r = by_judge.get(j)
                cells.append(
                    "-"
                    if r is None
                    else f"{_fmt(r['localisation'])} ({_fmt(r['matched_chance'])}) / {_fmt(r['nominated'])}"
                    f" / {_fmt(r['acceptance'])}"
                    f" / {_fmt(r['exact_gain'], signed=True)} / {_fmt(r['turns'], digits=1)}"
                )
            rows.append(cells)
            detail = [env]
            for j in judges:
                r = by_judge.get(j)
                detail.append(
                    "-"
                    if r is None
                    else f"{_fmt(r['decision'], signed=True)} ({_fmt(r['decision_same'], signed=True)})"
                    f" / {_fmt(r['no_effect'])} / {_fmt(r['same_acceptance'])},"
                    f" {_fmt(r['same_exact_gain'], signed=True)}"
                )
            details.append(detail)
        families = self.families()
        fam_rows = []
        for kind, by_judge in families.items():
            cells = [kind]
            for j in judges:
                r = by_judge.get(j)
                if r is None:
                    cells.append("-")
                    continue
                beat = self.beats_same_length(j, r)
                cells.append(
                    f"{_fmt(r['decision'], signed=True)} ({_fmt(r['decision_same'], signed=True)}) / "
                    f"{_fmt(r['localisation'])} ({_fmt(r['matched_chance'])}) / {_fmt(r['turns'], digits=1)} / "
                    f"{_fmt(r['no_effect'])} / {'-' if beat is None else 'yes' if beat else 'NO'}"
                )
            fam_rows.append(cells)
        fam_header = [
            "family",
            *[f"{j}: value (same-length) / loc (same-length) / len / no-effect / beats" for j in judges],
        ]
        credit_rows = [
            [kind, *("-" if j not in by else _credited(by[j]) for j in judges)] for kind, by in families.items()
        ]
        lines = [
            markdown_table(header, rows),
            "",
            markdown_table(detail_header, details),
            "",
            "By family (every environment of a kind pooled):",
            "",
            markdown_table(fam_header, fam_rows),
            "",
            "The credit and what it landed on, per verified segment, by family:",
            "",
            markdown_table(
                ["family", *[f"{j}: acc / credit / value / on no-effect / extra turns" for j in judges]], credit_rows
            ),
            "",
            "groups: eligible groups; loc: nominated segments holding a true pivot (in brackets: the same for "
            "random admissible segments as long as the judge's, exact expectation); chance: the same for a "
            "uniformly random admissible segment (exact expectation); nom: nominated / eligible groups (the "
            "rest declined); acc: accepted (Delta > 0) / verified; gain: mean exact V(post) - V(pre) of "
            "nominated segments (tabular only); "
            "len: mean turns per nominated segment (random admissible segments: about 2.5). "
            f"{ORACLE}: the admissible turn with the largest exact decision value (it reads the truth: the "
            "ceiling of a one-turn judge, tabular only). "
            "value: mean decision value sum(Q - V) of nominated segments (tabular only; in brackets: random "
            "admissible segments of the same lengths in the same runs, exact expectation); no-effect: share of "
            "nominated turns with |Q - V| < 0.05; same-length verified: random segments of the judge's lengths "
            "in the groups it nominated, through the same verification (acceptance, exact gain). beats: value "
            "above the same-length value (localisation where no exact values). The credit (tabular), per verified "
            "segment: credit, the observed Delta of the accepted ones (the bonus at lambda = 1, 0 when rejected); "
            "value, their exact decision value sum(Q - V) (0 when rejected): credit above value went to luck (the "
            "recorded transitions, under delta_of='states') or to noise; on no-effect: the share of the bonus mass "
            "(Delta on each turn of an accepted segment) that lands on turns with |Q - V| < 0.05; extra turns: "
            "verification's policy turns over the batches' own turns (every group, eligible or not).",
        ]
        for j in judges:
            won, total = self.wins(j)
            same, _ = self.wins(j, "matched")
            beats = [self.beats_same_length(j, rows[j]) for rows in self.results.values() if j in rows]
            lines.append(
                f"- {j}: localisation above chance in {won} of {total} environments, "
                f"above random segments of its own lengths in {same}; beats random of its lengths "
                f"(decision value, localisation without exact values) in {sum(b is True for b in beats)} of "
                f"{sum(b is not None for b in beats)}"
            )
        empty = nothing_to_find(self.results)
        if empty:
            lines.append(
                f"- nothing to find in {'; '.join(empty)}: the best admissible turn of every eligible run had "
                f"|Q - V| < {NO_EFFECT} ({ORACLE}: no-effect 1.00), so every turn a judge nominates there is without "
                "effect or harmful, credit there lands on no choice that helped, and no one-turn judge's decision "
                "value can exceed the oracle's"
            )
        lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines)


def _credited(row: Mapping[str, float]) -> str:
    return (
        f"{_fmt(row['acceptance'])} / {_fmt(row['credited'], signed=True)} / {_fmt(row['credited_value'], signed=True)}"
        f" / {_fmt(row['credited_no_effect'])} / {_fmt(100 * row['extra_turns'], digits=0)}%"
    )


def _judge_order(name: str) -> tuple[int, str]:
    """The registered judges in registration order, then the others (an LLM judge) by name, the ceiling last."""
    names = judge_names()
    if name == ORACLE:
        return len(names) + 1, name
    return (names.index(name), name) if name in names else (len(names), name)


def _fmt(value: float, signed: bool = False, digits: int = 2) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def harness_seed(seed: int, held_out: bool) -> int:
    """The harness's root seed: held-out runs draw their batches from ``seed + 7``, seeds the development runs
    never used."""
    return seed + (7 if held_out else 0)


def tabular_envs(held_out: bool) -> tuple[TabularEnv, ...]:
    """The harness's tabular environments: the development designs, or the held-out ones."""
    return HELD_OUT if held_out else (*CORRIDORS, *LUCK, *NONCE, *TOY_TEXT)


def quick_cases(held_out: bool, seed: int, logprobs: bool = False) -> Iterator[Case]:
    """The tabular cases of ``prover bench judges --quick [--held-out] --seed seed``: the same environments,
    batch seeds and sizes (``logprobs``: see :func:`~prover_bench.judge_cases.tabular_case`)."""
    s = QUICK_JUDGES
    for env in tabular_envs(held_out):
        for b in range(s.batches):
            yield tabular_case(env, s.groups, s.group_size, harness_seed(seed, held_out) * 1000 + b, logprobs)


def run_judge_bench(
    settings: JudgeBenchSettings = QUICK_JUDGES,
    extra_judges: Mapping[str, Judge] | None = None,
    textworld_cache: str | None = None,
) -> JudgeBench:
    """Every judge on every environment; ``extra_judges`` (say, an LLM judge) join the offline ones."""
    began = time.perf_counter()
    config = ProverConfig(k=settings.k, seed=settings.seed, delta_of=settings.delta_of, sampling=settings.sampling)
    out = JudgeBench()
    tabular = tabular_envs(settings.held_out)
    games: tuple[TextWorldKind, ...] = TEXTWORLD_HELD_OUT if settings.held_out else TEXTWORLD
    cases: list[tuple[str, Any]] = []
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        out.notes.append("gymnasium toy-text skipped: gymnasium is not installed (pip install 'gymnasium>=1.0')")
        tabular = tuple(e for e in tabular if e.kind != "gymnasium")
    cases += [(e.name, e) for e in tabular if not settings.only or e.name in settings.only]
    if settings.textworld:
        try:
            import textworld  # noqa: F401

            import prover_envs  # noqa: F401
        except ImportError:
            out.notes.append(
                "TextWorld games skipped: textworld is not installed (pip install 'prover-envs[textworld]')"
            )
        else:
            cases += [(kind.name, kind) for kind in games if not settings.only or kind.name in settings.only]
    for name, env in cases:
        tallies: dict[str, JudgeTally] = {}
        chances: list[float] = []
        batches = settings.batches if isinstance(env, TabularEnv) else 1
        for b in range(batches):
            seed = settings.seed * 1000 + b
            if isinstance(env, TextWorldKind):
                case = textworld_case(env, settings.textworld_groups, settings.group_size, seed, textworld_cache)
            else:
                case = tabular_case(env, settings.groups, settings.group_size, seed)
            out.kinds[name] = case.kind
            chances += chance_shares(case, config.stages.propose.rules, config)
            judges: dict[str, Judge] = {**offline_judges(seed), **(extra_judges or {})}
            if extra_judges and "llm" in extra_judges:  # the combination rule: the LLM only where choice declines
                judges["choice, then llm"] = FirstOf(ChoiceJudge(), extra_judges["llm"])
            if case.decision is not None:  # the ceiling: what there was to find (reads the truth)
                judges[ORACLE] = BestTurn(case.decision)
            for judge_name, judge in judges.items():
                tally = evaluate(case, judge, config, same_length=judge_name != "random", seed=seed)
                tallies.setdefault(judge_name, JudgeTally()).add(tally)
        out.chance[name] = sum(chances) / len(chances) if chances else float("nan")
        out.tallies[name] = tallies
        out.results[name] = {j: t.row() for j, t in tallies.items()}
    out.seconds = time.perf_counter() - began
    return out


def judges_command(
    quick: bool,
    out: str,
    seed: int = 0,
    textworld: bool | None = None,
    llm: Judge | None = None,
    groups: int | None = None,
    batches: int | None = None,
    held_out: bool = False,
    textworld_groups: int | None = None,
    delta_of: Literal["states", "choices"] = "states",
    k: int | None = None,
    sampling: Literal["fixed", "adaptive"] = "fixed",
) -> int:
    """``prover bench judges``: print the judges x environments table, write ``judges.md`` and ``judges.json``."""
    import dataclasses

    base = QUICK_JUDGES if quick else FULL_JUDGES
    settings = dataclasses.replace(
        base,
        textworld=(not quick) if textworld is None else textworld,
        groups=base.groups if groups is None else groups,
        batches=base.batches if batches is None else batches,
        held_out=held_out,
        seed=harness_seed(seed, held_out),
        textworld_groups=base.textworld_groups if textworld_groups is None else textworld_groups,
        delta_of=delta_of,
        k=base.k if k is None else k,
        sampling=sampling,
    )
    bench = run_judge_bench(settings, extra_judges={"llm": llm} if llm is not None else None)
    if not settings.textworld:
        bench.notes.append("TextWorld games not run (--quick leaves them out; add --textworld)")
    command = "prover bench judges" + (" --quick" if quick else "")
    command += f" --groups {groups}" if groups is not None else ""
    command += f" --batches {batches}" if batches is not None else ""
    command += " --held-out" if held_out else ""
    command += f" --seed {seed}" if seed else ""
    command += " --textworld" if textworld and quick else ""
    command += f" --textworld-groups {textworld_groups}" if textworld_groups is not None else ""
    command += " --delta-of choices" if delta_of == "choices" else ""
    command += f" -k {k}" if k is not None else ""
    command += " --sampling adaptive" if sampling == "adaptive" else ""
    text = (
        f"# prover bench judges\n\nCommand: `{command}`; {settings.batches} batch(es) of {settings.groups} groups x "
        f"{settings.group_size} per tabular environment, {settings.textworld_groups} groups per TextWorld game; "
        f"K = {settings.k}{' (adaptive)' if settings.sampling == 'adaptive' else ''}; Delta of {settings.delta_of}; "
        f"{bench.seconds:.1f} s\n\n{bench.markdown()}\n"
    )
    print(text)
    payload = {
        "settings": dataclasses.asdict(settings),
        "chance": bench.chance,
        "results": bench.results,
        "families": bench.families(),
    }
    write_report(out, "judges.md", text, "judges.json", payload, indent=2, allow_nan=True)
    print(f"written to {out}/ (judges.md, judges.json)")
    return 0
