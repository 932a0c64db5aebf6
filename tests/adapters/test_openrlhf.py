"""ProverExperienceMaker on real OpenRLHF ``Experience`` objects (openrlhf 0.11.2, CPU).

The code under test is OpenRLHF's own ``RemoteExperienceMaker`` (its ``split_rollout_samples`` and
``compute_advantages_and_returns``) and ``MultiTurnAgentExecutor``, run through the adapter's
subclasses. On CPU, ``prover_openrlhf.cpu.import_openrlhf_on_cpu`` loads OpenRLHF's modules
without running two package initialisers that need CUDA builds (``openrlhf/trainer/ray/__init__.py``
imports vLLM; ``flash_attn/__init__.py`` imports its CUDA kernels); nothing is stubbed. What stands in
for hardware: ``strategy`` is a namespace holding ``args`` (the only attribute the maker reads), the
model forward pass is skipped (``kl`` is set to zeros, as ``make_experience`` does with no reference
model), and a scripted engine replaces vLLM's ``generate`` in the executor test.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import string
from types import SimpleNamespace as NS
from typing import Any

import numpy as np
import pytest

from tests.hosts import require_host

require_host("openrlhf")

from prover_openrlhf.cpu import import_openrlhf_on_cpu  # noqa: E402

import_openrlhf_on_cpu()

import torch  # noqa: E402
from openrlhf.trainer.ppo_utils import Experience  # noqa: E402
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker  # noqa: E402
from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController  # noqa: E402
from openrlhf.utils.agent import AgentInstanceBase  # noqa: E402

from prover_core import DivergenceJudge, Outcome, Proposal, ProverConfig, Segment  # noqa: E402
from prover_openrlhf import (  # noqa: E402
    EpisodeRecord,
    ExperienceBatchError,
    LocalRecordStore,
    ProverSetup,
    SetupError,
    mask_runs,
    record_key,
)
from prover_openrlhf.experience_maker import BONUS_INFO_KEY, ProverExperienceMaker  # noqa: E402
from prover_openrlhf.recorder import RecordingAgentExecutor  # noqa: E402
from prover_openrlhf.restore import AgentInstanceEnv  # noqa: E402

N = 4  # n_samples_per_prompt
PROMPT = [5, 6, 7]

# Sample layouts: one (action tokens, feedback tokens) pair per turn; the sequence is
# PROMPT + a_0 + f_0 + a_1 + f_1 + ... . Group 0 = samples 0..3 (only sample 1 succeeds: eligible),
# group 1 = samples 4..7 (2 of 4 succeed: not eligible).
LAYOUTS: list[list[tuple[int, int]]] = [
    [(2, 1), (3, 2), (1, 0)],
    [(2, 2), (3, 1), (2, 0)],  # the successful run: turns 0 and 1 form the segment
    [(4, 1), (2, 0)],
    [(1, 1), (1, 1), (1, 1), (2, 0)],
    [(3, 0)],
    [(2, 1), (2, 0)],
    [(1, 2), (5, 0)],
    [(2, 2), (2, 2), (1, 0)],
]
REWARDS = [0, 1, 0, 0, 1, 1, 0, 0]
SUCCESS = 1
SEGMENT = (0, 1)
PRE_SUCCESSES, POST_SUCCESSES = 2, 6  # of K = 8: Delta = 6/8 - 2/8 = 0.5
LAM = 0.5
BONUS = LAM * 0.5


def sample_tokens(layout: list[tuple[int, int]]) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and the executor's action ranges (positions in the full sequence)."""
    tokens = list(PROMPT)
    ranges = []
    for t, (a, f) in enumerate(layout):
        ranges.append((len(tokens), len(tokens) + a))
        tokens += [100 + t] * a + [200 + t] * f
    return tokens, ranges


def record_of(i: int) -> EpisodeRecord:
    layout = LAYOUTS[i]
    _, ranges = sample_tokens(layout)
    return EpisodeRecord(
        reset={"prompt": f"task {i // N}", "label": "", "extra": {}},
        observations=[f"obs {t}" for t in range(len(layout))],
        actions=[f"act {i}.{t}" for t in range(len(layout))],
        action_ranges=ranges,
    )


