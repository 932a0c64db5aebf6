"""ProVer's v1 trainer, agent loop and engine against verl 0.9.1's real code on CPU (Ray, TransferQueue).

Real here: verl's composed Hydra config, ``PPOTrainerSync`` / ``ProverTrainerSync`` construction and
``_compute_advantage`` (with ``compute_advantage_for_multi_trajectories``), TransferQueue (controller
and storage as Ray actors), ``LLMServerManager.create_empty`` + verl's ``GlobalRequestLoadBalancer`` and
``LLMServerClient``, ``CheckpointEngineManager`` (``naive`` backend, as the v1 trainer forces),
``AgentLoopBase`` / ``AgentLoopOutput.as_dict`` / ``list_of_dict_to_tensordict`` as the TQ agent-loop
worker uses them. Stand-ins for what needs a GPU: the replica servers are Ray actors implementing the
replica server's ``generate(prompt_ids, sampling_params, request_id, ...) -> TokenOutput`` signature
(a scripted "model", ``tests/adapters/verl_replica.py``), ``ReplicaStandIn`` has the ``RolloutReplica``
methods the checkpoint manager calls, ``ActorWorkerGroupStandIn.update_weights`` plays the FSDP actor that
wakes the colocated replicas and loads its weights (what ``actor_wg.update_weights(mode="naive")`` does on a GPU).

The environment (``Corridor``): positions 0..3, ``r`` moves right, anything else falls in a hole
(episode over, failure); reaching 3 succeeds. Observations ``p<pos>``. The prompt is ``<script>|p0\\n``.
The scripted model: without a seed it plays the script's next character (one token); with a seed ``s``
(continuations) it plays ``r`` unless ``s % 3 == 0``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from tests.hosts import require_host

require_host("verl")
require_host("transfer_queue")
ray = require_host("ray")

import torch  # noqa: E402
import transfer_queue as tq  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from transfer_queue import KVBatchMeta  # noqa: E402
from verl.checkpoint_engine import CheckpointEngineManager  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ  # noqa: E402
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402
from verl.workers.config import CheckpointEngineConfig  # noqa: E402
from verl.workers.rollout.llm_server import LLMServerManager  # noqa: E402

import prover_verl  # noqa: E402
from prover_core import ProverConfig, RandomJudge, Segment, Trajectory  # noqa: E402
from prover_core.chance import Lift  # noqa: E402
from prover_core.errors import EngineError  # noqa: E402
from prover_core.protocols import Step  # noqa: E402
from prover_core.verify import continuation_seeds  # noqa: E402
from prover_engine import EnginePolicy, SamplingParams, TokenStore  # noqa: E402
from prover_engine.errors import EngineTimeoutError  # noqa: E402
from prover_engine.policy import action_seed  # noqa: E402
from prover_verl import SetupError  # noqa: E402
from prover_verl.agent_loop import ProverEnvAgentLoop  # noqa: E402
from prover_verl.engine import VerlServerEngine  # noqa: E402
from prover_verl.replicas import awake_replicas  # noqa: E402
from prover_verl.spec import ProverSpec  # noqa: E402
from prover_verl.startup import install_startup_guard  # noqa: E402
from prover_verl.trainer import ProverTrainerColocateAsync, ProverTrainerSync  # noqa: E402
from tests.adapters.verl_replica import VOCAB, ReplicaServer  # noqa: E402

prover_verl.register()
install_startup_guard()

SCRIPTS = ["rrr", "rx", "x", "rrx"]  # session 0 succeeds in 3 turns; 1..3 fail
LAM, K = 2.0, 8


def char_tokenizer() -> Any:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[PAD]": 1, **{c: i + 2 for i, c in enumerate(VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


class Corridor:
    def reset(self, spec: Mapping[str, Any]) -> Step:
        self.pos = 0
        return Step(observation="p0")

    def step(self, action: Any) -> Step:
        if action != "r":
            return Step(observation="hole", done=True, success=False)
        self.pos += 1
        return Step(observation=f"p{self.pos}", done=self.pos == 3, success=self.pos == 3)


class NominateTurnOne:
    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: Any) -> Any:
        from prover_core import Proposal

        return Proposal(segment=Segment(trajectory_id=success.id, start=1, end=1))


class CorridorSpec(ProverSpec):
    max_turns = 4

    def make_env(self) -> Corridor:
        return Corridor()

    def reset_spec(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        return {"script": sample["extra_info"]["script"]}

    def prompt_ids(self, sample: Mapping[str, Any], observation: Any) -> list[int]:
        return self.tokenizer.encode(f"{sample['extra_info']['script']}|", add_special_tokens=False) + (
            self.render_observation(observation)
        )

    def judge(self) -> NominateTurnOne:
        return NominateTurnOne()

    def prover_config(self) -> ProverConfig:
        return ProverConfig(k=K, lam=LAM)

    def sampling(self) -> SamplingParams:
        return SamplingParams(max_tokens=1, temperature=1.0)


LoopbackServer = ray.remote(ReplicaServer)
"""The replica servers: Ray actors of :class:`tests.adapters.verl_replica.ReplicaServer`."""


class ReplicaStandIn:
    """The ``RolloutReplica`` methods ``CheckpointEngineManager`` calls."""

    def __init__(self, server: Any) -> None:
        self.server = server

    async def sleep(self) -> None:
        await self.server.sleep.remote()

    async def wake_up(self) -> None:
        await self.server.load_weights.remote(-1)

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        await self.server.log.remote("abort")

    async def resume_generation(self) -> None:
        await self.server.log.remote("resume")


class ActorWorkerGroupStandIn:
    """``actor_wg.update_weights(global_steps, mode="naive")``: wakes the colocated replicas with the weights."""

    def __init__(self, servers: list[Any]) -> None:
        self.servers = servers

    def update_weights(self, global_steps: int | None = None, mode: str = "naive") -> list[Any]:
        return [s.load_weights.remote(global_steps) for s in self.servers]


class CpuServerManager(LLMServerManager):
    """verl's server manager without a replica class (verl's hook "for recipe to change"): resolving the
    vLLM replica class imports vLLM, which a CPU machine lacks; ``create_empty`` launches no replica."""

    rollout_replica_class = object


def compose(**overrides: str) -> Any:
    import verl.trainer
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    base = {
        "algorithm.adv_estimator": "prover",
        "algorithm.norm_adv_by_std_in_grpo": "false",
        "trainer.v1.trainer_mode": "prover_sync",
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.n": "4",
        "actor_rollout_ref.rollout.response_length": "32",
        "actor_rollout_ref.rollout.nnodes": "1",
        "data.train_batch_size": "1",
        "+prover.spec": f"{__name__}.CorridorSpec",
    }
    base.update(overrides)
    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=[f"{k}={v}" for k, v in base.items() if v])


def start_ray(attempts: int = 5) -> None:
    """A local Ray (Ray gives its raylet a fixed 30 s to register, which a loaded machine can miss: retry)."""
    for attempt in range(attempts):
        try:
            ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
            return
        except Exception:
            ray.shutdown()
            if attempt == attempts - 1:
                raise


@pytest.fixture(scope="module")
def cluster() -> Any:
    start_ray()
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    servers = [LoopbackServer.remote(f"replica{i}") for i in range(2)]
    config = compose()
    manager = CpuServerManager.create_empty(config=config)
    ray.get(
        manager.global_load_balancer.add_servers.remote({f"127.0.0.1:{9000 + i}": s for i, s in enumerate(servers)})
    )
    yield {"servers": servers, "config": config, "manager": manager}
    tq.close()
    ray.shutdown()


def take(servers: list[Any]) -> tuple[list[list[str]], list[tuple[list[int], dict[str, Any]]]]:
    taken = ray.get([s.take.remote() for s in servers])
    return [events for events, _ in taken], [r for _, requests in taken for r in requests]


def set_all(servers: list[Any], **kw: Any) -> None:
    ray.get([s.set.remote(**kw) for s in servers])


# --- the engine over verl's LLMServerClient -------------------------------------------------------


def test_engine_sends_exact_ids_seed_and_stop_through_verls_client_to_both_replicas(cluster: Any) -> None:
    import asyncio

    servers = cluster["servers"]
    set_all(servers, awake=True, mode="ok")
    take(servers)
    engine = VerlServerEngine(cluster["manager"].get_client())
    assert engine.backend == "vllm"
    prompts = [[VOCAB.index(c) + 2 for c in f"{i}|p0\n"] for i in range(8)]
    params = SamplingParams(max_tokens=1, temperature=0.7, top_p=0.9, seed=3, stop_token_ids=(5,))

    async def run() -> list[Any]:
        return await asyncio.gather(*(engine.generate(p, params) for p in prompts))

    generations = asyncio.run(run())
    assert [g.token_ids for g in generations] == [(VOCAB.index("x") + 2,)] * 8  # seed 3: x
    assert generations[0].logprobs == (-0.5,) and generations[0].finish_reason == "completed"
    events, requests = take(servers)
    assert sorted(p for p, _ in requests) == sorted(prompts)  # exact ids, no re-tokenisation
    sent = requests[0][1]
    assert sent["seed"] == 3 and sent["stop_token_ids"] == [5] and sent["max_tokens"] == 1
    assert sent["temperature"] == 0.7 and sent["top_p"] == 0.9 and sent["logprobs"] is False
    assert {k: sent[k] for k in params.distribution()} == {**params.distribution(), "top_k": -1}  # -1: verl's "off"
    assert all(e.count("generate") > 0 for e in events), "verl's load balancer spreads requests over both replicas"


@pytest.mark.parametrize(
    ("mode", "error"), [("raise", EngineError), ("abort", EngineError), ("slow", EngineTimeoutError)]
)
def test_replica_faults_are_typed_errors(cluster: Any, mode: str, error: type[Exception]) -> None:
    import asyncio

    servers = cluster["servers"]
    set_all(servers, awake=True, mode=mode)
    policy = EnginePolicy(
        VerlServerEngine(cluster["manager"].get_client()), TokenStore(), render_observation=list, timeout_s=2.0
    )
    try:
        with pytest.raises(error):
            asyncio.run(policy.generate([2, 3], SamplingParams(max_tokens=1)))
    finally:
        set_all(servers, mode="ok")
        take(servers)


def test_an_asleep_replica_queues_the_request_until_woken(cluster: Any) -> None:
    """What a real run hits when verification forgets to wake the replicas: no error, a wait to the time limit."""
    import asyncio

    servers = cluster["servers"]
    set_all(servers, awake=False, mode="ok")
    take(servers)
    policy = EnginePolicy(
        VerlServerEngine(cluster["manager"].get_client()), TokenStore(), render_observation=list, timeout_s=1.0
    )
    try:
        with pytest.raises(EngineTimeoutError):
            asyncio.run(policy.generate([2, 3], SamplingParams(max_tokens=1)))
    finally:
        set_all(servers, awake=True)
        take(servers)


def test_rollout_sampling_is_read_from_verls_rollout_config_in_one_place() -> None:
    from prover_verl.spec import rollout_sampling

    config = compose(
        **{"actor_rollout_ref.rollout.temperature": "0.7", "actor_rollout_ref.rollout.top_p": "0.8"},
    )
    tokenizer = char_tokenizer()
    tokenizer.eos_token = "[PAD]"
    assert rollout_sampling(config, tokenizer) == SamplingParams(
        max_tokens=32, temperature=0.7, top_p=0.8, top_k=0, repetition_penalty=1.0, stop_token_ids=(1,)
    )
    config = compose(**{"actor_rollout_ref.rollout.top_k": "20"})
    assert rollout_sampling(config, tokenizer).top_k == 20


def test_sglang_without_deterministic_inference_is_warned_at_start_up() -> None:
    from prover_verl.engine import sglang_seed_note

    assert sglang_seed_note(compose()) is None  # vLLM honours seeds
    sglang = {"actor_rollout_ref.rollout.name": "sglang"}
    assert "sampling_seed" in str(sglang_seed_note(compose(**sglang)))
    with pytest.warns(UserWarning, match="enable_deterministic_inference"):
        ProverTrainerSync(compose(**sglang))
    on = {**sglang, "+actor_rollout_ref.rollout.engine_kwargs.sglang.enable_deterministic_inference": "true"}
    assert sglang_seed_note(compose(**on)) is None


def test_episode_keeps_the_servers_weights_versions_first_min_last_max() -> None:
    from prover_verl.agent_loop import merge_server_fields

    fields: dict[str, Any] = {}
    for version in (3, 4, 6):  # the weights were updated twice during the episode (partial rollout)
        merge_server_fields(fields, {"global_steps": version, "min_global_steps": version, "max_global_steps": version})
    assert fields == {"global_steps": 3, "min_global_steps": 3, "max_global_steps": 6}


def test_seed_names_per_backend(cluster: Any) -> None:
    client = cluster["manager"].get_client()
    params = SamplingParams(seed=7)
    assert VerlServerEngine(client, backend="sglang").sampling_params(params)["sampling_seed"] == 7
    assert VerlServerEngine(client, backend="trtllm").sampling_params(params)["seed"] == 7
    with pytest.raises(ValueError, match="unknown rollout backend"):
        VerlServerEngine(client, backend="hf")


# --- start-up checks ----------------------------------------------------------------------------


def test_prover_estimator_with_verls_own_trainer_fails_at_construction() -> None:
    config = compose(**{"trainer.v1.trainer_mode": "sync"})
    with pytest.raises(SetupError, match="trainer_mode='sync' is PPOTrainerSync, which never sets the ProverStep"):
        PPOTrainerSync(config)


def test_prover_trainer_refuses_another_estimator_and_a_missing_spec() -> None:
    with pytest.raises(SetupError, match=r"algorithm\.adv_estimator='grpo'"):
        ProverTrainerSync(compose(**{"algorithm.adv_estimator": "grpo"}))
    with pytest.raises(SetupError, match=r"\+prover.spec"):
        ProverTrainerSync(compose(**{"+prover.spec": ""}))


def test_prover_trainers_keep_their_base_modes_logic() -> None:
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

    sync = ProverTrainerSync(compose())
    assert sync.trainer_mode == "sync" and type(sync.replay_buffer) is ReplayBuffer
    colocate = ProverTrainerColocateAsync(compose(**{"trainer.v1.trainer_mode": "prover_colocate_async"}))
    assert colocate.trainer_mode == "colocate_async" and colocate.configured_mode == "prover_colocate_async"
    assert type(colocate.replay_buffer) is ReplayBufferAsync and colocate.resume_generation


def test_plain_grpo_with_verls_trainer_is_untouched_by_the_guard() -> None:
    trainer = PPOTrainerSync(compose(**{"algorithm.adv_estimator": "grpo", "trainer.v1.trainer_mode": "sync"}))
    assert trainer.trainer_mode == "sync"


def checkpoint_manager(servers: list[Any]) -> CheckpointEngineManager:
    """verl's own manager, with the backend the v1 trainer forces (``naive``)."""
    return CheckpointEngineManager(
        config=CheckpointEngineConfig(backend="naive"),
        actor_wg=ActorWorkerGroupStandIn(servers),
        replicas=[ReplicaStandIn(s) for s in servers],
    )


