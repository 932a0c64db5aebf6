"""Continuations on OpenRLHF's own vLLM engines, token-exactly (openrlhf 0.11.2, CPU).

What runs is OpenRLHF's code: ``create_vllm_engines`` and ``RolloutRayActor`` (``vllm_engine.py``) as Ray
actors, ``SamplesGenerator`` (the rollout, with ``--vllm.enable_sleep``'s wake/sleep), the
``MultiTurnAgentExecutor`` inside the engine actors (``--train.agent_func_path``), ``BasePPOTrainer.__init__``
(which builds the experience maker without the engines) and the experience maker's advantage step. vLLM
itself cannot run here: ``tests/adapters/fake_vllm`` provides the vLLM names those modules import, and the
"network" behind it is ``openrlhf_stand_in.key_door_model`` (a fixed policy over a character vocabulary
that logs every request it serves). Ray's GPUs are logical (``num_gpus=2``): nothing touches a GPU.

Hand-worked contexts: with the character vocabulary, the ids of a text are ``char_ids(text)``; the context
of a continuation from turn ``b`` is the prompt and every token before turn ``b``'s action, then the
generated ids and ``char_ids(feedback)`` per new turn.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
import sys
import time
from collections import Counter
from types import SimpleNamespace as NS
from typing import Any

import pytest

from tests.conftest import skip
from tests.hosts import require_host

require_host("openrlhf")
ray = require_host("ray")

from tests.adapters import openrlhf_stand_in as stand_in  # noqa: E402

if stand_in.FAKE_VLLM not in sys.path:
    sys.path.insert(0, stand_in.FAKE_VLLM)

from prover_openrlhf.cpu import import_openrlhf_on_cpu  # noqa: E402

import_openrlhf_on_cpu()

import torch  # noqa: E402
from openrlhf.trainer.ppo_utils.experience import split_experience_batch  # noqa: E402
from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController  # noqa: E402

import prover_engine  # noqa: E402
from prover_core import DivergenceJudge, ProverConfig  # noqa: E402
from prover_core.credit import mask_runs  # noqa: E402
from prover_core.errors import ContinuationLimitError  # noqa: E402
from prover_engine import EnginePolicy, SamplingParams, TokenStore  # noqa: E402
from prover_engine.errors import EngineTimeoutError  # noqa: E402
from prover_openrlhf import engine as engine_mod  # noqa: E402
from prover_openrlhf import launch  # noqa: E402
from prover_openrlhf.experience_maker import BONUS_INFO_KEY, ProverExperienceMaker  # noqa: E402
from prover_openrlhf.install import uninstall  # noqa: E402
from prover_openrlhf.prover_setup import SETUP_ENV, ProverSetup  # noqa: E402
from prover_openrlhf.restore import AgentInstanceEnv  # noqa: E402

STOCK = ProverExperienceMaker.__mro__[1]  # OpenRLHF's RemoteExperienceMaker, whatever install() rebinds
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADAPTER_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(launch.__file__)))  # where prover_openrlhf lives
ENGINE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(prover_engine.__file__)))  # where prover_engine lives
AGENT_FILE = os.path.join(REPO, "tests", "adapters", "openrlhf_agent.py")
MODEL = "tests.adapters.openrlhf_stand_in:key_door_model"
N = 4  # n_samples_per_prompt
MAX_LEN = 200  # data.max_len
MAX_NEW = 16  # rollout.max_new_tokens, as in the shipped example: the multi-turn executor ignores it per action
LAM = 0.5
TAKE, HOLD = "take key", "You hold the key.\n"


def make_args(enable_sleep: bool = True) -> Any:
    """The fields of OpenRLHF's args that BasePPOTrainer, SamplesGenerator and the experience maker read."""
    return NS(
        algo=NS(
            advantage=NS(estimator="dr_grpo", gamma=1.0, lambd=1.0, no_std_norm=False, is_correction_level="off"),
            kl=NS(use_loss=False, estimator="k1", init_coef=0.0, target=None),
            dynamic_filtering_enable=False,
        ),
        rollout=NS(n_samples_per_prompt=N, batch_size=2, micro_batch_size=4, max_new_tokens=MAX_NEW, temperature=1.0),
        reward=NS(clip_range=None, overlong_buffer_len=None, stop_properly_penalty_coef=None),
        train=NS(dynamic_batch_enable=False),
        data=NS(max_len=MAX_LEN),
        vllm=NS(enable_sleep=enable_sleep),
        logger=NS(wandb=NS(key=None), tensorboard_dir=None),
        ckpt=NS(best_metric_key=""),
    )


GENERATE_KWARGS = dict(do_sample=True, max_len=MAX_LEN, max_new_tokens=MAX_NEW, temperature=1.0, top_p=1.0)
PROMPT_BATCHES = [("ds", [p], [""], [None]) for p in stand_in.PROMPTS]


