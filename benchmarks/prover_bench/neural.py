"""Training a shared linear-softmax policy on a family of tasks: GRPO, budget-matched GRPO and ProVer.

Every optimizer step draws ``tasks_per_step`` of the ``train_tasks`` tasks (:mod:`family`), runs
``group_size`` members per task, computes each method's per-turn credit ``A_{i,t}`` and takes an Adam
step on ``W`` along

    g = (1/N) sum_{i,t} A_{i,t} grad_W log pi(a_t | s_t),   grad_W log pi(a | s) = (e_a - pi(. | s)) phi(s)^T.

After each step the exact success probability of ``W`` on the ``test_tasks`` held-out tasks is recorded
with the environment steps spent so far (rollout turns plus continuation turns).

ProVer here is the paper's pipeline, vectorised: trigger (group success rate in (0, 0.5)),
representative (shortest success, ties to the lowest index), a judge's segment ``[l, r]`` (``r`` before
the last turn), ``K`` continuations from ``s_l`` at turn ``l`` and from ``s_{r+1}`` at turn ``r + 1``
(pair ``i`` shares a seed; :func:`family.rollout` keys the draws by absolute turn or sequentially),
``Delta`` = the difference of the success rates, accepted iff ``Delta > 0``, ``A_GRPO + lam Delta`` on
the segment. Judges: ``rule`` (the :class:`~prover_core.judges.DivergenceJudge` rule on observation
ids, :func:`divergence`), ``oracle`` (the turn with the largest exact advantage), ``random`` (a uniform
admissible segment of at most 4 turns, as :class:`~prover_core.judges.RandomJudge`).

With ``free_samples``, group members that reached a boundary state (:mod:`prover_bench.free_samples`)
replace up to ``K / 2`` of its continuations; they are selection-biased (see that module), so this is
off by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from prover_bench import family as F
from prover_bench.family import Family, FloatArray, Keying
from prover_bench.free_samples import matching_members
from prover_bench.methods import continuation_advantages

JudgeName = Literal["rule", "oracle", "random"]


@dataclass(frozen=True)
class Method:
    """One training method: plain GRPO (``judge=None``) or ProVer with a judge."""

    name: str
    judge: JudgeName | None = None
    keying: Keying = "turn"
    free_samples: bool = False
    continuation_data: bool = False
    """Train on the continuations too: each a partial trajectory with advantage :func:`continuation_advantages`."""
    matched: bool = False
    """GRPO with ProVer's (rule judge) extra environment steps spent as more group members."""


@dataclass
class StepLog:
    rollout_turns: int = 0
    extra_turns: int = 0
    eligible: int = 0
    verified: int = 0
    accepted: int = 0
    free: int = 0
    harmless_accepted: int = 0
    """Accepted segments whose exact effect ``V(s_post) - V(s_pre)`` is at most 0.02."""


@dataclass
class NeuralRun:
    method: str
    seed: int
    lr: float
    group_size: int
    success: list[float]
    env_steps: list[int]
    logs: list[StepLog] = field(default_factory=list)

    def at_env_steps(self, budget: float) -> float:
        """Held-out success once ``budget`` environment steps are spent (linear interpolation)."""
        return float(np.interp(budget, self.env_steps, self.success))

    def extra_share(self, lo: int = 0, hi: int | None = None) -> float:
        logs = self.logs[lo:hi]
        rollout = sum(x.rollout_turns for x in logs)
        return sum(x.extra_turns for x in logs) / rollout if rollout else 0.0


def divergence(obs: list[list[int]], acts: list[list[int]], rep: int, failures: Sequence[int]) -> int | None:
    """The turn :class:`~prover_core.judges.DivergenceJudge` nominates on integer observations, or ``None``.

    A divergence is a turn ``t <= T - 2`` of the representative whose observation some failed run saw
    and where none took its action; preferred: next observation new to the failures, then the most
    such failed runs, then the earliest.
    """
    seen: dict[int, list[set[int]]] = {}
    for f in failures:
        taken: dict[int, set[int]] = {}
        for o, a in zip(obs[f], acts[f], strict=True):
            taken.setdefault(o, set()).add(a)
        for o, a_set in taken.items():
            seen.setdefault(o, []).append(a_set)
    best: tuple[bool, int, int] | None = None
    ro, ra = obs[rep], acts[rep]
    for t in range(len(ro) - 1):
        runs = seen.get(ro[t], [])
        if runs and all(ra[t] not in s for s in runs):
            key = (ro[t + 1] not in seen, len(runs), -t)
            best = key if best is None or key > best else best
    return None if best is None else -best[2]


