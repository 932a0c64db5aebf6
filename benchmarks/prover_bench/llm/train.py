"""Behaviour cloning, held-out evaluation and one RL run of an arm (needs torch).

Seeds: seed ``s`` fixes the initial weights, the BC data, the 8 training tasks of each step, every
rollout's and every evaluation episode's seed; arms of one seed share all of them (paired).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from prover_bench.llm import model as M
from prover_bench.llm.credit import continuation_turns, gigpo_turns, grpo_turns, trajectory
from prover_bench.llm.engine import Engine, episodes, run, run_episode
from prover_bench.llm.loss import Aggregation, policy_loss
from prover_bench.llm.model import Tensor
from prover_bench.llm.tasks import Record, make_task, restored, simulate
from prover_core.bonus import acompute_bonus
from prover_core.config import ProverConfig
from prover_core.data import Outcome, Trajectory
from prover_core.protocols import Judge

TRAIN_TASKS = 64
HELD_OUT = 100_000  # held-out task ids start here
TASKS_PER_STEP = 8


@dataclass(frozen=True)
class Arm:
    """One training method: its credit (``grpo``, ``gigpo`` or ``prover``), judge, sizes and optimizer.

    ProVer only: ``negative`` turns on the library's negative credit (``ProverConfig(negative_credit=True)``);
    ``continuation_data`` trains on the verification's continuations too (:func:`train_run`).
    """

    name: str
    credit: str = "grpo"
    judge: Callable[[int], Judge] | None = None
    group_size: int = 8
    k: int = 8
    aggregation: Aggregation = "token-mean"
    optimizer: str = "adam"
    sampling: Literal["fixed", "adaptive"] = "fixed"
    negative: bool = False
    continuation_data: bool = False


@dataclass
class StepLog:
    rollout_turns: int
    extra_turns: int
    rollout_tokens: int
    extra_tokens: int
    train_success: float
    verified: int = 0
    accepted: int = 0
    accepted_on_pivot: int = 0
    seconds: float = 0.0
    debited: int = 0
    """Failed runs debited by negative credit (accepted ``drop`` groups)."""
    debited_on_mistake: int = 0
    """Of those, segments holding a decision that made success impossible (``tasks.is_mistake``)."""
    data_rows: int = 0
    """Continuations added to the loss as training data."""
    proposed: int = 0
    """The judge's nominations (positive credit: a segment of a group's representative success) and what they hold:
    their turns, the pivot (``tasks.is_pivot``), the keeping of the goal key (``tasks.is_keep``); the ``random_``
    counts are those of one uniformly random admissible segment of the same length on the same success."""
    proposed_turns: int = 0
    proposed_pivot: int = 0
    proposed_keep: int = 0
    random_pivot: int = 0
    random_keep: int = 0
    two_decisions: int = 0
    """Nominations on a success that needed two decisions (a key room after the goal key's), and of those the ones
    holding the pivot and the ones holding the keep."""
    two_pivot: int = 0
    two_keep: int = 0
    credit: float = 0.0
    """Accepted positive credit summed over the credited turns (``lam * Delta`` per turn), and the part of it on
    turns that are neither the pivot nor a keep."""
    credit_elsewhere: float = 0.0


@dataclass
class LLMRun:
    """Held-out success at the evaluation steps, and the cost spent by then."""

    arm: str
    seed: int
    lr: float
    group_size: int
    eval_steps: list[int]
    success: list[float]
    env_steps: list[int]
    policy_tokens: list[int]
    logs: list[StepLog] = field(default_factory=list)
    seconds: float = 0.0

    def at(self, budget: float, by: str = "env") -> float:
        """Held-out success once ``budget`` env steps (``by="env"``) or policy tokens are spent (interpolated)."""
        xs = self.env_steps if by == "env" else self.policy_tokens
        return float(np.interp(budget, xs, self.success))

    def extra_share(self) -> float:
        rollout = sum(x.rollout_turns for x in self.logs)
        return sum(x.extra_turns for x in self.logs) / rollout if rollout else 0.0

    def extra_token_share(self) -> float:
        rollout = sum(x.rollout_tokens for x in self.logs)
        return sum(x.extra_tokens for x in self.logs) / rollout if rollout else 0.0


def token_rows(records: Sequence[Record]) -> tuple[Tensor, Tensor]:
    """Padded tokens ``[N, L]`` and the action-token mask ``[N, L]``."""
    import torch

    length = max(len(r.tokens) for r in records)
    tokens = torch.zeros(len(records), length, dtype=torch.long)
    mask = torch.zeros(len(records), length)
    for i, r in enumerate(records):
        tokens[i, : len(r.tokens)] = torch.tensor(r.tokens)
        for a, b in r.spans:
            mask[i, a:b] = 1.0
    return tokens, mask


def token_logp(params: M.Params, tokens: Tensor) -> Tensor:
    """``log pi(x_j | x_<j)`` at positions ``1..L-1`` (position 0 gets 0), shape ``[N, L]``."""
    import torch
    import torch.nn.functional as F

    logits = M.forward(params, tokens)
    lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, tokens[:, 1:, None])[..., 0]
    return F.pad(lp, (1, 0))


def turn_advantages_to_tokens(records: Sequence[Record], per_turn: Sequence[np.ndarray], length: int) -> Tensor:
    """Each turn's advantage on its action tokens (the rows of ``token_rows``)."""
    import torch

    adv = np.zeros((len(records), length))
    for i, (r, a) in enumerate(zip(records, per_turn, strict=True)):
        for (s, e), v in zip(r.spans, a, strict=True):
            adv[i, s:e] = v
    return torch.tensor(adv, dtype=torch.float32)


def with_continuations(
    records: Sequence[Record], adv: Tensor, continuations: Sequence[tuple[tuple[str, int], Record]]
) -> tuple[Tensor, Tensor, Tensor]:
    """The loss rows of the group samples followed by one row per continuation: tokens, mask and advantages.

    A continuation's row holds its boundary's token history (context, mask 0) and its own action tokens (mask
    1) with :func:`~prover_bench.llm.credit.continuation_turns`; it enters the same token-mean (or
    sequence-mean) as the group samples, each action token weighing the same as a group sample's.
    """
    import torch
    import torch.nn.functional as F

    cont = [r for _, r in continuations]
    tokens, mask = token_rows([*records, *cont])
    length = tokens.shape[1]
    extra = turn_advantages_to_tokens(cont, continuation_turns([b for b, _ in continuations], cont), length)
    return tokens, mask, torch.cat([F.pad(adv, (0, length - adv.shape[1])), extra])


def behaviour_clone(
    seed: int, steps: int = 300, batch: int = 16, lr: float = 3e-3, variant: str = "default", skill: float = 0.5
) -> M.Params:
    """Next-token cross-entropy on the noisy expert's action tokens (token-mean), Adam, one-cycle lr schedule, on
    the training tasks of ``variant`` (``tasks.VARIANTS``; the same draws for every variant); ``skill``: the
    expert's chance of the right choice in a key room (``tasks.expert``; 1/2: it cannot tell the goal key)."""
    import torch

    torch.manual_seed(seed)
    params = M.init_params(seed)
    opt = torch.optim.Adam(list(params.values()), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    rng = np.random.default_rng([seed, 7])
    for _ in range(steps):
        recs = [
            simulate(make_task(int(rng.integers(TRAIN_TASKS)), variant), "expert", rng, skill) for _ in range(batch)
        ]
        tokens, mask = token_rows(recs)
        lp = token_logp(params, tokens)
        loss = -(lp * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return params


def evaluate(params: M.Params, tasks: int, samples: int, seed: int, variant: str = "default") -> float:
    """Held-out success: ``samples`` episodes on each of ``tasks`` held-out tasks (seeds shared across arms)."""
    engine = Engine(params, slots=tasks * samples)
    ts = [make_task(HELD_OUT + j, variant) for j in range(tasks) for _ in range(samples)]
    seeds = [[seed, 99_999, i] for i in range(len(ts))]
    recs: list[Record] = run(episodes(engine, ts, seeds))
    return float(np.mean([r.success for r in recs]))


def step_tasks(seed: int, step: int, count: int = TASKS_PER_STEP) -> list[int]:
    rng = np.random.default_rng([seed, step, 11])
    return [int(t) for t in rng.choice(TRAIN_TASKS, size=count, replace=False)]


async def _prover_credit(
    engine: Engine, groups: list[list[Record]], judge: Judge, arm: Arm, seed: int, step: int, log: StepLog, length: int
) -> tuple[np.ndarray, list[tuple[tuple[str, int], Record]]]:
    """ProVer's advantages on the token rows (``BonusResult.token_advantages``), through ``acompute_bonus``
    with a ``continue_from`` that restores the exact state and token history; and every continuation with its
    boundary ``(trajectory id, turn)``."""
    by_id: dict[str, Record] = {}
    trajectories: list[Trajectory] = []
    for g, group in enumerate(groups):
        for j, r in enumerate(group):
            tid = f"s{step}g{g}e{j}"
            by_id[tid] = r
            trajectories.append(trajectory(r, tid, f"s{step}g{g}"))
    continuations: list[tuple[tuple[str, int], Record]] = []

    async def continue_from(traj: Trajectory, turn: int, cseed: int) -> Outcome:
        out = await run_episode(engine, restored(by_id[traj.id], turn), cseed)
        log.extra_turns += out.turns
        log.extra_tokens += out.action_tokens  # the restored record holds only this continuation's turns
        continuations.append(((traj.id, turn), out))
        return Outcome(success=out.success, turns=out.turns)

    config = ProverConfig(k=arm.k, sampling=arm.sampling, seed=seed, max_concurrency=256, negative_credit=arm.negative)
    result = await acompute_bonus(trajectories, judge=judge, config=config, continue_from=continue_from)
    by_tid = {t.id: t for t in trajectories}
    for g, rec in enumerate(result.report.groups):
        if rec.verification is not None:
            log.verified += 1
        if rec.proposal is not None and rec.trajectory_id and rec.direction == "gain":
            _nomination(log, by_tid[rec.trajectory_id], rec.proposal.segment.start, rec.proposal.segment.end,
                        np.random.default_rng([seed, step, g, 5]))  # fmt: skip
        if rec.status == "accepted" and rec.proposal is not None and rec.trajectory_id:
            seg = rec.proposal.segment
            turns = [by_tid[rec.trajectory_id].turns[x] for x in range(seg.start, seg.end + 1)]
            if rec.direction == "gain":
                log.accepted += 1
                log.accepted_on_pivot += any(turn.info["pivot"] for turn in turns)
                bonus = config.lam * (rec.verification.delta if rec.verification is not None else 0.0)
                log.credit += bonus * len(turns)
                log.credit_elsewhere += bonus * sum(not (t.info["pivot"] or t.info["keep"]) for t in turns)
            else:
                log.debited += 1
                log.debited_on_mistake += any(turn.info["mistake"] for turn in turns)
    return np.stack([result.token_advantages(t.id, length) for t in trajectories]), continuations


def _nomination(log: StepLog, success: Trajectory, start: int, end: int, rng: np.random.Generator) -> None:
    """Count what the judge's segment ``[start, end]`` of ``success`` holds, and what a random one of its length
    (a uniform admissible start, nonterminal end) would have held."""
    width = end - start + 1
    r = int(rng.integers(0, max(success.num_turns - 1 - width, 0) + 1))
    seg, rand = success.turns[start : end + 1], success.turns[r : r + width]
    log.proposed += 1
    log.proposed_turns += width
    log.proposed_pivot += any(t.info["pivot"] for t in seg)
    log.proposed_keep += any(t.info["keep"] for t in seg)
    log.random_pivot += any(t.info["pivot"] for t in rand)
    log.random_keep += any(t.info["keep"] for t in rand)
    if any(t.info["keep"] for t in success.turns):
        log.two_decisions += 1
        log.two_pivot += any(t.info["pivot"] for t in seg)
        log.two_keep += any(t.info["keep"] for t in seg)


def train_run(
    arm: Arm, start: M.Params, seed: int, lr: float, steps: int, eval_at: Sequence[int], eval_tasks: int,
    eval_samples: int, start_success: float, tasks_per_step: int = TASKS_PER_STEP,
    trained: Callable[[M.Params], None] | None = None, variant: str = "default",
    on_eval: Callable[[int, M.Params], None] | None = None,
) -> LLMRun:  # fmt: skip
    """``steps`` optimizer steps of ``arm`` from ``start``; held-out success at ``eval_at`` (step 0 given).

    ``trained``, if given, receives the final weights (for diagnostics; the run's figures do not include them);
    ``on_eval`` the step and the weights at each of ``eval_at`` (the same). ``variant``: the tasks' variant
    (``tasks.VARIANTS``), for training and held-out evaluation alike.
    """
    import torch

    t0 = time.perf_counter()
    torch.manual_seed(seed)
    params = M.clone(start)
    opt: Any = (
        torch.optim.Adam(list(params.values()), lr=lr)
        if arm.optimizer == "adam"
        else torch.optim.SGD(list(params.values()), lr=lr)
    )
    engine = Engine(params, slots=1024)
    judge = arm.judge(seed) if arm.judge is not None else None
    out = LLMRun(arm.name, seed, lr, arm.group_size, [0], [start_success], [0], [0])
    env_steps = tokens_spent = 0
    for step in range(1, steps + 1):
        ts = time.perf_counter()
        tasks = [make_task(t, variant) for t in step_tasks(seed, step, tasks_per_step) for _ in range(arm.group_size)]
        seeds = [[seed, 1000 + step, i] for i in range(len(tasks))]
        records: list[Record] = run(episodes(engine, tasks, seeds))
        groups = [records[g * arm.group_size : (g + 1) * arm.group_size] for g in range(tasks_per_step)]
        log = StepLog(sum(r.turns for r in records), 0, sum(r.action_tokens for r in records), 0,
                      float(np.mean([r.success for r in records])))  # fmt: skip
        tokens, mask = token_rows(records)
        if arm.credit == "grpo":
            adv = turn_advantages_to_tokens(records, grpo_turns(groups), tokens.shape[1])
        elif arm.credit == "gigpo":
            adv = turn_advantages_to_tokens(records, gigpo_turns(groups), tokens.shape[1])
        elif arm.credit == "prover" and judge is not None:
            rows, continuations = run(
                _prover_credit(engine, groups, judge, arm, seed * 100_000 + step, step, log, tokens.shape[1])
            )
            adv = torch.tensor(rows, dtype=torch.float32)
            if arm.continuation_data and continuations:
                tokens, mask, adv = with_continuations(records, adv, continuations)
                log.data_rows = len(continuations)
        else:
            raise ValueError(f"unknown credit {arm.credit!r} (ProVer needs a judge)")
        loss = policy_loss(token_logp(params, tokens), adv, mask, arm.aggregation)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        env_steps += log.rollout_turns + log.extra_turns
        tokens_spent += log.rollout_tokens + log.extra_tokens
        log.seconds = time.perf_counter() - ts
        out.logs.append(log)
        if step in eval_at:
            out.eval_steps.append(step)
            out.success.append(evaluate(params, eval_tasks, eval_samples, seed, variant))
            if on_eval is not None:
                on_eval(step, params)
            out.env_steps.append(env_steps)
            out.policy_tokens.append(tokens_spent)
    out.seconds = time.perf_counter() - t0
    if trained is not None:
        trained(params)
    return out
