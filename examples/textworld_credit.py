"""Where does ProVer put the credit in TextWorld games? The whole loop on text games no one here wrote.

The script generates a handful of ``tw-cooking`` games locally and rolls out groups of 8 episodes
with an epsilon-greedy walkthrough follower: it types TextWorld's next oracle command, but with
probability epsilon a random admissible command acting on the same object (``dice`` for ``slice``,
the oven for the stove, eating it...), which may lose the game, so groups are mixed. It then runs
``compute_bonus`` with the rule judge (``DivergenceJudge``), the random-segment ablation
(``RandomJudge``) and, given ``--base-url``, the LLM judge, and prints the commands each segment
credited next to the game's walkthrough, whose key commands (those that raise the score: the game's
own milestones) are marked. It ends with the share of key commands in accepted segments against
the share in uniformly random admissible segments of the same runs.

    python examples/textworld_credit.py                    # 4 games, 6 groups of 8 each
    python examples/textworld_credit.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-8B

Needs ``pip install 'prover-envs[textworld]'``. Games are cached (see ``--cache-dir``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prover_core import (
    BonusResult,
    DivergenceJudge,
    Judge,
    ProverConfig,
    RandomJudge,
    SegmentRules,
    Trajectory,
    compute_bonus,
)
from prover_core.trigger import is_eligible, representative, success_rate
from prover_envs import rollout
from prover_envs.textworld import GameFile, TextWorldEnv, WalkthroughFollower, make_cooking_game, replay_env


@dataclass(frozen=True)
class Credited:
    """One group's outcome under one judge: the proposed segment's commands and what verification said."""

    judge: str
    game_seed: int
    group_id: str
    status: str
    commands: tuple[str, ...]
    """The proposed segment's commands (empty when the judge declined or the group was skipped)."""
    delta: float | None
    key_share: float
    """The share of the segment's commands that are key commands (they raised the score)."""

    @property
    def key(self) -> bool:
        """Whether the segment holds a key command."""
        return self.key_share > 0


@dataclass
class Summary:
    """Everything the example found, per judge, and the random-segment baseline."""

    games: dict[int, GameFile]
    records: list[Credited] = field(default_factory=list)
    random_share: list[float] = field(default_factory=list)
    """Per eligible group: the mean key share over all admissible segments of its representative run."""
    random_rate: list[float] = field(default_factory=list)
    """Per eligible group: the share of its admissible segments that hold a key command."""
    seconds: dict[str, float] = field(default_factory=dict)
    extra_turns: dict[str, float] = field(default_factory=dict)
    """Per judge: continuation policy turns over the batch's own (``prover/extra_turn_share``)."""

    def of(self, judge: str, status: str | None = None) -> list[Credited]:
        return [r for r in self.records if r.judge == judge and r.commands and (status is None or r.status == status)]

    def key_share(self, judge: str, status: str | None = None) -> float:
        """Mean share of key commands in the judge's segments (with that status); NaN when none."""
        chosen = self.of(judge, status)
        return sum(r.key_share for r in chosen) / len(chosen) if chosen else float("nan")

    def key_rate(self, judge: str, status: str | None = None) -> float:
        """Share of the judge's segments (with that status) holding a key command; NaN when none."""
        chosen = self.of(judge, status)
        return sum(r.key for r in chosen) / len(chosen) if chosen else float("nan")

    @property
    def random_key_share(self) -> float:
        """What a uniformly random admissible segment holds in key commands, in expectation."""
        return sum(self.random_share) / len(self.random_share) if self.random_share else float("nan")

    @property
    def random_key_rate(self) -> float:
        return sum(self.random_rate) / len(self.random_rate) if self.random_rate else float("nan")


def scored(run: Trajectory, turn: int) -> bool:
    """Whether the command of ``turn`` raised the score (a key command); the last turn scores if it won."""
    if turn + 1 < run.num_turns:
        return bool(run.turns[turn + 1].info["score"] > run.turns[turn].info["score"])
    return run.success


def key_share(run: Trajectory, start: int, end: int) -> float:
    return sum(scored(run, t) for t in range(start, end + 1)) / (end - start + 1)