def test_colocate_async_order_wake_resume_then_abort_sleep_even_when_verification_fails(cluster: Any) -> None:
    servers = cluster["servers"]
    take(servers)
    with (
        pytest.raises(RuntimeError, match="verification failed"),
        awake_replicas(checkpoint_manager(servers), 3, resume_generation=True),
    ):
        raise RuntimeError("verification failed")
    events, _ = take(servers)
    assert events == [["load_weights:3", "resume", "abort", "sleep"]] * 2


# --- recording agent loop -> TransferQueue -> ProVer trainer's advantage step ---------------------


def record_sessions(cluster: Any, uid: str) -> tuple[list[str], list[Any]]:
    """Run the recording agent loop for the four sessions and put the outputs into TQ as verl's TQ worker does."""
    import asyncio

    config, tokenizer = cluster["config"], char_tokenizer()
    loop = ProverEnvAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=cluster["manager"].get_client(),
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
    )

    async def run() -> list[Any]:
        sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}
        return await asyncio.gather(
            *(
                loop.run(sampling, uid=uid, session_id=i, extra_info={"script": s}, raw_prompt=[])
                for i, s in enumerate(SCRIPTS)
            )
        )

    worker = tq_worker()

    async def record() -> list[Any]:
        outputs = await run()
        for i, output in enumerate(outputs):  # verl's own TQ worker puts each output and its tags into TQ
            await worker._agent_loop_postprocess(
                output, False, uid=uid, session_id=i, global_steps=1, extra_info={"script": SCRIPTS[i]}
            )
        return outputs

    outputs = asyncio.run(record())
    keys = [f"{uid}_{i}_0" for i in range(len(outputs))]
    old = [{"old_log_probs": torch.zeros(len(o.response_ids), dtype=torch.float32)} for o in outputs]
    tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(old))  # the actor's step
    return keys, outputs