def rollout_samples(rewards: list[float] = REWARDS) -> list[Any]:
    """Single-row Experiences as OpenRLHF's SamplesGenerator makes them from the executor's output."""
    out = []
    for layout, reward in zip(LAYOUTS, rewards, strict=True):
        tokens, ranges = sample_tokens(layout)
        out.append(experience_from_response(tokens, ranges, float(reward)))
    return out


def experience_from_response(tokens: list[int], ranges: list[tuple[int, int]], reward: float) -> Any:
    """What ``SamplesGenerator._process_response_into_experience`` builds (that module needs vLLM)."""
    sequences = torch.tensor(tokens, dtype=torch.long)
    attention_mask = torch.ones(len(tokens), dtype=torch.long)
    action_mask = torch.zeros_like(attention_mask)
    for start, end in ranges:
        action_mask[start:end] = 1
    action_mask = action_mask[1:]
    return Experience(
        sequences=sequences.unsqueeze(0),
        attention_mask=attention_mask.unsqueeze(0),
        action_mask=action_mask.unsqueeze(0),
        rewards=torch.tensor([reward]),
        response_length=torch.tensor([int(action_mask.sum())]),
        total_length=torch.tensor([float(len(tokens))]),
        prompts=["p"],
        labels=[""],
        info={"reward": torch.tensor([reward])},
    )


def make_args(estimator: str) -> Any:
    return NS(
        algo=NS(
            advantage=NS(estimator=estimator, gamma=1.0, lambd=1.0, no_std_norm=False),
            kl=NS(use_loss=False, estimator="k1", init_coef=0.0, target=None),
        ),
        rollout=NS(n_samples_per_prompt=N, micro_batch_size=3, max_new_tokens=None),
        reward=NS(clip_range=None, overlong_buffer_len=None, stop_properly_penalty_coef=None),
        train=NS(dynamic_batch_enable=False),
        data=NS(max_len=64),
    )


def maker_args(estimator: str) -> tuple[Any, ...]:
    """``RemoteExperienceMaker``'s positional arguments, as ``BasePPOTrainer`` passes them."""
    return (None, None, None, None, FixedKLController(0.0), NS(args=make_args(estimator)), NS(pad_token_id=0))


def prepared(maker: Any, samples: list[Any]) -> list[Any]:
    """OpenRLHF's own micro-batching, then what ``make_experience`` adds with no reference model."""
    experiences = maker.split_rollout_samples(copy.deepcopy(samples))
    for exp in experiences:
        exp.kl = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
    return experiences