def _seeds(seed: int, step: int, block: int, count: int) -> NDArray[np.uint64]:
    base = (seed << 40) + (step << 20) + (block << 10)
    out: NDArray[np.uint64] = np.uint64(base) + np.arange(count, dtype=np.uint64)
    return out


def train_run(
    method: Method,
    seed: int,
    lr: float,
    train: Family,
    test: Family,
    steps: int,
    tasks_per_step: int = 16,
    group_size: int = 8,
    k: int = 8,
    lam: float = 1.0,
) -> NeuralRun:
    """One run; ``seed`` fixes the tasks drawn and every random number (paired across methods)."""
    w = F.initial_weights()
    m1, m2 = np.zeros_like(w), np.zeros_like(w)
    task_rng = np.random.default_rng([seed, 0])
    run = NeuralRun(method.name, seed, lr, group_size, [float(F.success(test, w).mean())], [0])
    spent = 0
    for step in range(steps):
        chosen = task_rng.choice(train.n, tasks_per_step, replace=False)
        sub = train.subset(chosen)
        pi = F.policy(sub, w)
        n = tasks_per_step * group_size
        tasks = np.repeat(np.arange(tasks_per_step), group_size)
        seeds = _seeds(seed, step, 0, n)
        ro = F.rollout(sub, pi, tasks, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), seeds, "turn")
        reward = ro.success.astype(np.float64).reshape(tasks_per_step, group_size)
        adv = (reward - reward.mean(axis=1, keepdims=True)).reshape(-1)
        mask = ro.states >= 0
        per_turn = np.where(mask, adv[:, None], 0.0)
        log = StepLog(rollout_turns=int(ro.length.sum()))
        extra = None
        if method.judge is not None:
            extra = _prover(method, sub, pi, ro, per_turn, log, seed, step, group_size, k, lam)
        spent += log.rollout_turns + log.extra_turns
        g = _gradient(sub, pi, ro, per_turn, mask)
        if method.continuation_data and extra is not None:
            cont, cont_adv = extra
            g = g + _gradient(sub, pi, cont, cont_adv, cont.states >= 0)
            n += len(cont.tasks)
        g = g / n
        m1 = 0.9 * m1 + 0.1 * g
        m2 = 0.999 * m2 + 0.001 * g * g
        w = w + lr * (m1 / (1 - 0.9 ** (step + 1))) / (np.sqrt(m2 / (1 - 0.999 ** (step + 1))) + 1e-8)
        run.success.append(float(F.success(test, w).mean()))
        run.env_steps.append(spent)
        run.logs.append(log)
    return run


def _gradient(sub: Family, pi: FloatArray, ro: F.Rollouts, per_turn: FloatArray, mask: NDArray[np.bool_]) -> FloatArray:
    """``sum_{i,t} A_{i,t} (e_{a_t} - pi(. | s_t)) phi(s_t)^T`` over the taken turns."""
    rows = np.broadcast_to(ro.tasks[:, None], mask.shape)[mask]
    s, a, adv = ro.states[mask], ro.actions[mask], per_turn[mask]
    e = -pi[rows, s]
    e[np.arange(a.shape[0]), a] += 1.0
    out: FloatArray = (adv[:, None] * e).T @ sub.phi[rows, s]
    return out


