"""Behaviour cloning, held-out evaluation and one RL run of an arm (needs torch).

Seeds: seed ``s`` fixes the initial weights, the BC data, the 8 training tasks of each step, every
rollout's and every evaluation episode's seed; arms of one seed share all of them (paired).
"""

from __future__ import annotations

import itertools
import math
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
from prover_bench.llm.tasks import (
    Record,
    action_tokens,
    make_task,
    observation_tokens,
    play,
    restored,
    simulate,
    solved,
    start_record,
)
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
    ``continuation_data`` trains on the verification's continuations too (:func:`train_run`); ``trigger`` is the
    band ``(trigger_low, trigger_high)`` and ``lam`` the lambda of ``ProverConfig``.
    GRPO only: ``extra_members`` adds that many group members per step on average, spread over the step's tasks
    (:func:`group_sizes`): the token-matched baseline, GRPO spending ProVer's extra samples as more rollouts.
    ``diagnose``: train a GRPO copy on the arm's own batches beside it and probe both (:func:`decision_probs`).
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
    trigger: tuple[float, float] = (0.0, 0.5)
    lam: float = 1.0
    extra_members: float = 0.0
    diagnose: bool = False


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
    credit_share: float = 0.0
    """``prover/credit_share`` of the step's report: sum |bonus| / sum |A_GRPO| over the trainable tokens."""
    trigger_share: float = 0.0
    """``prover/trigger_share``: the share of the step's groups inside the trigger band (either sign of credit)."""


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
    probes: list[dict[str, float]] = field(default_factory=list)
    """``Arm.diagnose``: at step 0 and each evaluation step, :func:`decision_probs` of the arm (``pivot``,
    ``before``, ``after``) and of its same-batch GRPO copy (``grpo_pivot``, ...)."""

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

    config = ProverConfig(k=arm.k, sampling=arm.sampling, seed=seed, max_concurrency=256, negative_credit=arm.negative,
                          trigger_low=arm.trigger[0], trigger_high=arm.trigger[1], lam=arm.lam)  # fmt: skip
    result = await acompute_bonus(trajectories, judge=judge, config=config, continue_from=continue_from)
    metrics = result.report.metrics(prefix="")
    log.credit_share, log.trigger_share = metrics["credit_share"], metrics["trigger_share"]
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


def group_sizes(group_size: int, tasks: int, extra: float, step: int) -> list[int]:
    """Members per task at ``step`` (from 1): ``group_size`` each, plus ``floor(step x) - floor((step - 1) x)`` extra
    members (``x = extra``) handed out one per task round-robin, continuing where the last step stopped; so after
    ``n`` steps exactly ``floor(n x)`` extra members were sampled, ``x`` per step on average."""
    if extra < 0 or group_size < 1 or tasks < 1:
        raise ValueError("need extra >= 0, group_size >= 1 and tasks >= 1")
    before, now = math.floor((step - 1) * extra), math.floor(step * extra)
    sizes = [group_size] * tasks
    for i in range(before, now):
        sizes[i % tasks] += 1
    return sizes


DECISIONS = ("pivot", "before", "after")
"""Where :func:`decision_probs` measures P(take): the goal key's room, the key rooms before it, the key rooms after
it holding the goal key (where taking is the mistake: ``tasks.is_mistake``)."""


def decision_probs(params: M.Params, variant: str, tasks: int = 64) -> dict[str, float]:
    """Mean P(``take the key .``) over held-out tasks ``HELD_OUT..HELD_OUT + tasks - 1``, in each key room of the
    optimal path (no slips), by :data:`DECISIONS`: the pivot state, key rooms before it, key rooms after it (NaN
    where no task has one: the ``last`` variant has none after). The exact probability of the whole action's
    tokens under ``params``, not a sample."""
    import torch

    take = action_tokens(("take", -1))
    rows: list[list[int]] = []
    kinds: list[str] = []
    for j in range(tasks):
        task = make_task(HELD_OUT + j, variant)
        record = start_record(task)
        while not record.final.done:
            state = record.final
            item = task.rooms[state.room]
            if item >= 0:
                context = record.tokens + observation_tokens(task, state)
                rows.append(context + take)
                kinds.append("pivot" if item == task.goal else "before" if state.room < task.goal_room else "after")
            play(record, action_tokens(solved(task, state)), 0.99)
    length = max(map(len, rows))
    tokens = torch.zeros(len(rows), length, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row)
    with torch.no_grad():
        lp = token_logp(params, tokens)
    logp = [float(lp[i, len(row) - len(take) : len(row)].sum()) for i, row in enumerate(rows)]
    out = {}
    for kind in DECISIONS:
        ps = [math.exp(x) for x, k in zip(logp, kinds, strict=True) if k == kind]
        out[kind] = float(np.mean(ps)) if ps else math.nan
    return out