class FixedJudge:
    """Proposes turns ``SEGMENT`` of whichever run is the group's representative."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def propose(self, success: Any, failures: Any, rules: Any) -> Proposal:
        self.calls.append(success.id)
        return Proposal(segment=Segment(trajectory_id=success.id, start=SEGMENT[0], end=SEGMENT[1]))


class CountingContinuations:
    """``continue_from``: the first ``m`` continuations from a boundary succeed (exact success counts)."""

    def __init__(self, successes: dict[int, int]) -> None:
        self.successes = successes
        self.counters: dict[int, itertools.count[int]] = {}

    def __call__(self, trajectory: Any, turn: int, seed: int) -> Outcome:
        n = next(self.counters.setdefault(turn, itertools.count()))
        return Outcome(success=n < self.successes[turn], turns=1)


def filled_store(skip: tuple[int, ...] = ()) -> LocalRecordStore:
    store = LocalRecordStore()
    for i, layout in enumerate(LAYOUTS):
        if i not in skip:
            store.put(record_key(sample_tokens(layout)[0]), record_of(i).model_dump())
    return store


def prover_maker(estimator: str, store: LocalRecordStore, **setup: Any) -> ProverExperienceMaker:
    setup.setdefault("judge", FixedJudge())
    setup.setdefault(
        "continue_from", CountingContinuations({SEGMENT[0]: PRE_SUCCESSES, SEGMENT[1] + 1: POST_SUCCESSES})
    )
    setup.setdefault("config", ProverConfig(k=8, lam=LAM))
    return ProverExperienceMaker(*maker_args(estimator), prover=ProverSetup(store=store, **setup))


def by_sample(experiences: list[Any], field: str = "advantages") -> dict[int, torch.Tensor]:
    """Row tensors keyed by sample index (OpenRLHF pads each micro-batch to its own width)."""
    out = {}
    for exp in experiences:
        for row, index in enumerate(exp.index):
            out[index] = getattr(exp, field)[row]
    return out


# Hand-computed shaped rewards v_i (OpenRLHF's formulas applied to REWARDS by hand).
# group_norm: (r - mean) / (std_unbiased + 1e-9); group 0 [0,1,0,0]: mean 1/4, std 1/2;
# group 1 [1,1,0,0]: mean 1/2, std sqrt(1/3).
S3 = 0.5 / np.sqrt(1 / 3)
SHAPED = {
    "group_norm": [-0.5, 1.5, -0.5, -0.5, S3, S3, -S3, -S3],
    "rloo": [-1 / 3, 1.0, -1 / 3, -1 / 3, 2 / 3, 2 / 3, -2 / 3, -2 / 3],  # r - (sum - r) / (n - 1)
    "dr_grpo": [-0.25, 0.75, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5],  # r - mean
    "reinforce_baseline": [-0.25, 0.75, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5],  # then batch whitening
}


def hand_stock(estimator: str, width: int, index: int) -> np.ndarray:
    """OpenRLHF's advantage row by hand: the return v_i on positions up to the last action token, 0 after.

    (The reward sits on the last action token and the return sums rewards to the end.) For
    ``reinforce_baseline`` every position is then whitened with the mean and variance over all
    action tokens of the batch: (A - m) / sqrt(var).
    """
    v = SHAPED[estimator]
    eos = mask_of(index).nonzero()[0][-1]
    row = np.zeros(width)
    row[: eos + 1] = v[index]
    if estimator == "reinforce_baseline":
        counts = np.array([mask_of(i).sum() for i in range(len(LAYOUTS))])
        m = (counts * v).sum() / counts.sum()
        var = (counts * (np.array(v) - m) ** 2).sum() / counts.sum()
        row = (row - m) / np.sqrt(var)
    return row


def mask_of(index: int) -> np.ndarray:
    tokens, ranges = sample_tokens(LAYOUTS[index])
    mask = np.zeros(len(tokens))
    for a, b in ranges:
        mask[a:b] = 1
    return mask[1:]


def segment_positions(index: int) -> list[int]:
    runs = mask_runs(mask_of(index).tolist())
    return [p for t in range(SEGMENT[0], SEGMENT[1] + 1) for p in range(*runs[t])]


ESTIMATORS = ["group_norm", "reinforce_baseline", "rloo", "dr_grpo"]


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_bonus_on_segment_tokens_stock_elsewhere(estimator: str) -> None:
    stock_maker = RemoteExperienceMaker(*maker_args(estimator))
    stock = by_sample(stock_maker.compute_advantages_and_returns(prepared(stock_maker, rollout_samples())))

    judge = FixedJudge()
    maker = prover_maker(estimator, filled_store(), judge=judge)
    experiences = maker.compute_advantages_and_returns(prepared(maker, rollout_samples()))
    got = by_sample(experiences)
    masks = by_sample(experiences, "action_mask")

    assert judge.calls == [str(SUCCESS)]  # only group 0 is eligible; its one success is proposed
    record = {g.group_id: g for g in maker.last_report.groups}
    assert record["0"].status == "accepted" and record["0"].verification.delta == 0.5
    assert record["1"].status == "not_eligible"

    inside = segment_positions(SUCCESS)
    assert len(inside) == 2 + 3  # turns 0 and 1 of the successful run; the 2 feedback tokens between are out
    for i in range(len(LAYOUTS)):
        width = got[i].shape[0]
        hand = hand_stock(estimator, width, i)
        np.testing.assert_allclose(stock[i].numpy(), hand, rtol=1e-6, atol=1e-6)
        expected_bonus = np.zeros(width)
        if i == SUCCESS:
            expected_bonus[inside] = BONUS
        np.testing.assert_allclose(got[i].numpy(), hand + expected_bonus, rtol=1e-6, atol=1e-6)
        outside = torch.tensor(expected_bonus == 0)
        assert torch.equal(got[i][outside], stock[i][outside])  # bit-for-bit OpenRLHF outside the segment
        if i == SUCCESS:
            assert torch.equal(got[i][inside], stock[i][inside] + torch.tensor(BONUS, dtype=got[i].dtype))
            assert bool((masks[i][inside] == 1).all())
    # OpenRLHF leaves non-zero advantages on feedback tokens inside the segment's range: still stock there.
    gap = [p for p in range(min(inside), max(inside)) if p not in inside]
    assert gap and bool((stock[SUCCESS][gap] != 0).all()) and torch.equal(got[SUCCESS][gap], stock[SUCCESS][gap])
    info = {idx: float(exp.info[BONUS_INFO_KEY][row]) for exp in experiences for row, idx in enumerate(exp.index)}
    assert info == {i: (BONUS if i == SUCCESS else 0.0) for i in range(len(LAYOUTS))}


def test_rejected_segment_leaves_stock_advantages() -> None:
    stock_maker = RemoteExperienceMaker(*maker_args("group_norm"))
    stock = by_sample(stock_maker.compute_advantages_and_returns(prepared(stock_maker, rollout_samples())))
    maker = prover_maker(
        "group_norm", filled_store(), continue_from=CountingContinuations({0: 4, 2: 4})
    )  # Delta = 0: not accepted
    got = by_sample(maker.compute_advantages_and_returns(prepared(maker, rollout_samples())))
    assert {g.group_id: g.status for g in maker.last_report.groups} == {"0": "rejected", "1": "not_eligible"}
    for i in got:
        assert torch.equal(got[i], stock[i])


def test_missing_record_skips_the_group_with_a_reason() -> None:
    stock_maker = RemoteExperienceMaker(*maker_args("dr_grpo"))
    stock = by_sample(stock_maker.compute_advantages_and_returns(prepared(stock_maker, rollout_samples())))
    judge = FixedJudge()
    # Sample 2 (group 0) has no record; group 1 needs none to be judged not eligible, but has them.
    maker = prover_maker("dr_grpo", filled_store(skip=(2,)), judge=judge)
    got = by_sample(maker.compute_advantages_and_returns(prepared(maker, rollout_samples())))
    groups = {g.group_id: g for g in maker.last_report.groups}
    assert groups["0"].status == "skipped" and "sample 2: no episode record" in groups["0"].reason
    assert groups["1"].status == "not_eligible"
    assert judge.calls == []
    for i in got:
        assert torch.equal(got[i], stock[i])


def test_record_that_disagrees_with_the_mask_skips_the_group() -> None:
    store = filled_store(skip=(SUCCESS,))
    bad = record_of(SUCCESS).model_dump()
    bad["observations"], bad["actions"], bad["action_ranges"] = bad["observations"][:2], bad["actions"][:2], []
    store.put(record_key(sample_tokens(LAYOUTS[SUCCESS])[0]), bad)
    maker = prover_maker("rloo", store)
    maker.compute_advantages_and_returns(prepared(maker, rollout_samples()))
    group0 = maker.last_report.groups[0]
    assert group0.status == "skipped" and "3 runs of 1s but the episode recorded 2 turns" in group0.reason


def test_non_binary_reward_is_a_typed_error() -> None:
    maker = prover_maker("group_norm", filled_store())
    rewards = [0, 0.5, 0, 0, 1, 1, 0, 0]
    with pytest.raises(ExperienceBatchError, match=r"sample 1 has reward 0\.5"):
        maker.compute_advantages_and_returns(prepared(maker, rollout_samples(rewards)))


def test_setup_comes_from_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    maker = ProverExperienceMaker(*maker_args("group_norm"))
    monkeypatch.delenv("PROVER_OPENRLHF_SETUP", raising=False)
    with pytest.raises(SetupError, match="PROVER_OPENRLHF_SETUP"):
        maker.compute_advantages_and_returns(prepared(maker, rollout_samples()))
    monkeypatch.setenv("PROVER_OPENRLHF_SETUP", f"{__name__}:setup_from_env")
    experiences = maker.compute_advantages_and_returns(prepared(maker, rollout_samples()))
    assert maker.prover.config.lam == LAM and maker.prover.store is ENV_STORE
    assert by_sample(experiences)[SUCCESS][segment_positions(SUCCESS)[0]] > hand_stock("group_norm", 20, SUCCESS)[0]


ENV_STORE = LocalRecordStore()


def setup_from_env(maker: Any) -> ProverSetup:
    assert isinstance(maker, ProverExperienceMaker)
    for i, layout in enumerate(LAYOUTS):
        ENV_STORE.put(record_key(sample_tokens(layout)[0]), record_of(i).model_dump())
    return ProverSetup(
        judge=FixedJudge(),
        continue_from=CountingContinuations({0: PRE_SUCCESSES, 2: POST_SUCCESSES}),
        config=ProverConfig(k=8, lam=LAM),
        store=ENV_STORE,
    )


# ---- The recording executor and the restorable environment, end to end ----------------------------

TASK = "Find the key, then open the door.\n"


class KeyDoor(AgentInstanceBase):
    """A deterministic text task: 'take key' then 'open door' wins; opening without the key loses."""

    def __init__(self) -> None:
        self.has_key = False
        self.turns = 0

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {"observation": states["observation"]}

    async def step(self, state_dict: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        action = state_dict["action_text"].strip()
        self.turns += 1
        reward, done = 0.0, False
        if action == "take key":
            self.has_key, feedback = True, "You hold the key.\n"
        elif action == "open door":
            done = True
            reward, feedback = (1.0, "The door opens.\n") if self.has_key else (0.0, "Locked.\n")
        else:
            feedback = "Nothing happens.\n"
        if self.turns >= 4:
            done = True
        return {
            "rewards": torch.tensor(reward),
            "scores": torch.tensor(reward),
            "environment_feedback": feedback,
            "done": done,
        }


def char_tokenizer() -> Any:
    """A character-level Hugging Face tokenizer built locally."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[PAD]": 1, **{c: i + 2 for i, c in enumerate(string.printable)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


class ScriptedEngine:
    """Stands in for vLLM's ``generate``: returns the next scripted action, tokenized."""

    def __init__(self, actions: list[str], tokenizer: Any) -> None:
        self.actions = iter(actions)
        self.tokenizer = tokenizer

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        text = next(self.actions)
        ids = self.tokenizer(text=text, add_special_tokens=False)["input_ids"]
        return NS(outputs=[NS(token_ids=ids, text=text, finish_reason="stop", logprobs=None)])


class OpenDoorPolicy:
    """The continuation policy: always tries the door."""

    def act(self, context: Any) -> str:
        assert context.info["text"].startswith(TASK)  # the whole conversation, as the executor builds it
        return "open door"


SCRIPTS = [
    ["look", "open door"],  # fails: locked
    ["look", "take key", "open door"],  # succeeds
    ["open door"],  # fails
    ["look", "look", "look", "look"],  # fails: turn limit
]


def test_recorded_rollout_restores_and_credits_the_key_turn() -> None:
    tokenizer = char_tokenizer()
    store = LocalRecordStore()
    executor = RecordingAgentExecutor(KeyDoor, store=store)

    async def rollout() -> list[dict[str, Any]]:
        params = NS(max_tokens=None, logprobs=None)
        return list(
            await asyncio.gather(
                *(executor.execute(TASK, "", params, 512, tokenizer, ScriptedEngine(s, tokenizer)) for s in SCRIPTS)
            )
        )

    outputs = asyncio.run(rollout())
    assert [o["reward"] for o in outputs] == [0.0, 1.0, 0.0, 0.0]
    assert len(store) == 4
    samples = [experience_from_response(o["observation_tokens"], o["action_ranges"], o["reward"]) for o in outputs]

    setup = ProverSetup(
        judge=DivergenceJudge(),
        env=AgentInstanceEnv(KeyDoor),
        policy=OpenDoorPolicy(),
        config=ProverConfig(k=8),
        store=store,
    )
    maker = ProverExperienceMaker(*maker_args("dr_grpo"), prover=setup)
    stock_maker = RemoteExperienceMaker(*maker_args("dr_grpo"))
    stock = by_sample(stock_maker.compute_advantages_and_returns(prepared(stock_maker, samples)))
    experiences = maker.compute_advantages_and_returns(prepared(maker, samples))
    got = by_sample(experiences)

    (group,) = maker.last_report.groups
    assert group.status == "accepted", group.reason
    assert group.proposal.segment.start == group.proposal.segment.end == 1  # "take key"
    v = group.verification
    assert (v.pre_successes, v.pre_count, v.post_successes, v.post_count) == (0, 8, 8, 8)  # Delta = 1
    assert len(store) == 0  # every record was taken

    success_row = by_sample(experiences, "action_mask")[1]
    runs = mask_runs(success_row.tolist())
    assert len(runs) == 3 and runs[1][1] - runs[1][0] == len("take key")
    for i in range(4):
        expected = stock[i].clone()
        if i == 1:
            expected[runs[1][0] : runs[1][1]] += 1.0
        assert torch.equal(got[i], expected)


def test_replay_mismatch_is_reported_not_credited() -> None:
    tokenizer = char_tokenizer()
    store = LocalRecordStore()
    executor = RecordingAgentExecutor(KeyDoor, store=store)

    async def rollout() -> list[dict[str, Any]]:
        params = NS(max_tokens=None, logprobs=None)
        return [await executor.execute(TASK, "", params, 512, tokenizer, ScriptedEngine(s, tokenizer)) for s in SCRIPTS]

    outputs = asyncio.run(rollout())
    samples = [experience_from_response(o["observation_tokens"], o["action_ranges"], o["reward"]) for o in outputs]

    class Drifted(KeyDoor):
        async def step(self, state_dict: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
            result = await super().step(state_dict, **kwargs)
            result["environment_feedback"] = result["environment_feedback"].upper()
            return result

    setup = ProverSetup(judge=DivergenceJudge(), env=AgentInstanceEnv(Drifted), policy=OpenDoorPolicy(), store=store)
    maker = ProverExperienceMaker(*maker_args("dr_grpo"), prover=setup)
    experiences = maker.compute_advantages_and_returns(prepared(maker, samples))
    (group,) = maker.last_report.groups
    assert group.status == "skipped" and "diverged" in group.reason
    assert all(float(exp.info[BONUS_INFO_KEY].abs().sum()) == 0.0 for exp in experiences)


def test_importing_the_adapter_imports_neither_torch_nor_openrlhf() -> None:
    import subprocess
    import sys

    code = "import sys, prover_openrlhf; print(sorted({'torch', 'openrlhf', 'ray'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_local_store_keeps_duplicates_and_drops_the_oldest() -> None:
    store = LocalRecordStore(max_records=3)
    for key, value in [("a", 1), ("a", 2), ("b", 3), ("c", 4)]:
        store.put(key, {"v": value})
    assert len(store) == 2  # "a" (two records, the oldest key) was dropped whole to get under 3
    assert store.take(["c", "a", "b", "b"]) == [{"v": 4}, None, {"v": 3}, None]
    store.put("d", {"v": 5})
    store.put("d", {"v": 6})
    assert store.take(["d", "d", "d"]) == [{"v": 5}, {"v": 6}, None]


class SeededDoor(KeyDoor):
    """Draws a door number at reset unless the reset spec gives it back (``prover_reset``)."""

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        door = states.get("door", int(np.random.default_rng().integers(1_000_000)))
        return {"observation": f"{states['observation']}Door {door}.\n", "prover_reset": {"door": door}}


def test_random_reset_is_restored_from_the_recorded_spec() -> None:
    from prover_core import Trajectory, Turn

    tokenizer = char_tokenizer()
    store = LocalRecordStore()
    executor = RecordingAgentExecutor(SeededDoor, store=store)
    params = NS(max_tokens=None, logprobs=None)
    script = ["look", "take key", "open door"]
    out = asyncio.run(executor.execute(TASK, "lbl", params, 512, tokenizer, ScriptedEngine(script, tokenizer)))
    (record,) = store.take([record_key(out["observation_tokens"])])
    rec = EpisodeRecord.model_validate(record)
    door = rec.reset["extra"]["door"]
    assert rec.reset == {"prompt": TASK, "label": "lbl", "extra": {"door": door}}
    assert rec.actions == script and rec.observations[0] == f"{TASK}Door {door}.\n"
    assert rec.observations[1:] == ["Nothing happens.\n", "You hold the key.\n"] and rec.done
    trajectory = Trajectory(
        id="t",
        group_id="g",
        reset=rec.reset,
        success=True,
        turns=tuple(Turn(observation=o, action=a) for o, a in zip(rec.observations, rec.actions, strict=True)),
    )

    async def continue_from_turn_2() -> Any:
        episode = await AgentInstanceEnv(SeededDoor).restore(trajectory, 2, seed=0)
        assert episode.last.observation == "You hold the key.\n"
        return await episode.step("open door")

    step = asyncio.run(continue_from_turn_2())
    assert step.done and step.success