def roll_groups(
    game: GameFile, game_seed: int, groups: int, group_size: int, policy: WalkthroughFollower, max_steps: int, seed: int
) -> list[Trajectory]:
    """``groups`` groups of ``group_size`` episodes of ``game``; every episode has its own policy seed."""
    env = TextWorldEnv(max_steps=max_steps)
    spec = {"game_file": game.path, "max_steps": max_steps}
    out = []
    for g in range(groups):
        for i in range(group_size):
            run = rollout(
                env,
                spec,
                policy,
                trajectory_id=f"game{game_seed}/group{g}/run{i}",
                group_id=f"game{game_seed}/group{g}",
                seed=seed + 10_000 * game_seed + 100 * g + i,
                keep_info=("score",),
            )
            out.append(run)
    env.close()
    return out


def credited(judge_name: str, result: BonusResult) -> list[Credited]:
    """What each eligible group's proposed segment was, and the share of its commands that scored."""
    out = []
    for record in result.report.groups:
        if record.status == "not_eligible":
            continue
        game_seed = int(record.group_id.split("/")[0].removeprefix("game"))
        commands: tuple[str, ...] = ()
        share = 0.0
        if record.proposal is not None and record.trajectory_id is not None:
            seg, run = record.proposal.segment, result.trajectories[record.trajectory_id]
            commands = tuple(str(t.action) for t in run.turns[seg.start : seg.end + 1])
            share = key_share(run, seg.start, seg.end)
        verification = record.verification
        delta = verification.delta if verification is not None and not verification.curtailed else None
        out.append(Credited(judge_name, game_seed, record.group_id, record.status, commands, delta, share))
    return out


def random_baseline(batch: Sequence[Trajectory], config: ProverConfig, summary: Summary) -> None:
    """The exact expectation over uniformly random admissible segments of every eligible group."""
    rules: SegmentRules = config.stages.propose.rules
    groups: dict[str, list[Trajectory]] = {}
    for t in batch:
        groups.setdefault(t.group_id, []).append(t)
    for members in groups.values():
        if not is_eligible(success_rate(members), config.trigger_low, config.trigger_high):
            continue
        run = representative(members)
        candidates = rules.candidates(run)
        if not candidates:
            continue
        shares = [key_share(run, c.start, c.end) for c in candidates]
        summary.random_share.append(sum(shares) / len(shares))
        summary.random_rate.append(sum(s > 0 for s in shares) / len(shares))


def make_judges(names: Sequence[str], base_url: str | None, model: str | None, seed: int) -> dict[str, Judge]:
    out: dict[str, Judge] = {}
    for name in names:
        if name == "divergence":
            out[name] = DivergenceJudge()
        elif name == "random":
            out[name] = RandomJudge(seed=seed)
        else:
            raise ValueError(f"unknown judge {name!r}: divergence or random (the LLM judge comes with --base-url)")
    if base_url:
        from prover_core.judges.llm import LLMJudge  # only when asked: it needs a served model

        out["llm"] = LLMJudge.from_url(base_url, model or "default")
    return out