def make_setup(maker: Any) -> ProverSetup:
    """The factory named by PROVER_OPENRLHF_SETUP: continuations on the maker's own vLLM engines."""
    return ProverSetup(
        judge=DivergenceJudge(),
        env=AgentInstanceEnv(stand_in.KeyDoor),
        policy=engine_mod.engine_policy(maker),
        config=ProverConfig(k=8, lam=LAM),
    )


def rollout(args: Any, engines: list[Any]) -> list[Any]:
    """OpenRLHF's SamplesGenerator over the engines (wake_up, generate_responses, sleep)."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    generator = SamplesGenerator(NS(args=args), list(PROMPT_BATCHES), None, stand_in.char_tokenizer(), engines)
    samples, _, _, _ = generator.generate_samples(**GENERATE_KWARGS)
    return list(samples)


def without_model_forward(maker: Any, samples: list[Any]) -> list[Any]:
    """OpenRLHF's micro-batching, then what ``make_experience`` sets with no reference model (kl = 0)."""
    experiences = maker.split_rollout_samples(copy.deepcopy(samples))
    for exp in experiences:
        exp.kl = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
    return experiences


def rows(experiences: list[Any], field: str) -> dict[int, Any]:
    return {idx: getattr(exp, field)[r] for exp in experiences for r, idx in enumerate(exp.index)}


def trainer_side(engines: list[Any]) -> dict[str, Any]:
    """In a fresh Ray worker: BasePPOTrainer.__init__ (engines given to the trainer only), rollout, advantages."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    args = make_args(enable_sleep=True)
    tokenizer = stand_in.char_tokenizer()
    trainer = BasePPOTrainer(NS(args=args), None, None, None, None, engines, tokenizer)
    maker = trainer.experience_maker
    samples = rollout(args, engines)
    experiences = without_model_forward(maker, samples)
    stock = STOCK.compute_advantages_and_returns(maker, copy.deepcopy(experiences))
    credited = maker.compute_advantages_and_returns(experiences)
    lengths = {i: int(m.sum()) for i, m in rows(credited, "attention_mask").items()}
    return {
        "maker_class": type(maker).__name__,
        "trainer_engines": [e._actor_id.hex() for e in trainer.vllm_engines],
        "maker_engines": [e._actor_id.hex() for e in maker.vllm_engines],
        "report": maker.last_report.model_dump(),
        "trajectories": {k: t.model_dump(mode="json") for k, t in maker.last_result.trajectories.items()},
        "metrics": maker.last_metrics,
        "sequences": {i: s[: lengths[i]].tolist() for i, s in rows(credited, "sequences").items()},
        "rewards": {i: float(exp.rewards[r]) for exp in credited for r, i in enumerate(exp.index)},
        "masks": {i: m.tolist() for i, m in rows(credited, "action_mask").items()},
        "stock": {i: a.tolist() for i, a in rows(stock, "advantages").items()},
        "advantages": {i: a.tolist() for i, a in rows(credited, "advantages").items()},
        "split_info": [{k: float(v) for k, v in item.info.items()} for item in split_experience_batch(credited[0])],
        "tokens_left": len(maker.prover.policy.tokens),
    }


def trajectory_of(result: dict[str, Any], i: int) -> Any:
    """Trajectory ``i`` as the trainer side verified it (its content seeds the continuations)."""
    from prover_core import Trajectory

    return Trajectory.model_validate(result["trajectories"][str(i)])


@pytest.fixture(scope="module")
def cluster() -> Any:
    """Ray as the launcher starts it, the launcher's create_vllm_engines wrapper, then OpenRLHF's engines."""
    if ray.is_initialized():
        skip("Ray is already running in this process")
    launch.start_ray(
        f"{__name__}:make_setup",
        hook="tests.adapters.openrlhf_stand_in.worker_setup",
        env_vars={"PYTHONPATH": os.pathsep.join([REPO, ENGINE_ROOT, ADAPTER_ROOT, stand_in.FAKE_VLLM])},
        num_cpus=4,
        num_gpus=2,
        include_dashboard=False,
        log_to_driver=False,
    )
    log = ray.remote(num_cpus=0)(stand_in.RequestLog).options(name=stand_in.REQUEST_LOG).remote()
    engine_mod.publish_on_create()  # what `python -m prover_openrlhf.launch` does before train_ppo_ray runs
    from openrlhf.trainer import ray as openrlhf_ray  # train_ppo_ray: `from openrlhf.trainer.ray import ...`

    engines = openrlhf_ray.create_vllm_engines(
        2, 1, MODEL, 0, False, False, True, MAX_LEN, None, None, True, None, agent_func_path=AGENT_FILE
    )
    yield NS(engines=engines, log=log)
    ray.shutdown()
    os.environ.pop(SETUP_ENV, None)
    uninstall()


def _sleeping(actor: Any) -> bool:
    return actor.llm.awake != {"weights", "kv_cache"}  # the stand-in engine's state (is_sleeping is async)


def asleep(engine: Any) -> bool:
    """Whether the engine actor's stand-in vLLM sleeps (a request would not tell: a sleeping vLLM queues it)."""
    return bool(ray.get(engine.__ray_call__.remote(_sleeping)))


