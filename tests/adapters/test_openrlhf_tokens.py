"""The engine policy's side of the OpenRLHF adapter, in one process (no Ray): token-exact contexts.

The rollout is OpenRLHF's ``MultiTurnAgentExecutor`` (through ``RecordingAgentExecutor``), the advantage step
OpenRLHF's ``RemoteExperienceMaker`` through ``ProverExperienceMaker``, and the engine is reached through a
handle with ``RolloutRayActor.generate``'s remote signature (``handle.generate.remote(prompt_token_ids,
sampling_params, multi_modal_data=None)``) whose body is ``RolloutRayActor.generate``'s: a
``TokensPrompt`` to the (stand-in) vLLM ``AsyncLLMEngine``, the last ``RequestOutput`` back. The Ray
version of all this, with OpenRLHF's real actors, is ``tests/adapters/test_openrlhf_engine.py``.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import math
import sys
from collections import Counter
from types import SimpleNamespace as NS
from typing import Any

import pytest

from tests.hosts import require_host

require_host("openrlhf")

from tests.adapters import openrlhf_stand_in as stand_in  # noqa: E402

if stand_in.FAKE_VLLM not in sys.path:
    sys.path.insert(0, stand_in.FAKE_VLLM)

from prover_openrlhf.cpu import import_openrlhf_on_cpu  # noqa: E402

import_openrlhf_on_cpu()

import torch  # noqa: E402
from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController  # noqa: E402
from vllm import AsyncEngineArgs, AsyncLLMEngine  # noqa: E402  (the stand-in's)
from vllm import SamplingParams as VLLMSamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402
from vllm.utils import random_uuid  # noqa: E402

from prover_core import DivergenceJudge, ProverConfig, RandomJudge  # noqa: E402
from prover_core.chance import Lift  # noqa: E402
from prover_core.credit import mask_runs  # noqa: E402
from prover_core.errors import ContinuationLimitError, EngineError  # noqa: E402
from prover_engine import Generation, SamplingParams  # noqa: E402
from prover_openrlhf import LocalRecordStore, ProverSetup  # noqa: E402
from prover_openrlhf.engine import (  # noqa: E402
    RolloutEngines,
    engine_policy,
    rollout_sampling,
    to_generation,
    to_vllm_kwargs,
)
from prover_openrlhf.experience_maker import BONUS_INFO_KEY, ProverExperienceMaker  # noqa: E402
from prover_openrlhf.recorder import RecordingAgentExecutor  # noqa: E402
from prover_openrlhf.restore import AgentInstanceEnv  # noqa: E402

STOCK = ProverExperienceMaker.__mro__[1]
N = 4
MAX_LEN = 160
LAM = 0.5
PROMPT = stand_in.PROMPTS[0]


class InProcessRolloutActor:
    """``RolloutRayActor.generate`` without Ray: the same body, reachable as ``handle.generate.remote(...)``."""

    def __init__(self, model: str = "tests.adapters.openrlhf_stand_in:KeyDoorModel") -> None:
        self.llm = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(model=model))
        self.generate = NS(remote=self.generate_tokens)

    async def generate_tokens(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None):
        final = None
        prompt = TokensPrompt(prompt_token_ids=prompt_token_ids)
        async for output in self.llm.generate(prompt, copy.deepcopy(sampling_params), request_id=random_uuid()):
            final = output
        return final


def make_args() -> Any:
    return NS(
        algo=NS(
            advantage=NS(estimator="dr_grpo", gamma=1.0, lambd=1.0, no_std_norm=False),
            kl=NS(use_loss=False, estimator="k1", init_coef=0.0, target=None),
        ),
        rollout=NS(n_samples_per_prompt=N, micro_batch_size=3, max_new_tokens=None, temperature=1.0),
        reward=NS(clip_range=None, overlong_buffer_len=None, stop_properly_penalty_coef=None),
        train=NS(dynamic_batch_enable=False),
        data=NS(max_len=MAX_LEN),
        vllm=NS(enable_sleep=False),
    )


def recorded_rollout(engine: InProcessRolloutActor, store: LocalRecordStore) -> list[Any]:
    """Four episodes of PROMPT through OpenRLHF's executor; the model's 2nd episode takes the key."""
    from tests.adapters.test_openrlhf import experience_from_response

    executor = RecordingAgentExecutor(stand_in.KeyDoor, store=store)
    tokenizer = stand_in.char_tokenizer()
    llm_engine = NS(generate=engine.generate_tokens)  # the executor calls the actor's own generate

    async def run() -> list[dict[str, Any]]:
        params = VLLMSamplingParams(max_tokens=None, min_tokens=1, skip_special_tokens=False)
        return list(
            await asyncio.gather(
                *(executor.execute(PROMPT, "", params, MAX_LEN, tokenizer, llm_engine) for _ in range(N))
            )
        )

    outputs = asyncio.run(run())
    assert [o["reward"] for o in outputs] == [0.0, 1.0, 0.0, 0.0]
    return [experience_from_response(o["observation_tokens"], o["action_ranges"], o["reward"]) for o in outputs]


def maker_with_engine(engine: Any, store: LocalRecordStore) -> ProverExperienceMaker:
    tokenizer = stand_in.char_tokenizer()
    maker = ProverExperienceMaker(None, None, None, None, FixedKLController(0.0), NS(args=make_args()), tokenizer)
    maker._prover = ProverSetup(
        judge=DivergenceJudge(),
        env=AgentInstanceEnv(stand_in.KeyDoor),
        policy=engine_policy(maker, engines=[engine]),
        config=ProverConfig(k=8, lam=LAM),
        store=store,
    )
    return maker


def prepared(maker: Any, samples: list[Any]) -> list[Any]:
    experiences = maker.split_rollout_samples(copy.deepcopy(samples))
    for exp in experiences:
        exp.kl = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
    return experiences


def by_index(experiences: list[Any], field: str) -> dict[int, Any]:
    return {i: getattr(exp, field)[r] for exp in experiences for r, i in enumerate(exp.index)}


def test_continuation_contexts_are_the_recorded_token_ids_exactly() -> None:
    engine = InProcessRolloutActor()
    store = LocalRecordStore()
    samples = recorded_rollout(engine, store)
    engine.llm.model.requests.clear()  # keep only the continuations' requests
    maker = maker_with_engine(engine, store)
    experiences = prepared(maker, samples)
    stock = STOCK.compute_advantages_and_returns(maker, copy.deepcopy(experiences))
    credited = maker.compute_advantages_and_returns(experiences)

    # The recorded success: PROMPT + "take key" + HOLD + "open door" + "The door opens.\n"; its turn 0
    # starts at sequence position len(PROMPT), i.e. action-mask position len(PROMPT) - 1.
    seq = by_index(credited, "sequences")[1].tolist()
    assert seq[: len(PROMPT) + 8] == [*stand_in.char_ids(PROMPT), 31, 12, 22, 16, 96, 22, 16, 36]
    assert mask_runs(by_index(credited, "action_mask")[1].tolist())[0] == (len(PROMPT) - 1, len(PROMPT) + 7)

    got = Counter((tuple(ids), seed, mt) for ids, seed, mt in engine.llm.model.requests)
    assert maker.last_result is not None
    success = maker.last_result.trajectories["1"]  # the recorded success: its content seeds the continuations
    assert got == stand_in.expected_requests(PROMPT, success, MAX_LEN)

    (group,) = maker.last_report.groups
    evens = stand_in.pre_successes(success)
    v = group.verification
    assert (v.pre_successes, v.pre_count, v.post_successes, v.post_count) == (evens, 8, 8, 8)
    delta = 1 - evens / 8
    assert group.status == ("accepted" if delta > 0 else "rejected") and v.delta == pytest.approx(delta)
    span = mask_runs(by_index(credited, "action_mask")[1].tolist())[0]
    adv, ref = by_index(credited, "advantages"), by_index(stock, "advantages")
    expected = ref[1].clone()
    if group.status == "accepted":
        expected[span[0] : span[1]] += LAM * delta
    assert torch.allclose(adv[1], expected, atol=1e-6)
    assert all(torch.equal(adv[i], ref[i]) for i in (0, 2, 3))

    metrics = maker.last_metrics
    assert metrics["prover/engine_calls"] == sum(got.values()) == 16 + evens
    assert metrics["prover/engine_failures"] == 0.0
    assert metrics["prover/groups_accepted"] == float(group.status == "accepted")
    # the credit share against OpenRLHF's own advantage, over every row's action tokens, by hand
    masks = by_index(credited, "action_mask")
    base = sum(float((ref[i].abs() * masks[i]).sum()) for i in ref)
    credited_tokens = span[1] - span[0] if group.status == "accepted" else 0
    assert metrics["prover/credit_share"] == pytest.approx(LAM * delta * credited_tokens / base, rel=1e-6)
    assert metrics["prover/trigger_share"] == 1.0
    # latency: both boundaries at once; post takes 1 action, a pre continuation that takes the key 2
    assert metrics["prover/verify_policy_rounds"] == (2 if evens else 1)
    for exp in credited:  # every row carries the step's figures (OpenRLHF logs the per-sample mean)
        assert torch.equal(exp.info["prover/engine_calls"], torch.full((len(exp.index),), float(16 + evens)))
        assert BONUS_INFO_KEY in exp.info
    assert len(maker.prover.policy.tokens) == 0 and maker.prover.policy.stats.calls == 0  # cleared for the next step


def test_a_failing_engine_skips_the_group_and_keeps_openrlhf_advantages() -> None:
    class Broken(InProcessRolloutActor):
        async def generate_tokens(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data=None):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    rollout_engine = InProcessRolloutActor()
    store = LocalRecordStore()
    samples = recorded_rollout(rollout_engine, store)
    maker = maker_with_engine(Broken(), store)
    experiences = prepared(maker, samples)
    stock = STOCK.compute_advantages_and_returns(maker, copy.deepcopy(experiences))
    credited = maker.compute_advantages_and_returns(experiences)
    (group,) = maker.last_report.groups
    assert (group.status, group.stage) == ("skipped", "verify")
    # curtailment's overlap schedule (the default): both boundaries' first calls go out together; the post
    # continuations fail, which settles the group (incomplete), and the pre ones' results go unused
    assert group.verification.failed_continuations == 8 and group.verify_stats.failures == {"error": 8}
    assert group.verify_stats.cancelled == 8
    assert maker.last_metrics["prover/engine_failures"] == maker.last_metrics["prover/engine_calls"] == 16
    for exp, ref in zip(credited, stock, strict=True):
        assert torch.equal(exp.advantages, ref.advantages)


def test_vllm_sampling_fields() -> None:
    params = SamplingParams(
        max_tokens=64, temperature=0.7, top_p=0.9, top_k=5, min_p=0.1, seed=11, stop_token_ids=(2, 3), extra={"x": 1}
    )
    assert to_vllm_kwargs(params, budget=40) == {
        "x": 1,
        "n": 1,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 5,
        "min_p": 0.1,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": 40,
        "seed": 11,
        "stop_token_ids": [2, 3],
    }
    assert to_vllm_kwargs(SamplingParams(max_tokens=8))["max_tokens"] == 8
    assert to_vllm_kwargs(SamplingParams())["stop_token_ids"] is None
    assert to_vllm_kwargs(SamplingParams())["top_k"] == -1  # "off" as OpenRLHF spells it for vLLM
    from vllm import SamplingParams as VLLMSamplingParams  # every field is one vLLM's SamplingParams takes

    VLLMSamplingParams(**to_vllm_kwargs(rollout_sampling(NS(rollout=NS(), data=NS(max_len=30))), budget=5))


def test_rollout_sampling_gives_every_action_the_room_left_as_the_multi_turn_executor_does() -> None:
    """OpenRLHF's executor: ``max_tokens = max_len - len(ids)`` per action, whatever ``max_new_tokens`` says."""
    args = NS(rollout=NS(max_new_tokens=16, temperature=0.6, top_p=0.95), data=NS(max_len=300))
    sampling = rollout_sampling(args)
    assert sampling == SamplingParams(
        max_tokens=300, temperature=0.6, top_p=0.95, extra={"min_tokens": 1, "skip_special_tokens": False}
    )
    assert to_vllm_kwargs(sampling, budget=300 - 200)["max_tokens"] == 100  # not 16