def _update(params: M.Params, opt: Any, loss: Tensor) -> None:
    """One optimizer step on ``loss``, the gradient's norm clipped at 1."""
    import torch

    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
    opt.step()


def _optimizer(params: M.Params, name: str, lr: float) -> Any:
    import torch

    values = list(params.values())
    return torch.optim.Adam(values, lr=lr) if name == "adam" else torch.optim.SGD(values, lr=lr)


class _Shadow:
    """``Arm.diagnose``: a GRPO copy of the run, started from the same weights and stepped with GRPO's advantages on
    the arm's own rollouts (the same batches, no credit and no continuation rows), so that the arm minus its copy
    isolates what the credit changed within one seed."""

    def __init__(self, start: M.Params, arm: Arm, lr: float, variant: str) -> None:
        self.params, self.arm, self.variant = M.clone(start), arm, variant
        self.opt = _optimizer(self.params, arm.optimizer, lr)

    def step(self, records: Sequence[Record], groups: Sequence[Sequence[Record]]) -> None:
        tokens, mask = token_rows(records)
        adv = turn_advantages_to_tokens(records, grpo_turns(groups), tokens.shape[1])
        _update(self.params, self.opt, policy_loss(token_logp(self.params, tokens), adv, mask, self.arm.aggregation))

    def probe(self, params: M.Params) -> dict[str, float]:
        mine, copy = decision_probs(params, self.variant), decision_probs(self.params, self.variant)
        return mine | {f"grpo_{k}": v for k, v in copy.items()}


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
    opt = _optimizer(params, arm.optimizer, lr)
    engine = Engine(params, slots=1024)
    judge = arm.judge(seed) if arm.judge is not None else None
    out = LLMRun(arm.name, seed, lr, arm.group_size, [0], [start_success], [0], [0])
    shadow = _Shadow(start, arm, lr, variant) if arm.diagnose else None
    if shadow is not None:
        out.probes.append(shadow.probe(params))
    env_steps = tokens_spent = 0
    for step in range(1, steps + 1):
        ts = time.perf_counter()
        sizes = group_sizes(arm.group_size, tasks_per_step, arm.extra_members, step)
        ids = step_tasks(seed, step, tasks_per_step)
        tasks = [make_task(t, variant) for t, n in zip(ids, sizes, strict=True) for _ in range(n)]
        seeds = [[seed, 1000 + step, i] for i in range(len(tasks))]
        records: list[Record] = run(episodes(engine, tasks, seeds))
        bounds = np.cumsum([0, *sizes])
        groups = [records[a:b] for a, b in itertools.pairwise(bounds)]
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
        if shadow is not None:
            shadow.step(records, groups)
        _update(params, opt, policy_loss(token_logp(params, tokens), adv, mask, arm.aggregation))
        env_steps += log.rollout_turns + log.extra_turns
        tokens_spent += log.rollout_tokens + log.extra_tokens
        log.seconds = time.perf_counter() - ts
        out.logs.append(log)
        if step in eval_at:
            out.eval_steps.append(step)
            out.success.append(evaluate(params, eval_tasks, eval_samples, seed, variant))
            if on_eval is not None:
                on_eval(step, params)
            if shadow is not None:
                out.probes.append(shadow.probe(params))
            out.env_steps.append(env_steps)
            out.policy_tokens.append(tokens_spent)
    out.seconds = time.perf_counter() - t0
    if trained is not None:
        trained(params)
    return out