def test_trainer_maker_finds_the_engines_and_verifies_on_them_token_exactly(cluster: Any) -> None:
    ray.get(cluster.log.take.remote())
    assert all(asleep(e) for e in cluster.engines)  # create_vllm_engines(vllm_enable_sleep=True) put them to sleep

    result = ray.get(ray.remote(num_cpus=1)(trainer_side).remote(cluster.engines), timeout=600)
    requests = ray.get(cluster.log.take.remote())

    # The handles reached the experience maker through the launcher's registry, not through OpenRLHF.
    assert result["maker_class"] == "ProverExperienceMaker"
    driver_ids = [e._actor_id.hex() for e in cluster.engines]
    assert result["trainer_engines"] == result["maker_engines"] == driver_ids

    # The rollout: one success per group (the model's fixed policy), sequences = prompt + actions + feedback.
    rewards = result["rewards"]
    successes = sorted(i for i, r in rewards.items() if r == 1.0)
    assert len(rewards) == 2 * N and [i // N for i in successes] == [0, 1]
    prompt_of = {}
    for i in successes:
        text = stand_in.char_text(result["sequences"][i])
        prompt = next(p for p in stand_in.PROMPTS if text.startswith(p))
        assert text == prompt + TAKE + HOLD + "open door" + "The door opens.\n"
        prompt_of[i] = prompt

    # The rollout's own requests (OpenRLHF's executor, no seed): each action gets the room left, not MAX_NEW.
    rollout_requests = [(ids, mt) for ids, seed, mt in requests if seed is None]
    assert rollout_requests and all(mt == MAX_LEN - len(ids) > MAX_NEW for ids, mt in rollout_requests)
    # Every continuation request, exactly: token ids, per-request seed, max_tokens (the executor's rule).
    continuation = Counter((tuple(ids), seed, mt) for ids, seed, mt in requests if seed is not None)
    expected: Counter[tuple[tuple[int, ...], int, int]] = Counter()
    for i in successes:
        expected += stand_in.expected_requests(prompt_of[i], trajectory_of(result, i), MAX_LEN)
    assert continuation == expected
    assert result["metrics"]["prover/engine_calls"] == sum(expected.values())

    # Verification from those continuations: Delta = 8/8 - (#even a0)/8, credited on turn 0's tokens.
    groups = {g["group_id"]: g for g in result["report"]["groups"]}
    assert set(groups) == {"0", "1"}
    accepted = 0
    for i in successes:
        g = groups[str(i // N)]
        evens = stand_in.pre_successes(trajectory_of(result, i))
        v = g["verification"]
        assert (v["pre_successes"], v["pre_count"], v["post_successes"], v["post_count"]) == (evens, 8, 8, 8)
        delta = 1 - evens / 8
        assert g["status"] == ("accepted" if delta > 0 else "rejected")
        accepted += g["status"] == "accepted"
        span = mask_runs(result["masks"][i])[0]
        assert span[1] - span[0] == len(TAKE)
        for p, (got, stock) in enumerate(zip(result["advantages"][i], result["stock"][i], strict=True)):
            bonus = LAM * delta if g["status"] == "accepted" and span[0] <= p < span[1] else 0.0
            assert got == pytest.approx(stock + bonus, abs=1e-6)
    for i in set(rewards) - set(successes):
        assert result["advantages"][i] == result["stock"][i]  # failed runs: OpenRLHF's values, bit for bit

    # ProVer's figures ride in Experience.info through OpenRLHF's own split into replay-buffer items.
    assert result["metrics"]["prover/groups_accepted"] == accepted
    assert result["metrics"]["prover/engine_failures"] == 0
    times = result["metrics"]
    assert 0 < times["prover/time/verify"] <= times["prover/time/total"] <= times["prover/time_s"]  # stage times
    for item in result["split_info"]:
        assert item["prover/groups_accepted"] == accepted
        assert item["prover/engine_calls"] == sum(expected.values())
        assert BONUS_INFO_KEY in item
    assert result["tokens_left"] == 0  # the token store is emptied after the step

    # --vllm.enable_sleep: woken for verification, asleep again afterwards (as SamplesGenerator leaves them).
    assert all(asleep(e) for e in cluster.engines)


def test_engines_left_asleep_time_out_into_a_recorded_skip_and_grpo_credit_is_intact(cluster: Any) -> None:
    """Engines asleep but the maker told they are not (enable_sleep off): vLLM queues every request until a
    ``wake_up`` that never comes, so each continuation runs into the policy's time limit: a recorded skip."""
    args = make_args(enable_sleep=False)
    samples = rollout(make_args(enable_sleep=True), cluster.engines)  # records go to the job-wide store
    # the setup comes from PROVER_OPENRLHF_SETUP (make_setup), the engines from the launcher's registry
    maker = ProverExperienceMaker(None, None, None, None, FixedKLController(0.0), NS(args=args), NS(pad_token_id=1))
    maker._prover = dataclasses.replace(maker.prover, policy=engine_mod.engine_policy(maker, timeout_s=1.0))
    experiences = without_model_forward(maker, samples)
    stock = STOCK.compute_advantages_and_returns(maker, copy.deepcopy(experiences))
    ray.get(cluster.log.take.remote())
    credited = maker.compute_advantages_and_returns(experiences)

    statuses = {g.group_id: (g.status, g.stage) for g in maker.last_report.groups}
    assert statuses == {"0": ("skipped", "verify"), "1": ("skipped", "verify")}
    for g in maker.last_report.groups:
        # curtailment's overlap schedule (the default): both boundaries' 8 continuations are sent together; the
        # post ones time out, which settles the group (incomplete), so the pre ones, timed out too, go unused
        assert g.verification is not None and g.verification.failed_continuations == 8
        assert g.verify_stats is not None and g.verify_stats.cancelled == 8
    assert maker.last_metrics["prover/engine_failures"] == maker.last_metrics["prover/engine_calls"] == 32
    assert maker.last_metrics["prover/groups_skipped"] == 2
    assert ray.get(cluster.log.take.remote()) == []  # the model never ran: the requests wait in the engine
    for exp, ref in zip(credited, stock, strict=True):
        assert torch.equal(exp.advantages, ref.advantages)
        assert float(exp.info[BONUS_INFO_KEY].abs().sum()) == 0.0
    engine_mod.RolloutEngines(cluster.engines).call_all("wake_up")  # the queued requests are served now
    deadline = time.monotonic() + 60
    while (
        sum(ray.get([e.get_num_unfinished_requests.remote() for e in cluster.engines])) and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    engine_mod.RolloutEngines(cluster.engines).call_all("sleep")
    assert len(ray.get(cluster.log.take.remote())) == 32


def test_rollout_engines_send_token_ids_seed_and_budget(cluster: Any) -> None:
    """One request through RolloutEngines to a real RolloutRayActor: what arrives, what comes back."""
    engines = engine_mod.RolloutEngines(cluster.engines, max_len=20)
    ray.get(cluster.log.take.remote())
    with engines.awake(sleep_after=True):
        assert not any(asleep(e) for e in cluster.engines)
        ray.get(cluster.log.take.remote())  # drop the probes
        prompt = stand_in.char_ids("go\n")
        take = stand_in.char_ids(TAKE)
        g = asyncio.run(engines.generate(prompt, SamplingParams(max_tokens=3, seed=4)))  # even seed: "take key"
        assert g.token_ids == tuple(take[:3]) and g.text == "tak" and g.finish_reason == "length"
        # a stop token (the space): generation ends with it; max_tokens = min(50, 20 - 3)
        g = asyncio.run(engines.generate(prompt, SamplingParams(max_tokens=50, seed=6, stop_token_ids=(take[4],))))
        assert g.token_ids == tuple(take[:5]) and g.text == "take " and g.finish_reason == "stop"
        # max_tokens is capped by the room left: 20 - 17 = 3
        long_prompt = stand_in.char_ids("x" * 17)
        g = asyncio.run(engines.generate(long_prompt, SamplingParams(max_tokens=50, seed=3)))
        assert g.token_ids == tuple(stand_in.char_ids("ope"))
        with pytest.raises(ContinuationLimitError, match="no room"):
            asyncio.run(engines.generate(stand_in.char_ids("x" * 20), SamplingParams(seed=1)))
    assert ray.get(cluster.log.take.remote()) == [(prompt, 4, 3), (prompt, 6, 17), (long_prompt, 3, 3)]
    assert all(asleep(e) for e in cluster.engines)
    assert sorted(engines.requests) == [1, 2]  # spread over both engines
    policy = EnginePolicy(engines, TokenStore(), render_observation=list, timeout_s=1.0)
    with pytest.raises(EngineTimeoutError):  # asleep: vLLM queues the request, it never answers
        asyncio.run(policy.generate(prompt, SamplingParams(seed=2)))
    assert ray.get(cluster.log.take.remote()) == []
    with engines.awake(sleep_after=True):  # woken, the queued request is served
        time.sleep(0.5)
    assert [(ids, seed) for ids, seed, _ in ray.get(cluster.log.take.remote())] == [(prompt, 2)]