def test_request_output_becomes_a_generation() -> None:
    from vllm.outputs import CompletionOutput, RequestOutput

    lp = [{7: NS(logprob=-0.5)}, {9: NS(logprob=-1.25)}]
    out = RequestOutput("r", [1, 2], [CompletionOutput(0, "ab", [7, 9], "stop", logprobs=lp)])
    assert to_generation(out) == Generation(token_ids=(7, 9), text="ab", logprobs=(-0.5, -1.25), finish_reason="stop")
    with pytest.raises(EngineError, match="no completion"):
        to_generation(RequestOutput("r", [1], []))


def test_engine_must_answer_for_the_ids_it_was_sent() -> None:
    from vllm.outputs import CompletionOutput, RequestOutput

    async def other_prompt(ids: list[int], params: Any) -> Any:
        return RequestOutput("r", [*ids, 99], [CompletionOutput(0, "x", [5], "stop")])

    engines = RolloutEngines([NS(generate=NS(remote=other_prompt))], max_len=10, make_sampling_params=dict)
    with pytest.raises(EngineError, match="from 4 prompt tokens, not the 3 sent"):
        asyncio.run(engines.generate([1, 2, 3], SamplingParams(seed=1)))
    with pytest.raises(ContinuationLimitError, match="no room under max_len=10"):
        asyncio.run(engines.generate(list(range(10)), SamplingParams(seed=1)))