def tq_worker() -> Any:
    """verl's ``AgentLoopWorkerTQ`` (the class behind the Ray actor) for text rows: no processor, no reward
    workers, no teacher: what ``_agent_loop_postprocess`` reads of it."""
    worker = object.__new__(AgentLoopWorkerTQ.__ray_actor_class__)
    worker.processor = None
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    return worker


def tags_of(keys: list[str]) -> list[dict[str, Any]]:
    """The tags verl's TQ worker wrote for ``keys`` (what the trainer's ``KVBatchMeta`` carries)."""
    listed = tq.kv_list(partition_id="train")["train"]
    return [dict(listed[k]) for k in keys]


def test_agent_loop_records_token_exact_spans_observations_and_reset(cluster: Any) -> None:
    set_all(cluster["servers"], awake=True, mode="ok")
    keys, outputs = record_sessions(cluster, "uidrec")
    tq.kv_clear(keys=keys, partition_id="train")
    out = outputs[0]
    trajectory = Trajectory.model_validate(out.extra_fields["prover_trajectory"])
    enc = {c: VOCAB.index(c) + 2 for c in VOCAB}
    assert out.prompt_ids == [enc[c] for c in "rrr|p0\n"]
    assert out.response_ids == [enc[c] for c in "rp1\nrp2\nr"]
    assert out.response_mask == [1, 0, 0, 0, 1, 0, 0, 0, 1]
    assert [t.token_span for t in trajectory.turns] == [(0, 1), (4, 5), (8, 9)]
    assert [t.observation for t in trajectory.turns] == ["p0", "p1", "p2"]
    assert [t.action for t in trajectory.turns] == ["r", "r", "r"]
    assert trajectory.reset == {"script": "rrr"} and trajectory.success and out.reward_score == 1.0
    assert trajectory.id == "uidrec_0" and trajectory.group_id == "uidrec"
    failed = Trajectory.model_validate(outputs[2].extra_fields["prover_trajectory"])
    assert not failed.success and outputs[2].reward_score == 0.0 and outputs[2].response_mask == [1]