def _prover(
    method: Method,
    sub: Family,
    pi: FloatArray,
    ro: F.Rollouts,
    per_turn: FloatArray,
    log: StepLog,
    seed: int,
    step: int,
    group_size: int,
    k: int,
    lam: float,
) -> tuple[F.Rollouts, FloatArray] | None:
    """Add ``lam * Delta`` on each accepted segment to ``per_turn`` (in place) and log the cost.

    Returns the continuations and their per-turn advantages (:func:`continuation_advantages`), or ``None``.
    """
    judge_rng = np.random.default_rng([seed, step, 7])
    values = F.values(sub, pi)
    plans: list[tuple[int, int, int, int]] = []  # (group, rep, l, r)
    for g in range(sub.n):
        members = range(g * group_size, (g + 1) * group_size)
        wins = [i for i in members if ro.success[i]]
        if not 0 < len(wins) / group_size < 0.5:
            continue
        log.eligible += 1
        rep = min(wins, key=lambda i: (int(ro.length[i]), i))
        length = int(ro.length[rep])
        if length < 2:
            continue
        if method.judge == "rule":
            obs = [sub.obs[g, ro.states[i, : ro.length[i]]].tolist() for i in members]
            acts = [ro.actions[i, : ro.length[i]].tolist() for i in members]
            fails = [i - members[0] for i in members if not ro.success[i]]
            t = divergence(obs, acts, rep - members[0], fails)
            if t is None:
                continue
            plans.append((g, rep, t, t))
        elif method.judge == "oracle":
            h = sub.horizon[g] - np.arange(length)
            v = values[h, g, ro.states[rep, :length]]
            gain = np.append(v[1:], 1.0) - v
            t = int(np.argmax(gain[: length - 1]))
            plans.append((g, rep, t, t))
        else:
            cands = [(s, e) for s in range(length - 1) for e in range(s, min(length - 2, s + 3) + 1)]
            s, e = cands[int(judge_rng.integers(len(cands)))]
            plans.append((g, rep, s, e))
    if not plans:
        return None
    starts, counts, owners = [], [], []
    free_sum = np.zeros((len(plans), 2))
    free_n = np.zeros((len(plans), 2), dtype=np.int64)
    for j, (g, rep, start, end) in enumerate(plans):
        for side, b in enumerate((start, end + 1)):
            n_cont = k
            if method.free_samples:
                others = [i for i in range(g * group_size, (g + 1) * group_size) if i != rep]
                same = matching_members(ro.states, ro.actions, ro.length, rep, others, b)
                same = same[: k // 2]
                free_sum[j, side] = float(ro.success[same].sum()) if same else 0.0
                free_n[j, side] = len(same)
                n_cont = k - len(same)
                log.free += len(same)
            starts.append((g, int(ro.states[rep, b]), b))
            counts.append(n_cont)
            owners.append((j, side))
    tasks = np.repeat([s[0] for s in starts], counts)
    states = np.repeat([s[1] for s in starts], counts)
    turns = np.repeat([s[2] for s in starts], counts)
    pair = np.concatenate([np.arange(c) for c in counts])
    plan_of = np.repeat([o[0] for o in owners], counts)
    seeds = _seeds(seed, step, 512, 1)[0] + (plan_of * 64 + pair).astype(np.uint64)
    cont = F.rollout(sub, pi, tasks, states, turns, seeds, method.keying)
    log.extra_turns += int(cont.length.sum())
    log.verified += len(plans)
    won = np.zeros((len(plans), 2))
    ran = np.zeros((len(plans), 2))
    side_of = np.repeat([o[1] for o in owners], counts)
    np.add.at(won, (plan_of, side_of), cont.success.astype(np.float64))
    np.add.at(ran, (plan_of, side_of), 1.0)
    rate = (won + free_sum) / np.maximum(ran + free_n, 1)
    for j, (g, rep, start, end) in enumerate(plans):
        delta = rate[j, 1] - rate[j, 0]
        if delta > 0:
            log.accepted += 1
            per_turn[rep, start : end + 1] += lam * delta
            h = int(sub.horizon[g])
            exact = values[h - end - 1, g, ro.states[rep, end + 1]] - values[h - start, g, ro.states[rep, start]]
            log.harmless_accepted += int(exact <= 0.02)
    boundary = plan_of * 2 + side_of
    adv = continuation_advantages(cont.success.astype(np.float64), boundary)
    return cont, np.where(cont.states >= 0, adv[:, None], 0.0)


def matched_group_size(group_size: int, share: float) -> int:
    """Budget-matched GRPO: ``max(G + 1, round(G (1 + share)))`` members per task."""
    return max(group_size + 1, round(group_size * (1 + share)))


def families(train_tasks: int = 256, test_tasks: int = 128, family_seed: int = 0) -> tuple[Family, Family]:
    """The training and held-out tasks (disjoint draws from :func:`family.make_family`)."""
    rng = np.random.default_rng([family_seed, 2026])
    return F.make_family(train_tasks, rng), F.make_family(test_tasks, rng)


def sweep(
    methods: Sequence[Method],
    lrs: Sequence[float],
    seeds: int,
    steps: int,
    train_tasks: int = 256,
    test_tasks: int = 128,
    tasks_per_step: int = 16,
    group_size: int = 8,
    k: int = 8,
    family_seed: int = 0,
    progress: bool = False,
) -> tuple[dict[str, dict[float, list[NeuralRun]]], dict[float, int]]:
    """Every method at every lr over ``seeds`` paired seeds; matched GRPO sized from ProVer (rule) per lr."""
    from prover_bench.progress import progress as bar

    train, test = families(train_tasks, test_tasks, family_seed)
    runs: dict[str, dict[float, list[NeuralRun]]] = {m.name: {lr: [] for lr in lrs} for m in methods}
    sizes: dict[float, int] = {}
    order = sorted(methods, key=lambda m: (m.matched, m.judge != "rule"))
    jobs = [(lr, m) for lr in lrs for m in order]
    for lr, m in bar(jobs, len(jobs), "neural miniature", progress):
        size = group_size
        if m.matched:
            ref = next(
                x
                for x in methods
                if x.judge == "rule" and x.keying == "turn" and not x.free_samples and not x.continuation_data
            )
            done = runs[ref.name][lr]
            share = sum(r.extra_share() * sum(x.rollout_turns for x in r.logs) for r in done) / sum(
                sum(x.rollout_turns for x in r.logs) for r in done
            )
            size = sizes.setdefault(lr, matched_group_size(group_size, share))
        for s in range(seeds):
            runs[m.name][lr].append(train_run(m, s, lr, train, test, steps, tasks_per_step, size, k))
    return runs, sizes


DEFAULT_METHODS = (
    Method("GRPO"),
    Method("GRPO budget-matched", matched=True),
    Method("ProVer, rule judge", "rule"),
    Method("ProVer, oracle judge", "oracle"),
    Method("ProVer, random judge", "random"),
    Method("ProVer, rule judge, sequential pairing", "rule", keying="sequential"),
    Method("ProVer, rule judge, free samples", "rule", free_samples=True),
    Method("ProVer, rule judge, continuations as data", "rule", continuation_data=True),
)
"""The rows of the benchmark (turn-keyed pairing unless named)."""


def free_sample_bias(
    fam: Family, w: FloatArray, batches: int, tasks_per_step: int = 16, group_size: int = 8, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """Bias of free samples at the rule judge's boundaries, against exact values.

    For each verified group and each boundary ``b`` (pre ``l``, post ``r + 1``): ``R_j - V(s_b)`` for
    every member ``j`` that reached ``s_b`` (the representative excluded). Returns per boundary
    ``(mean, 95% half-width over batches, free samples per verification)``.
    """
    from prover_bench.progress import mean_ci

    rng = np.random.default_rng([seed, 99])
    pi_all = F.policy(fam, w)
    out: dict[str, list[float]] = {"pre": [], "post": []}
    counts = {"pre": 0, "post": 0}
    plans = 0
    for batch in range(batches):
        chosen = rng.choice(fam.n, tasks_per_step, replace=False)
        sub = fam.subset(chosen)
        pi = pi_all[chosen]
        values = F.values(sub, pi)
        n = tasks_per_step * group_size
        zero = np.zeros(n, dtype=np.int64)
        ro = F.rollout(sub, pi, np.repeat(np.arange(tasks_per_step), group_size), zero, zero, _seeds(seed, batch, 0, n))
        errors: dict[str, list[float]] = {"pre": [], "post": []}
        for g in range(tasks_per_step):
            members = list(range(g * group_size, (g + 1) * group_size))
            wins = [i for i in members if ro.success[i]]
            if not 0 < len(wins) / group_size < 0.5:
                continue
            rep = min(wins, key=lambda i: (int(ro.length[i]), i))
            obs = [sub.obs[g, ro.states[i, : ro.length[i]]].tolist() for i in members]
            acts = [ro.actions[i, : ro.length[i]].tolist() for i in members]
            t = divergence(obs, acts, rep - members[0], [i - members[0] for i in members if not ro.success[i]])
            if t is None:
                continue
            plans += 1
            for side, b in (("pre", t), ("post", t + 1)):
                same = matching_members(ro.states, ro.actions, ro.length, rep, [i for i in members if i != rep], b)
                v = values[int(sub.horizon[g]) - b, g, ro.states[rep, b]]
                errors[side] += [float(ro.success[j]) - v for j in same]
                counts[side] += len(same)
        for side in out:
            if errors[side]:
                out[side].append(float(np.mean(errors[side])))
    return {side: (*mean_ci(vals), counts[side] / max(plans, 1)) for side, vals in out.items()}
