"""A real model and a real engine end to end: SmolLM2-135M-Instruct on llama-server and in transformers.

Run by ``scripts/test-real-model`` (which starts llama-server and passes ``--url``); not part of the test
suite. Two parts, each printing what it measured (every figure in docs/real-model.md comes from here):

(a) frozen policy on the engine: a menu version of the vault game (``MenuEnv``: the observation lists
    the admissible actions, the action is the first digit the model writes, else ``sum(ids) % 7 + 1``).
    A batch is rolled out on llama-server through :class:`LlamaServerEngine`, then verified through
    ``acompute_bonus`` with :class:`EnginePolicy` (judge: :class:`KeyJudge`, the turn the key was taken).
    Checked: every continuation's first context equals the recorded prefix and every later one extends
    an earlier request by its generated ids and a rendered observation (token-exact); re-tokenising the
    rows' text would change how many; the same seeds give the same tokens when the step is run again
    under other concurrency; Delta against a many-sample truth; wall time and prompt tokens evaluated
    one call at a time, all in flight, and all in flight with slot affinity (ratios against serial,
    same run); the parity monitor (engine logprobs against transformers' on the dequantised weights),
    and a deliberately wrong ``top_k``.
(b) training: the same weights in transformers (dequantised from the GGUF, rebuilt with ``from_config``
    so the Trainer accepts them), a few steps of ``ProverGRPOTrainer`` on CPU with continuations
    in-process (:class:`EnginePolicy` over :class:`TransformersEngine`, the trainer's own model), the
    LLM judge on the same llama-server with :class:`~prover_core.judges.AnchorJudge` where it declines or
    fails (counts printed), the parity monitor on every step, the last step with a wrong ``top_k``;
    wall time per step split into rollout / verification / update.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prover_core import (
    Decline,
    Proposal,
    ProverConfig,
    ProverRun,
    ReplayEnv,
    Segment,
    SegmentRules,
    Step,
    Trajectory,
    Turn,
    acompute_bonus,
)
from prover_core.continuations import env_continuer
from prover_core.demo import MDPEnv
from prover_core.demo.vault import VaultMDP
from prover_core.errors import JudgeError
from prover_core.judges import AnchorJudge
from prover_core.protocols import PolicyContext
from prover_core.verify import verify_segment
from prover_engine import (
    EnginePolicy,
    Generation,
    LlamaServerEngine,
    ParityMonitor,
    SamplingParams,
    TokenStore,
)
from prover_engine.parity import ParitySample, ParityStats, kl_above

SYSTEM = "You play a text adventure. Answer with the number of one action."
MDP = VaultMDP(rooms=3, key_room=1, slip=0.2, horizon=6)
ACTION_TOKENS = 3
THRESHOLD = 0.05
BIG_GAP = 3.0
"""A compared token this many nats off the trainer fails part (a)'s check (4-bit noise: below 0.4 in 2000 tokens)."""
ROLLOUT_TRIES = 3
"""Part (a) rolls out again (new seeds) until a group mixes success and failure, at most this often."""
"""The parity monitor's threshold on KL(engine || trainer), nats a token: the library's default, in both parts."""
FAILED_CHECKS: list[str] = []
"""What the run expected and did not see; any makes the script exit 1."""


def check(ok: bool, what: str) -> None:
    """Record an expectation of the run: printed as ``check ok|FAILED: what``."""
    print(f"check {'ok' if ok else 'FAILED'}: {what}", flush=True)
    if not ok:
        FAILED_CHECKS.append(what)


def say(label: str, **figures: Any) -> None:
    """One line of results: ``label key=value ...`` (floats to 4 significant digits)."""
    parts = [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()]
    print(f"[real-model] {label}: " + " ".join(parts), flush=True)


# -- the game -----------------------------------------------------------------------------------------


class MenuEnv(MDPEnv):
    """The vault with a numbered menu in each observation; the action is a number (1-based, wraps)."""

    def __init__(self) -> None:
        super().__init__(MDP)

    def menu(self) -> tuple[str, ...]:
        actions = self.mdp.actions(self.state)
        return tuple(sorted(actions, key=lambda a: (a not in ("take key", "open vault"), actions.index(a))))

    def _step(self, done: bool = False, success: bool = False) -> Step:
        step = super()._step(done, success)
        if done:
            return step
        choices = " ".join(f"{i + 1}. {a}" for i, a in enumerate(self.menu()))
        return Step(f"{step.observation}\nActions: {choices}", step.done, step.success, step.info)

    def step(self, action: Any) -> Step:
        menu = self.menu()
        return super().step(menu[(int(action) - 1) % len(menu)])