def test_sleeping_engines_are_woken_only_around_a_verification() -> None:
    """With --vllm.enable_sleep: wake_up before compute_bonus, sleep after; neither when nothing can trigger."""
    for rewards, expected in (([0.0, 0.0, 0.0, 0.0], []), ([0.0, 1.0, 0.0, 0.0], ["wake_up", "sleep"])):
        engine = InProcessRolloutActor()
        store = LocalRecordStore()
        samples = recorded_rollout(engine, store)
        for sample, reward in zip(samples, rewards, strict=True):
            sample.rewards = torch.tensor([reward])
        maker = maker_with_engine(engine, store)
        maker.args.vllm.enable_sleep = True
        calls: list[str] = []
        maker.prover.policy.engine.call_all = lambda method, *a, calls=calls, **k: calls.append(method)
        maker.compute_advantages_and_returns(prepared(maker, samples))
        assert calls == expected
        assert maker.last_report.groups[0].status == ("not_eligible" if not expected else "accepted")


def test_the_judge_against_chance_is_logged_over_a_window_of_steps() -> None:
    """``control_share=1``: the one eligible group verifies a random control segment each step; the experience
    maker's window pools the steps (``prover/control_verified`` counts both), the judge's side is still empty."""
    engine, store = InProcessRolloutActor(), LocalRecordStore()
    maker = maker_with_engine(engine, store)
    maker._prover = dataclasses.replace(maker._prover, config=ProverConfig(k=8, lam=LAM, control_share=1.0))
    for step in (1, 2):
        maker.compute_advantages_and_returns(prepared(maker, recorded_rollout(engine, store)))
        metrics = maker.last_metrics
        (group,) = maker.last_report.groups
        assert group.control and group.status in ("accepted", "rejected")
        assert metrics["prover/groups_control"] == 1.0 and metrics["prover/control_verified"] == float(step)
        assert metrics["prover/judge_verified"] == 0.0 and math.isnan(metrics["prover/judge_lift"])
        assert metrics["prover/credit_per_extra_turn"] == pytest.approx(group.credit / metrics["prover/policy_turns"])