def run(
    *,
    games: int = 4,
    groups: int = 6,
    group_size: int = 8,
    epsilon: float = 0.5,
    max_steps: int = 40,
    k: int = 8,
    seed: int = 0,
    first_game_seed: int = 1,
    judges: Sequence[str] = ("divergence", "random"),
    cache_dir: str | None = None,
    base_url: str | None = None,
    model: str | None = None,
    game_settings: dict[str, Any] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> tuple[Summary, list[Trajectory]]:
    """Generate games, roll out groups, credit them with every judge. Returns the summary and the batch.

    ``progress`` receives a line as each game is compiled and rolled out and as each judge starts."""
    settings = {"recipe": 2, "take": 1, **(game_settings or {})}
    seeds = range(first_game_seed, first_game_seed + games)
    policy = WalkthroughFollower(epsilon, explore="related")
    made: dict[int, GameFile] = {}
    batch: list[Trajectory] = []
    for n, s in enumerate(seeds, 1):
        start = time.perf_counter()
        made[s] = make_cooking_game(s, cache_dir=cache_dir, **settings)
        runs = roll_groups(made[s], s, groups, group_size, policy, max_steps, seed)
        batch.extend(runs)
        progress(
            f"game {s} ({n}/{games}): {groups} groups of {group_size} rolled out, "
            f"{sum(t.success for t in runs)} won ({time.perf_counter() - start:.1f} s)"
        )
    summary = Summary(games=made)
    env = replay_env(max_steps=max_steps, cache_dir=cache_dir)
    config = ProverConfig(k=k, seed=seed, max_continuation_turns=max_steps + 1)
    random_baseline(batch, config, summary)
    for name, judge in make_judges(judges, base_url, model, seed).items():
        progress(f"{name} judge: propose, verify (K = {k}) and credit {len(batch)} episodes ...")
        start = time.perf_counter()
        result = compute_bonus(batch, judge=judge, env=env, policy=policy, config=config)
        summary.seconds[name] = time.perf_counter() - start
        summary.extra_turns[name] = result.report.metrics()["prover/extra_turn_share"]
        summary.records.extend(credited(name, result))
    return summary, batch


def report(summary: Summary, batch: Sequence[Trajectory]) -> str:
    """The walkthrough of every game, marked, and where each judge's segment fell."""
    lines = []
    for game_seed, game in summary.games.items():
        runs = [t for t in batch if t.group_id.startswith(f"game{game_seed}/")]
        lines.append(f"== game {game_seed}: {game.path}")
        lines.append(f"   episodes won: {sum(t.success for t in runs)}/{len(runs)}")
        lines.append("   walkthrough (* = key command: it raises the score):")
        lines.extend(f"     {'*' if c in game.scoring else ' '} {c}" for c in game.walkthrough)
        for r in (r for r in summary.records if r.game_seed == game_seed):
            where = " | ".join(r.commands) if r.commands else "-"
            delta = f"Delta={r.delta:+.3f}" if r.delta is not None else ""
            mark = f"key {r.key_share:.2f}" if r.key else ""
            head = f"   [{r.judge:>10}] {r.group_id.split('/')[1]:<7} {r.status:<9} {delta:<13} {mark:<8} "
            lines += textwrap.wrap(where, 100, initial_indent=head, subsequent_indent=" " * len(head)) or [head]
    lines.append("")
    lines.append(
        f"uniformly random admissible segments: key share {summary.random_key_share:.2f}, "
        f"hold a key command {summary.random_key_rate:.2f} ({len(summary.random_share)} eligible groups)"
    )
    for name in dict.fromkeys(r.judge for r in summary.records):
        text = (
            f"{name:>10}: {len(summary.of(name, 'accepted'))} accepted of {len(summary.of(name))} proposed; "
            f"key share accepted {summary.key_share(name, 'accepted'):.2f}, proposed {summary.key_share(name):.2f}; "
            f"hold a key command: accepted {summary.key_rate(name, 'accepted'):.2f}, "
            f"proposed {summary.key_rate(name):.2f}; "
            f"extra policy turns {100 * summary.extra_turns.get(name, 0.0):.0f}% of the batch's "
            f"({summary.seconds.get(name, 0.0):.1f} s)"
        )
        lines += textwrap.wrap(text, 100, subsequent_indent=" " * 12)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> Summary:
    parser = argparse.ArgumentParser(description="Where ProVer puts the credit in generated TextWorld games.")
    parser.add_argument("--games", type=int, default=4)
    parser.add_argument("--first-game-seed", type=int, default=1)
    parser.add_argument("--groups", type=int, default=6, help="groups per game")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--epsilon", type=float, default=0.5)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--k", type=int, default=8, help="continuations per boundary")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--judges", default="divergence,random", help="comma-separated: divergence, random")
    parser.add_argument("--cache-dir", default=None, help="where games are compiled (default ~/.cache/prover-core)")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server: adds the LLM judge")
    parser.add_argument("--model", default=None)
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if not args.quiet:  # progress on stderr: this script's lines and compute_bonus's summary (logger prover_core)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
        logging.getLogger("prover_core").addHandler(handler)
        logging.getLogger("prover_core").setLevel(logging.INFO)
    summary, batch = run(
        games=args.games,
        first_game_seed=args.first_game_seed,
        groups=args.groups,
        group_size=args.group_size,
        epsilon=args.epsilon,
        max_steps=args.max_steps,
        k=args.k,
        seed=args.seed,
        judges=[j for j in args.judges.split(",") if j],
        cache_dir=args.cache_dir,
        base_url=args.base_url,
        model=args.model,
        progress=(lambda line: None)
        if args.quiet
        else lambda line: print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True),
    )
    print(report(summary, batch))
    return summary


if __name__ == "__main__":
    main()