def expected_delta(trajectory: Trajectory) -> float:
    """Delta by hand: from boundary 1 two ``r`` are needed (actions 0, 1), from boundary 2 one (action 0)."""
    pre, post = continuation_seeds(ProverConfig(k=K, lam=LAM).stages.verify, trajectory)

    def r(seed: int, j: int) -> bool:
        return action_seed(seed, j) % 3 != 0

    rate_pre = np.mean([r(s, 0) and r(s, 1) for s in pre])
    rate_post = np.mean([r(s, 0) for s in post])
    return float(rate_post - rate_pre)


def test_prover_trainer_advantage_step_end_to_end(cluster: Any) -> None:
    servers = cluster["servers"]
    set_all(servers, awake=True, mode="ok")
    keys, outputs = record_sessions(cluster, "uidtrain")
    take(servers)
    set_all(servers, awake=False)  # as after on_sample_end: replicas asleep at the advantage step
    tags = tags_of(keys)
    # the server's weights version, as verl's _compute_metrics reads them: np.array(..., dtype=int) (None: TypeError)
    assert [(t["min_global_steps"], t["max_global_steps"]) for t in tags] == [(0, 0)] * 4
    assert np.array([t["min_global_steps"] for t in tags], dtype=int).tolist() == [0] * 4

    trainer = ProverTrainerSync(cluster["config"])
    assert trainer.trainer_mode == "sync" and trainer.configured_mode == "prover_sync"
    trainer.tokenizer = char_tokenizer()
    trainer.global_steps = 5
    trainer.llm_server_manager = cluster["manager"]
    trainer.checkpoint_manager = checkpoint_manager(servers)
    metrics: dict[str, Any] = {}
    trainer._compute_advantage(KVBatchMeta(keys=keys, tags=tags, partition_id="train"), metrics)

    events, requests = take(servers)
    for replica_events in events:  # woken with the actor's weights, used, put back to sleep
        assert replica_events[0] == "load_weights:4" and replica_events[-1] == "sleep"
    assert sum(e.count("generate") for e in events) == len(requests) > 0

    representative = Trajectory.model_validate(outputs[0].extra_fields["prover_trajectory"])
    assert representative.id == "uidtrain_0"
    delta = expected_delta(representative)
    assert delta > 0
    assert metrics["prover/groups_accepted"] == 1.0
    assert 0 < metrics["prover/time/verify"] <= metrics["prover/time/total"]  # per-stage wall times are logged
    assert metrics["prover/verify_policy_rounds"] > 0 and metrics["prover/rollout_policy_rounds"] > 0  # latency
    data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages", "response_mask"])
    adv = data["advantages"].to_padded_tensor(padding=0.0)
    mask = data["response_mask"].to_padded_tensor(padding=0).float()
    grpo = torch.tensor([0.75, -0.25, -0.25, -0.25])[:, None] * mask
    expected = grpo.clone()
    expected[0, 4] += LAM * delta  # turn 1 of session 0: response token 4
    torch.testing.assert_close(adv, expected)
    # the credit share against verl's own advantage: one token of LAM * delta over sum |A| on the response tokens
    assert metrics["prover/credit_share"] == pytest.approx(LAM * delta / float(grpo.abs().sum()))
    assert metrics["prover/trigger_share"] == 1.0

    # every continuation's context starts with the recorded tokens before its boundary, exactly
    record = outputs[0]
    before = {1: record.prompt_ids + record.response_ids[:4], 2: record.prompt_ids + record.response_ids[:8]}
    assert all(any(p[: len(b)] == b for b in before.values()) for p, _ in requests)
    assert all("seed" in params for _, params in requests)
    tq.kv_clear(keys=keys, partition_id="train")