def test_lift_throttle_acts_in_the_experience_maker_through_its_run() -> None:
    """``lift_throttle`` with a random judge: the maker's one :class:`~prover_core.ProverRun` keeps the window and the
    pipeline reads it, so with a window that has not shown the judge above chance the step's group is verified only
    at the controls' rate (0.05 / 0.95) and here recorded ``unverified`` by the throttle (before ProverRun the maker
    never passed its window and the flag did nothing); the next step's seed is the config's plus one."""
    engine, store = InProcessRolloutActor(), LocalRecordStore()
    maker = maker_with_engine(engine, store)
    config = ProverConfig(k=8, lam=LAM, control_share=0.05, lift_throttle=True)
    maker._prover = dataclasses.replace(maker._prover, judge=RandomJudge(0), config=config)
    window = maker.prover_run.window
    assert window is not None
    window.add(Lift(5, 10, 5, 10))  # lift 0, its interval holds 0: not shown
    maker.compute_advantages_and_returns(prepared(maker, recorded_rollout(engine, store)))
    (group,) = maker.last_report.groups
    assert group.status == "unverified" and "lift_throttle" in group.reason and not group.control
    assert maker.last_metrics["prover/groups_unverified"] == 1.0
    assert maker.prover_run.steps == 1 and maker.prover_run.step_config.seed == config.seed + 1