class Chat:
    """SmolLM2's chat format, token ids from the GGUF's tokenizer; text is never re-tokenised afterwards."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.end_of_turn = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def prompt(self, observation: Any) -> list[int]:
        return self.encode(
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n"
        )

    def render(self, observation: Any) -> list[int]:
        """What follows an action: a new user turn (the same rule in the rollout and in continuations)."""
        return self.encode(f"\n<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n")

    def parse(self, ids: Sequence[int]) -> int:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=True)
        digit = re.search(r"\d", text)
        return int(digit.group()) if digit else sum(ids) % 7 + 1


class KeyJudge:
    """Proposes the turn where the successful run took the key (the vault's pivotal decision)."""

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        for t in range(success.num_turns - 1):
            if "glints" in str(success.turns[t].observation) and "carry a brass key" in str(
                success.turns[t + 1].observation
            ):
                return Proposal(segment=Segment(trajectory_id=success.id, start=t, end=t))
        return Decline(reason="no key turn")


class FallbackJudge:
    """The LLM judge; where it declines or fails, AnchorJudge. Counts who answered."""

    def __init__(self, llm: Any, fallback: Any) -> None:
        self.llm, self.fallback = llm, fallback
        self.answered = {"llm": 0, "llm_declined": 0, "llm_failed": 0, "anchor": 0, "anchor_declined": 0}
        self.errors: list[str] = []

    def new_step(self) -> None:
        self.llm.new_step()

    async def propose(
        self,
        success: Trajectory,
        failures: Sequence[Trajectory],
        rules: SegmentRules,
        *,
        others: Sequence[Trajectory] = (),
    ) -> Any:
        try:  # the LLM judge's evidence summary counts the other runs with the examined run's outcome
            answer = await self.llm.propose(success, failures, rules, others=others)
            if isinstance(answer, Proposal):
                self.answered["llm"] += 1
                return answer
            self.answered["llm_declined"] += 1
        except JudgeError as error:
            self.answered["llm_failed"] += 1
            self.errors.append(str(error)[:300])
        answer = self.fallback.propose(success, failures, rules)
        self.answered["anchor" if isinstance(answer, Proposal) else "anchor_declined"] += 1
        return answer


# -- the engine, recorded -----------------------------------------------------------------------------


@dataclass
class Recorder:
    """A TokenEngine that forwards to ``engine`` and keeps ``(prompt, seed, generated ids)`` of every call."""

    engine: Any
    calls: list[tuple[tuple[int, ...], int | None, tuple[int, ...]]]
    seconds: list[float] = field(default_factory=list)
    """Each call's wall time, in the order they returned."""

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        started = time.perf_counter()
        generation: Generation = await self.engine.generate(prompt_ids, params)
        self.seconds.append(time.perf_counter() - started)
        self.calls.append((tuple(prompt_ids), params.seed, generation.token_ids))
        return generation


async def rollout(
    engine: Any, chat: Chat, groups: int, size: int, params: SamplingParams, seed: int
) -> list[tuple[Trajectory, list[int], list[int]]]:
    """``groups x size`` episodes on ``engine``, all in flight; each row recorded token by token."""

    async def episode(g: int, i: int) -> tuple[Trajectory, list[int], list[int]]:
        env = MenuEnv()
        reset = {"seed": seed * 1000 + g * 10 + i}
        step = env.reset(reset)
        prompt, completion, turns = chat.prompt(step.observation), [], []
        for t in range(MDP.horizon):
            gen = await engine.generate(prompt + completion, params.with_seed(seed * 100_000 + g * 1000 + i * 10 + t))
            action = chat.parse(gen.token_ids)
            span = (len(completion), len(completion) + len(gen.token_ids))
            completion += list(gen.token_ids)
            turns.append(Turn(observation=step.observation, action=action, token_span=span))
            step = env.step(action)
            if step.done:
                break
            completion += chat.render(step.observation)
        trajectory = Trajectory(
            id=f"g{g}-{i}", group_id=f"g{g}", reset=reset, turns=tuple(turns), success=bool(step.success)
        )
        return trajectory, prompt, completion

    return list(await asyncio.gather(*(episode(g, i) for g in range(groups) for i in range(size))))


def load_transformers(gguf: Path, cache: Path) -> tuple[Any, Any]:
    """Tokenizer and float32 model from the GGUF (dequantised), cached as safetensors in ``cache``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (cache / "config.json").exists():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # a GGUF-loaded model is flagged quantized: the Trainer refuses it
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.save_pretrained(cache)
        tokenizer.save_pretrained(cache)
    tokenizer = AutoTokenizer.from_pretrained(cache)
    model = AutoModelForCausalLM.from_pretrained(cache, dtype=torch.float32)
    assert getattr(model, "hf_quantizer", None) is None
    return tokenizer, model


# -- (a) frozen policy on llama-server ------------------------------------------------------------


def first_contexts(rows: Mapping[str, tuple[Trajectory, list[int], list[int]]], result: Any) -> set[tuple[int, ...]]:
    """The recorded prefixes before each verified segment's pre and post boundaries."""
    out = set()
    for record in result.report.groups:
        if record.verification is None or record.proposal is None:
            continue
        trajectory, prompt, completion = rows[record.trajectory_id]
        seg = record.proposal.segment
        for b in (seg.start, seg.end + 1):
            if b < trajectory.num_turns:
                span = trajectory.turns[b].token_span
                assert span is not None
                out.add(tuple(prompt + completion[: span[0]]))
    return out


async def verify_step(
    url: str,
    chat: Chat,
    rows: list[tuple[Trajectory, list[int], list[int]]],
    *,
    slots: int | None,
    concurrency: int,
    k: int,
    sampling: SamplingParams,
    parity: ParityMonitor | None = None,
    config: ProverConfig | None = None,
) -> tuple[Any, Recorder, LlamaServerEngine, float]:
    engine = LlamaServerEngine(url, slots=slots, logprobs=True, timeout_s=600.0, max_concurrency=64)
    recorder = Recorder(engine, [])
    store = TokenStore()
    for trajectory, prompt, completion in rows:
        store.add(trajectory, prompt, completion)
    policy = EnginePolicy(
        recorder,
        store,
        render_observation=chat.render,
        parse_action=lambda g: chat.parse(g.token_ids),
        sampling=sampling,
        max_concurrency=concurrency,
        parity=parity,
    )
    started = time.perf_counter()
    async with engine.session():
        result = await acompute_bonus(
            [t for t, _, _ in rows],
            judge=KeyJudge(),
            env=ReplayEnv(MenuEnv),
            policy=policy,
            # both boundaries always run (no curtailment): this Delta is checked against a truth run below
            config=config or ProverConfig(k=k, seed=11, max_concurrency=64, trigger_high=0.99, curtail=False),
        )
    return result, recorder, engine, time.perf_counter() - started


class TracedMonitor(ParityMonitor):
    """A :class:`ParityMonitor` that keeps every sample it scored (to look at its largest gaps) and the
    seconds its scoring took (inside the verification's wall time)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.scored: list[ParitySample] = []
        self.seconds = 0.0

    async def evaluate(self) -> ParityStats:
        self.scored.extend(self.pending)
        started = time.perf_counter()
        try:
            return await super().evaluate()
        finally:
            self.seconds += time.perf_counter() - started


def largest_gaps(monitor: TracedMonitor, score: Any, n: int) -> list[tuple[float, ParitySample, int, float]]:
    """The ``n`` tokens ``monitor`` compared furthest from ``score``'s: ``(gap, sample, position, trainer logprob)``."""
    gaps = []
    for sample in monitor.scored:
        trainer = [float(x) for x in score(sample.context_ids, sample.token_ids)]
        for i, (e, t) in enumerate(zip(sample.engine_logprobs, trainer, strict=True)):
            gaps.append((e - t, sample, i, t))
    return sorted(gaps, key=lambda g: -abs(g[0]))[:n]


def server_top(url: str, ids: Sequence[int], n: int = 1000) -> dict[int, float]:
    """llama-server's logprobs of its ``n`` likeliest next tokens after ``ids``: one request alone, no
    cached prompt, T=1 and no truncation (the distribution the engine's own sampling draws from)."""
    import httpx

    body = LlamaServerEngine(url).payload(ids, SamplingParams(max_tokens=1, seed=0))
    body.update(n_probs=n, post_sampling_probs=True, cache_prompt=False)
    answer = httpx.post(f"{url}/completion", json=body, timeout=600).json()
    entries = answer.get("completion_probabilities") or [{}]  # none if the token ends inside a UTF-8 character
    return {int(p["id"]): math.log(p["prob"]) for p in entries[0].get("top_probs", [])}


def trainer_top(model: Any, ids: Sequence[int], n: int = 1000) -> dict[int, float]:
    """transformers' logprobs of its ``n`` likeliest next tokens after ``ids`` (full softmax, T=1)."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(ids)])).logits[0, -1].float()
    top = torch.log_softmax(logits, -1).topk(n)
    return {int(i): float(v) for i, v in zip(top.indices, top.values, strict=True)}


def explain_gaps(url: str, chat: Chat, model: Any, monitor: TracedMonitor, score: Any, n: int = 3) -> float:
    """Print the ``n`` largest gaps with both sides' distributions on the same ids, the server's asked
    again alone: a context the engine did not see shows as the server agreeing with transformers then;
    quantisation as the server disagreeing again. Returns the largest |gap|."""
    gaps = largest_gaps(monitor, score, n)
    for gap, sample, i, trainer in gaps:
        ids = [*sample.context_ids, *sample.token_ids[:i]]
        token = sample.token_ids[i]
        server, ours = server_top(url, ids), trainer_top(model, ids)
        common = set(server) & set(ours)
        say(
            "(a) parity gap",
            token=repr(chat.tokenizer.decode([token])),
            position=f"{i + 1}/{len(sample.token_ids)}",
            context_tokens=len(sample.context_ids),
            gap=gap,
            engine=sample.engine_logprobs[i],
            trainer=trainer,
            server_alone=f"{server[token]:.4g}" if token in server else f"<{min(server.values(), default=0):.4g}",
            top1000_max_diff=max(abs(server[t] - ours[t]) for t in common) if common else float("nan"),
            server_top=top3(chat, server),
            trainer_top=top3(chat, ours),
        )
    return max((abs(g[0]) for g in gaps), default=0.0)


def top3(chat: Chat, top: dict[int, float]) -> str:
    """The three likeliest tokens of ``top`` (logprobs by id, likeliest first) as ``'piece':logprob``."""
    return " ".join(f"{chat.tokenizer.decode([t])!r}:{v:.2f}" for t, v in list(top.items())[:3])


def part_a(url: str, chat: Chat, model: Any, groups: int, k: int, truth_k: int, verify_groups: int) -> None:
    from prover_trl.parity import model_score

    sampling = SamplingParams(max_tokens=ACTION_TOKENS, seed=None, stop_token_ids=(chat.end_of_turn,))
    rollout_engine = LlamaServerEngine(url, slots=8, timeout_s=600.0)
    # llama-server's tokens depend on how requests batch together, so a batch may hold no group that mixes
    # success and failure: roll out again (new seeds) up to ROLLOUT_TRIES times rather than check nothing
    rows: list[tuple[Trajectory, list[int], list[int]]] = []
    mixed: list[str] = []
    for attempt in range(1, ROLLOUT_TRIES + 1):
        t0 = time.perf_counter()
        rows = asyncio.run(rollout(rollout_engine, chat, groups, 4, sampling, seed=attempt))
        mixed = [
            g for g in {t.group_id for t, _, _ in rows} if 0 < sum(t.success for t, _, _ in rows if t.group_id == g) < 4
        ]
        say(
            "(a) rollout on llama-server",
            attempt=attempt,
            episodes=len(rows),
            successes=sum(t.success for t, _, _ in rows),
            groups_mixed=len(mixed),
            turns=sum(t.num_turns for t, _, _ in rows),
            wall_s=time.perf_counter() - t0,
        )
        if mixed:
            break
    by_id = {t.id: (t, p, c) for t, p, c in rows}
    retok = sum(chat.encode(chat.tokenizer.decode(p + c)) != p + c for _, p, c in rows)
    say("(a) re-tokenising each row's text changes", rows=retok, of=len(rows))
    check(bool(mixed), f"(a) a group mixing success and failure to verify within {ROLLOUT_TRIES} rollouts")
    if not mixed:
        return
    chosen = set(sorted(mixed)[:verify_groups])
    all_rows, rows = rows, [r for r in rows if r[0].group_id in chosen]

    # the same step three ways; the monitor on the affinity run
    score = model_score(model, 1.0)
    runs = {}
    for name, slots, concurrency in (("serial", None, 1), ("concurrent", None, 64), ("affinity", 8, 64)):
        parity = TracedMonitor(score, every=1, seed=0, threshold=THRESHOLD) if name == "affinity" else None
        result, recorder, engine, wall = asyncio.run(
            verify_step(url, chat, rows, slots=slots, concurrency=concurrency, k=k, sampling=sampling, parity=parity)
        )
        runs[name] = (result, recorder, engine, wall, parity)
        say(
            f"(a) verification, {name}",
            engine_calls=len(recorder.calls),
            groups_verified=sum(g.verification is not None for g in result.report.groups),
            wall_s=wall,
            prompt_tokens=engine.stats.prompt_tokens,
            prompt_tokens_evaluated=engine.stats.prompt_tokens_evaluated,
        )
    # latency on the engine path: the library's default schedule and the waiting one, all in flight, slot affinity
    for name, mode in (("default (overlap)", "overlap"), ("curtail_mode='wait'", "wait")):
        config = ProverConfig(k=k, seed=11, max_concurrency=64, trigger_high=0.99, curtail_mode=mode)
        result, recorder, _, wall = asyncio.run(
            verify_step(url, chat, rows, slots=8, concurrency=64, k=k, sampling=sampling, config=config)
        )
        m = result.report.metrics(prefix="")
        request = sorted(recorder.seconds)[len(recorder.seconds) // 2] if recorder.seconds else float("nan")
        say(
            f"(a) latency, {name}",
            verify_policy_rounds=m["verify_policy_rounds"],
            rollout_policy_rounds=m["rollout_policy_rounds"],
            engine_calls=len(recorder.calls),
            policy_turns=m["policy_turns"],
            wall_s=wall,
            median_request_s=request,
            wall_in_requests=wall / request,
        )
    serial = runs["serial"]
    for name in ("concurrent", "affinity"):
        say(
            f"(a) {name} against serial",
            wall_ratio=runs[name][3] / serial[3],
            evaluated_ratio=runs[name][2].stats.prompt_tokens_evaluated
            / max(1, serial[2].stats.prompt_tokens_evaluated),
        )

    # token-exact contexts
    result, recorder = serial[0], serial[1]
    firsts = first_contexts(by_id, result)
    extended = {p + g for p, _, g in recorder.calls}
    first = sum(p in firsts for p, _, _ in recorder.calls)
    head = tuple(chat.encode("\n<|im_start|>user\n"))
    chained = sum(
        p not in firsts and any(p[: len(e)] == e and p[len(e) : len(e) + len(head)] == head for e in extended)
        for p, _, _ in recorder.calls
    )
    expected_firsts = sum(
        (g.verify_stats.spent if g.verify_stats else 0) for g in result.report.groups if g.verification is not None
    )
    say(
        "(a) contexts",
        first_requests_equal_to_recorded_prefix=first,
        continuations=expected_firsts,
        later_requests_extending_an_earlier_one=chained,
        later_requests=len(recorder.calls) - first,
    )

    # same seeds, same tokens, across the three runs (different concurrency)
    def answers(rec: Recorder) -> dict[tuple[tuple[int, ...], int | None], tuple[int, ...]]:
        return {(p, s): g for p, s, g in rec.calls}

    base = answers(serial[1])
    for name in ("concurrent", "affinity"):
        other = answers(runs[name][1])
        common = set(base) & set(other)
        say(
            f"(a) same seed same tokens, serial vs {name}",
            equal=sum(base[c] == other[c] for c in common),
            of=len(common),
        )

    parity = runs["affinity"][4]
    assert parity is not None
    m = parity.metrics()
    say(
        "(a) parity, llama-server (Q4_1) vs transformers (dequantised)",
        kl=m["engine_kl"],
        kl_se=m["engine_kl_se"],
        gap_mean=m["engine_logprob_gap_mean"],
        gap_max=m["engine_logprob_gap_max"],
        tokens=int(m["engine_logprob_gap_tokens"]),
        actions=int(m["engine_logprob_gap_actions"]),
        warned=parity.stats.above(THRESHOLD),
        scoring_s=parity.seconds if isinstance(parity, TracedMonitor) else float("nan"),
    )
    check(m["engine_logprob_gap_tokens"] >= 2, "(a) the monitor compared tokens")
    check(not parity.stats.above(THRESHOLD), "(a) the engine's own sampling does not trip the monitor")
    assert isinstance(parity, TracedMonitor)
    biggest = explain_gaps(url, chat, model, parity, score)
    check(biggest <= BIG_GAP, f"(a) no token the engine sampled is more than {BIG_GAP:g} nats off the trainer")
    wrong = ParityMonitor(score, every=1, seed=0, threshold=THRESHOLD)
    engine = LlamaServerEngine(url, slots=8, logprobs=True, timeout_s=600.0)
    # every rollout row's context before its second action (or its prompt): as many tokens as the run has
    some = [
        (p + c[: t.turns[1].token_span[0]] if t.num_turns > 1 and t.turns[1].token_span else p) for t, p, c in all_rows
    ]
    t0 = time.perf_counter()

    async def wrong_top_k() -> None:
        gens = await asyncio.gather(
            *(engine.generate(ids, replace(sampling, top_k=5, seed=i)) for i, ids in enumerate(some))
        )
        for ids, gen in zip(some, gens, strict=True):
            wrong.offer(ids, gen)
        await wrong.evaluate()

    asyncio.run(wrong_top_k())
    m = wrong.metrics()
    say(
        "(a) parity, wrong top_k=5 on the engine",
        kl=m["engine_kl"],
        kl_se=m["engine_kl_se"],
        gap_mean=m["engine_logprob_gap_mean"],
        gap_max=m["engine_logprob_gap_max"],
        tokens=int(m["engine_logprob_gap_tokens"]),
        warned=wrong.stats.above(THRESHOLD),
        wall_s=time.perf_counter() - t0,
    )
    check(wrong.stats.above(THRESHOLD), "(a) a wrong top_k=5 on the engine trips the monitor")
    engines = [rollout_engine, *(run[2] for run in runs.values()), engine]
    say(
        "(a) answers whose slot ended holding other tokens (llama-server swapped its KV cache mid-request)",
        count=sum(e.stats.slot_changed for e in engines),
        of=sum(e.stats.requests for e in engines),
    )
    check(all(e.stats.slot_changed == 0 for e in engines), "(a) every answer was sampled from the context sent")

    # Delta against a many-sample truth, for the first verified group
    verified = [g for g in result.report.groups if g.verification is not None and g.proposal is not None]
    if verified:
        record = verified[0]
        v = record.verification
        assert v is not None and record.proposal is not None and record.trajectory_id is not None
        trajectory = by_id[record.trajectory_id][0]
        truth_store = TokenStore()
        truth_store.add(*by_id[record.trajectory_id])
        engine = LlamaServerEngine(url, slots=8, timeout_s=600.0)
        policy = EnginePolicy(
            engine,
            truth_store,
            render_observation=chat.render,
            parse_action=lambda g: chat.parse(g.token_ids),
            sampling=sampling,
        )
        config = ProverConfig(k=truth_k, seed=12345, max_concurrency=64, curtail=False)
        continuer = env_continuer(ReplayEnv(MenuEnv), policy, config.max_continuation_turns)
        t0 = time.perf_counter()
        truth = asyncio.run(verify_segment(trajectory, record.proposal.segment, continuer, config.stages.verify))
        se = math.sqrt(
            truth.pre_rate * (1 - truth.pre_rate) / max(1, v.pre_count)
            + truth.post_rate * (1 - truth.post_rate) / max(1, v.post_count)
        )
        say(
            "(a) Delta against the truth",
            k=v.pre_count,
            delta=v.delta,
            truth_k=truth.pre_count,
            truth_delta=truth.delta,
            truth_p_pre=truth.pre_rate,
            truth_p_post=truth.post_rate,
            standard_errors=abs(v.delta - truth.delta) / se if se > 0 else float("nan"),
            wall_s=time.perf_counter() - t0,
        )

        # the same segment with Delta of choices: the segment's actions replayed with fresh transitions
        off_path = [0]

        class Counting:
            """``policy``, counting first actions taken off the recorded path after a replay."""

            async def act(self, context: PolicyContext) -> Any:
                b = context.boundary
                if context.replayed and b is not None and len(context.history) == b and b < trajectory.num_turns:
                    off_path[0] += context.observation != trajectory.turns[b].observation
                return await policy.act(context)

        choices_config = ProverConfig(k=2 * k, seed=54321, max_concurrency=64, delta_of="choices", curtail=False)
        continuer = env_continuer(ReplayEnv(MenuEnv), Counting(), choices_config.max_continuation_turns)
        t0 = time.perf_counter()
        choices = asyncio.run(
            verify_segment(trajectory, record.proposal.segment, continuer, choices_config.stages.verify)
        )
        say(
            "(a) Delta of choices on the engine",
            k=choices.pre_count,
            post_count=choices.post_count,
            delta=choices.delta,
            state_delta_truth=truth.delta,
            off_path_continuations=off_path[0],
            incomplete=choices.incomplete,
            wall_s=time.perf_counter() - t0,
        )
        check(
            not choices.incomplete and choices.pre_count == choices.post_count == 2 * k,
            "(a) delta_of='choices' verifies on the real engine (every continuation finished)",
        )


# -- (b) training in transformers ---------------------------------------------------------------------


class TransformersEngine:
    """A TokenEngine over a transformers causal LM in this process (one context per call, seeded).

    ``generate`` samples with every field of SamplingParams (``top_k`` 0: off) and returns each token's
    logprob under the distribution it was drawn from (``log_softmax`` of the processed scores).
    """

    def __init__(self, model: Any, pad_token_id: int) -> None:
        self.model, self.pad = model, pad_token_id

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        import torch
        from transformers import GenerationConfig

        config = GenerationConfig(
            max_new_tokens=params.max_tokens,
            do_sample=params.temperature > 0,
            temperature=params.temperature or 1.0,
            top_k=params.top_k,
            top_p=params.top_p,
            min_p=params.min_p or None,
            repetition_penalty=params.repetition_penalty,
            eos_token_id=list(params.stop_token_ids) or None,
            pad_token_id=self.pad,
            output_scores=True,
            return_dict_in_generate=True,
        )
        model = self.model
        was_training = model.training
        model.eval()
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                torch.manual_seed(int(params.seed or 0))
                out = model.generate(input_ids=torch.tensor([list(prompt_ids)]), generation_config=config)
        finally:
            model.train(was_training)
        ids = [int(t) for t in out.sequences[0, len(prompt_ids) :]]
        if params.stop_token_ids:
            stops = set(params.stop_token_ids)
            cut = next((i + 1 for i, t in enumerate(ids) if t in stops), len(ids))
            ids = ids[:cut]
        logprobs = tuple(float(torch.log_softmax(out.scores[i][0].float(), -1)[t]) for i, t in enumerate(ids))
        return Generation(tuple(ids), logprobs=logprobs)


def part_b(url: str | None, chat: Chat, model: Any, steps: int, k: int, batch: int) -> None:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig

    from prover_core.judges.llm import LLMJudge
    from prover_trl import ProverGRPOTrainer, ProverSetup, make_rollout_func, success_reward
    from prover_trl.parity import trainer_score

    timings: dict[str, float] = {"rollout": 0.0, "verification": 0.0}
    rollout_fn = make_rollout_func(
        MenuEnv,
        max_turns=MDP.horizon,
        reset_spec=lambda prompt, row, g: {"seed": 7000 + row},
        render_observation=chat.render,
        parse_action=chat.parse,
        render_prompt=lambda prompt, obs: chat.prompt(obs),
        max_action_tokens=ACTION_TOKENS,
    )

    def timed_rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            return rollout_fn(prompts, trainer)
        finally:
            timings["rollout"] += time.perf_counter() - t0

    plain_verify = ProverRun.verify  # the trainer verifies through its ProverRun (issue 52)

    def timed_verify(run: ProverRun, *args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return plain_verify(run, *args, **kw)
        finally:
            timings["verification"] += time.perf_counter() - t0

    ProverRun.verify = timed_verify  # type: ignore[method-assign]
    anchor = AnchorJudge(min_failures=1)
    judge: Any = anchor
    if url:
        llm = LLMJudge.from_url(
            f"{url}/v1",
            "smollm2",
            max_tokens=256,
            timeout_s=300.0,
            max_attempts=1,
            answer_form="span",  # a start turn and a length: every answer the grammar allows is admissible
            evidence_summary=True,
        )
        judge = FallbackJudge(llm, anchor)
    monitors: list[ParityMonitor] = []
    engines: list[TransformersEngine] = []

    def policy(trainer: Any) -> EnginePolicy:
        monitor = ParityMonitor(trainer_score(trainer), every=1, seed=0, threshold=THRESHOLD)
        engine = TransformersEngine(trainer.accelerator.unwrap_model(trainer.model), chat.end_of_turn)
        monitors.append(monitor)
        engines.append(engine)
        return EnginePolicy(
            engine,
            TokenStore(),
            render_observation=chat.render,
            parse_action=lambda g: chat.parse(g.token_ids),
            sampling=SamplingParams(
                max_tokens=ACTION_TOKENS, temperature=float(trainer.temperature), stop_token_ids=(chat.end_of_turn,)
            ),
            max_concurrency=1,
            parity=monitor,
        )

    step_times: list[dict[str, float]] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.started, self.before = 0.0, dict(timings)

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.started, self.before = time.perf_counter(), dict(timings)
            say("(b) step begins", step=state.global_step + 1)
            if state.global_step == steps:  # the last step: a deliberately wrong top_k on the continuations
                pol = trainer.prover_policy
                pol.sampling = replace(pol.sampling, top_k=5)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            total = time.perf_counter() - self.started
            part = {k: timings[k] - self.before[k] for k in timings}
            step_times.append({"total": total, **part, "update": total - sum(part.values())})

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not logs or "prover/groups" not in logs or not step_times:
                return
            i = len(step_times) - 1
            times = step_times[-1]
            say(
                f"(b) step {i + 1}" + (", WRONG top_k=5 continuations" if i == steps else ""),
                loss=float(logs.get("loss", float("nan"))),
                reward=float(logs.get("reward", float("nan"))),
                groups_verified=int(logs["prover/groups_verified"]),
                groups_accepted=int(logs["prover/groups_accepted"]),
                continuations=int(logs["prover/continuations"]),
                kl=float(logs.get("prover/engine_kl", float("nan"))),
                kl_se=float(logs.get("prover/engine_kl_se", float("nan"))),
                gap_mean=float(logs.get("prover/engine_logprob_gap_mean", float("nan"))),
                gap_max=float(logs.get("prover/engine_logprob_gap_max", float("nan"))),
                gap_tokens=int(logs.get("prover/engine_logprob_gap_tokens", 0)),
                total_s=times["total"],
                rollout_s=times["rollout"],
                verification_s=times["verification"],
                update_s=times["update"],
            )
            tokens = float(logs.get("prover/engine_logprob_gap_tokens", 0))
            warned = kl_above(
                float(logs.get("prover/engine_kl", 0.0)), float(logs.get("prover/engine_kl_se", 0.0)), tokens, THRESHOLD
            )
            if tokens > 0:  # compared tokens this step
                if i == steps:
                    check(warned, "(b) continuations with a wrong top_k=5 trip the monitor")
                else:
                    check(not warned, f"(b) step {i + 1}'s continuations do not trip the monitor")

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="prover-real-"),
        per_device_train_batch_size=batch,
        num_generations=4,
        max_steps=steps + 1,
        max_completion_length=ACTION_TOKENS,
        learning_rate=1e-5,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        temperature=1.0,
        gradient_checkpointing=False,  # TRL turns it on by default: twice the compute of a backward pass
        seed=3,
    )
    trainer = ProverGRPOTrainer(
        model=model,
        reward_funcs=success_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["vault"] * 64}),
        processing_class=chat.tokenizer,
        rollout_func=timed_rollout,
        callbacks=[Clock()],
        prover=ProverSetup(
            judge=judge,
            env=ReplayEnv(MenuEnv),
            policy=policy,
            config=ProverConfig(k=k, seed=5, trigger_high=0.99),
        ),
    )
    trainer.train()
    if isinstance(judge, FallbackJudge):
        say("(b) judge answers", **judge.answered)
        for error in judge.errors:
            say("(b) the LLM judge failed", error=repr(error))
    else:
        say("(b) judge", name="AnchorJudge(min_failures=1)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="llama-server root URL; without it only part (b) runs")
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--hf-cache", type=Path, required=True)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--truth-k", type=int, default=12)
    parser.add_argument("--verify-groups", type=int, default=1, help="mixed groups verified in (a)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--train-k", type=int, default=2)
    parser.add_argument("--train-batch", type=int, default=4, help="rows per step (groups of 4)")
    parser.add_argument("--parts", default="ab")
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    t0 = time.perf_counter()
    tokenizer, model = load_transformers(opts.gguf, opts.hf_cache)
    chat = Chat(tokenizer)
    say(
        "transformers model loaded",
        wall_s=time.perf_counter() - t0,
        parameters=sum(p.numel() for p in model.parameters()),
    )
    if "a" in opts.parts and opts.url:
        part_a(opts.url, chat, model, opts.groups, opts.k, opts.truth_k, opts.verify_groups)
    if "b" in opts.parts:
        part_b(opts.url, chat, model, opts.steps, opts.train_k, opts.train_batch)
    say("done", wall_s=time.perf_counter() - t0, failed_checks=len(FAILED_CHECKS))
    if FAILED_CHECKS:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