def test_nothing_creditable_runs_verls_step_without_waking(cluster: Any) -> None:
    servers = cluster["servers"]
    set_all(servers, awake=True, mode="ok")
    global SCRIPTS
    saved, SCRIPTS = SCRIPTS, ["x", "rx", "x", "rrx"]  # no success: not eligible
    try:
        keys, _ = record_sessions(cluster, "uidnone")
    finally:
        SCRIPTS = saved
    take(servers)
    trainer = ProverTrainerSync(cluster["config"])
    trainer.tokenizer, trainer.global_steps, trainer.llm_server_manager = char_tokenizer(), 2, cluster["manager"]
    trainer.checkpoint_manager = None  # must not be touched
    metrics: dict[str, Any] = {}
    trainer._compute_advantage(KVBatchMeta(keys=keys, tags=[{} for _ in keys], partition_id="train"), metrics)
    events, requests = take(servers)
    assert requests == [] and all(e == [] for e in events)
    assert metrics["prover/groups_accepted"] == 0.0
    adv = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages"])["advantages"]
    assert float(adv.to_padded_tensor(padding=0.0).abs().sum()) == 0.0  # all-fail group: GRPO gives 0
    tq.kv_clear(keys=keys, partition_id="train")


class ControlSpec(CorridorSpec):
    def prover_config(self) -> ProverConfig:
        return ProverConfig(k=K, lam=LAM, control_share=1.0)


def test_the_trainer_logs_the_judge_against_chance_over_a_window_of_steps(cluster: Any) -> None:
    """``control_share=1``: the trainer keeps one ``LiftWindow`` across advantage steps and logs it; the one eligible
    group verifies a random control turn each step, so ``prover/control_verified`` counts 1, then 2."""
    servers = cluster["servers"]
    trainer = ProverTrainerSync(compose(**{"+prover.spec": f"{__name__}.ControlSpec"}))
    trainer.tokenizer, trainer.llm_server_manager = char_tokenizer(), cluster["manager"]
    trainer.checkpoint_manager = checkpoint_manager(servers)
    for step in (1, 2):
        set_all(servers, awake=True, mode="ok")
        keys, _ = record_sessions(cluster, f"uidcontrol{step}")
        take(servers)
        trainer.global_steps = 5 + step
        metrics: dict[str, Any] = {}
        trainer._compute_advantage(KVBatchMeta(keys=keys, tags=tags_of(keys), partition_id="train"), metrics)
        take(servers)
        assert metrics["prover/groups_control"] == 1.0 and metrics["prover/control_verified"] == float(step)
        assert metrics["prover/judge_verified"] == 0.0 and math.isnan(metrics["prover/judge_lift"])
        tq.kv_clear(keys=keys, partition_id="train")
    window = trainer.prover_run.window
    assert window is not None and window.total.control_verified == 2


class ThrottleSpec(CorridorSpec):
    def judge(self) -> Any:
        return RandomJudge(0)

    def prover_config(self) -> ProverConfig:
        return ProverConfig(k=K, lam=LAM, control_share=0.05, lift_throttle=True)


def test_lift_throttle_acts_in_the_trainer_through_its_run(cluster: Any) -> None:
    """``lift_throttle`` with a random judge: the trainer's one :class:`~prover_core.ProverRun` (built once from the
    spec) keeps the window and the pipeline reads it, so with a window that has not shown the judge above chance the
    step's group is verified only at the controls' rate (0.05 / 0.95), here recorded ``unverified``; the replicas are
    then not asked for a continuation."""
    servers = cluster["servers"]
    trainer = ProverTrainerSync(compose(**{"+prover.spec": f"{__name__}.ThrottleSpec"}))
    trainer.tokenizer, trainer.llm_server_manager = char_tokenizer(), cluster["manager"]
    trainer.checkpoint_manager = checkpoint_manager(servers)
    window = trainer.prover_run.window
    assert window is not None
    window.add(Lift(5, 10, 5, 10))  # lift 0, its interval holds 0: not shown
    set_all(servers, awake=True, mode="ok")
    keys, _ = record_sessions(cluster, "uidthrottle")
    take(servers)
    trainer.global_steps = 9
    metrics: dict[str, Any] = {}
    trainer._compute_advantage(KVBatchMeta(keys=keys, tags=tags_of(keys), partition_id="train"), metrics)
    _, requests = take(servers)
    assert metrics["prover/groups_unverified"] == 1.0 and metrics["prover/groups_verified"] == 0.0
    assert requests == []
    assert trainer.prover_run.steps == 1
    tq.kv_clear(keys=keys, partition_id="train")


class TokenCapSpec(CorridorSpec):
    def prover_config(self) -> ProverConfig:
        return ProverConfig(k=K, lam=LAM, max_extra_token_share=1.0)


def test_the_token_cap_holds_on_verls_replicas(cluster: Any) -> None:
    """``max_extra_token_share=1``: verification may generate at most as many tokens as the rollout's actions hold
    (their token spans, as the agent loop recorded them). The engine policy over verl's replicas reports each
    action's tokens, so the replicas are asked for no more than the cap (one token per request: ``max_tokens=1``),
    and a verification the cap cut short is decided where the outcomes in settle it, else skipped for ``budget``
    (GRPO credit). Uncapped, this step's verification takes 24 actions (8 pre continuations of 2 turns, 8 post of 1)."""
    servers = cluster["servers"]
    trainer = ProverTrainerSync(compose(**{"+prover.spec": f"{__name__}.TokenCapSpec"}))
    trainer.tokenizer, trainer.llm_server_manager = char_tokenizer(), cluster["manager"]
    trainer.checkpoint_manager = checkpoint_manager(servers)
    set_all(servers, awake=True, mode="ok")
    keys, outputs = record_sessions(cluster, "uidtokens")
    take(servers)
    runs = [Trajectory.model_validate(o.extra_fields["prover_trajectory"]) for o in outputs]
    cap = sum(turn.token_span[1] - turn.token_span[0] for run in runs for turn in run.turns if turn.token_span)
    assert all(turn.token_span is not None for run in runs for turn in run.turns)
    trainer.global_steps = 11
    metrics: dict[str, Any] = {}
    trainer._compute_advantage(KVBatchMeta(keys=keys, tags=tags_of(keys), partition_id="train"), metrics)
    _, requests = take(servers)
    assert cap == 3 + 2 + 1 + 3 and metrics["prover/token_budget"] == cap  # one token per action of the 4 sessions
    assert len(requests) == metrics["prover/policy_tokens"] == cap  # each request generates its one token
    # the cap stopped 8 of the 16 continuations, and the outcomes in do not settle Delta > 0: skipped for budget
    assert metrics["prover/continuations_failed/budget"] == 8.0
    assert metrics["prover/groups_skipped_budget"] == 1.0 and metrics["prover/groups_accepted"] == 0.0
    tq.kv_clear(keys=keys, partition_id="train")
