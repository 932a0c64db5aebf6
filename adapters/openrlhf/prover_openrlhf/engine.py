"""Continuations on OpenRLHF's own vLLM engines, token-exactly.

OpenRLHF's rollout (``MultiTurnAgentExecutor.execute`` in ``openrlhf/utils/agent.py``) calls
``await llm_engine.generate(token_ids, sampling_params)`` on a ``RolloutRayActor``
(``openrlhf/trainer/ray/vllm_engine.py``) with the conversation's token ids and a ``vllm.SamplingParams``,
and reads ``outputs[0].token_ids`` / ``text`` / ``finish_reason``. :class:`RolloutEngines` makes the same
call through the actors' Ray handles (``engine.generate.remote(token_ids, sampling_params)``), one request
per continuation action, with the request's own ``seed``: a :class:`~prover_engine.TokenEngine` for
:class:`~prover_engine.EnginePolicy`. :func:`engine_policy` builds that policy as OpenRLHF's rollout
samples: the observation's ids are ``tokenizer(text=feedback, add_special_tokens=False)`` and the action
handed to the agent instance is the engine's text, exactly as the executor does.

Where the experience maker finds the engines: OpenRLHF creates them in the driver
(``create_vllm_engines`` in ``openrlhf/cli/train_ppo_ray.py``) as unnamed actors and never gives them to
the experience maker. :func:`publish_on_create` (run by ``python -m prover_openrlhf.launch``) wraps
``create_vllm_engines`` so that the handles it returns are stored in a named registry actor
(:data:`ENGINES_ACTOR_NAME`), where :func:`find_engines` (``ProverExperienceMaker.vllm_engines``) looks
them up from the trainer actor.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from prover_core.hosts import ContinuationLimitError, EngineError
from prover_engine import EnginePolicy, Generation, SamplingParams, TokenStore
from prover_openrlhf.errors import SetupError

ENGINES_ACTOR_NAME = "prover_openrlhf_vllm_engines"
VLLM_ENGINE_MODULE = "openrlhf.trainer.ray.vllm_engine"


def vllm_sampling_params(**kwargs: Any) -> Any:
    """``vllm.SamplingParams(**kwargs)`` (imported on first use: vLLM is only there on a GPU machine)."""
    from vllm import SamplingParams as VLLMSamplingParams  # type: ignore[import-not-found]

    return VLLMSamplingParams(**kwargs)


def to_vllm_kwargs(params: SamplingParams, budget: int | None = None) -> dict[str, Any]:
    """The ``vllm.SamplingParams`` fields of one action: the complete distribution and
    ``max_tokens = min(params.max_tokens, budget)``.

    ``budget`` is the room left in the context: OpenRLHF's ``MultiTurnAgentExecutor`` sets
    ``max_tokens = max_len - len(ids)`` before every action (``openrlhf/utils/agent.py``), whatever
    ``--rollout.max_new_tokens`` says; :func:`rollout_sampling` sets ``params.max_tokens = data.max_len``
    so the budget is the cap, as there. ``top_k`` 0 (off) is sent as vLLM's ``-1``, as OpenRLHF does.
    ``params.extra`` passes through (e.g. ``min_tokens``, ``skip_special_tokens``) under the named fields.
    """
    max_tokens = params.max_tokens if budget is None else min(params.max_tokens, budget)
    distribution = params.distribution()
    distribution["top_k"] = int(distribution["top_k"]) or -1
    return {
        **params.extra,
        "n": 1,
        **distribution,
        "max_tokens": max_tokens,
        "seed": params.seed,
        "stop_token_ids": list(params.stop_token_ids) or None,
    }


def to_generation(output: Any) -> Generation:
    """A vLLM ``RequestOutput`` (what ``RolloutRayActor.generate`` returns) as a :class:`Generation`."""
    outputs = getattr(output, "outputs", None)
    if not outputs:
        raise EngineError(f"the vLLM engine returned no completion: {output!r:.200}")
    first = outputs[0]
    token_ids = tuple(int(t) for t in first.token_ids)
    logprobs = None
    if getattr(first, "logprobs", None):
        logprobs = tuple(float(step[t].logprob) for step, t in zip(first.logprobs, token_ids, strict=True))
    return Generation(token_ids=token_ids, text=first.text, logprobs=logprobs, finish_reason=first.finish_reason)


class RolloutEngines:
    """A :class:`~prover_engine.TokenEngine` over OpenRLHF's ``RolloutRayActor`` handles.

    Each ``generate`` is one ``engine.generate.remote(ids, sampling_params)`` request on the engine with
    the fewest of this object's requests in flight (vLLM batches concurrent requests). ``max_len`` is
    OpenRLHF's ``data.max_len``: an action may use the room left (``max_len - len(ids)``); a context with
    no room left ends the continuation like a turn limit (:class:`~prover_core.ContinuationLimitError`),
    where OpenRLHF's executor stops the episode. The engine must answer for exactly the ids it was sent
    (``RequestOutput.prompt_token_ids``), else :class:`~prover_core.EngineError`.
    """

    def __init__(
        self,
        engines: Sequence[Any],
        *,
        max_len: int | None = None,
        make_sampling_params: Callable[..., Any] = vllm_sampling_params,
    ) -> None:
        if not engines:
            raise SetupError("RolloutEngines needs at least one vLLM engine handle")
        if max_len is not None and max_len < 2:
            raise ValueError(f"max_len must be >= 2, got {max_len}")
        self.engines = list(engines)
        self.max_len = max_len
        self.make_sampling_params = make_sampling_params
        self.in_flight = [0] * len(self.engines)
        self.requests = [0] * len(self.engines)

    def _pick(self) -> int:
        return min(range(len(self.engines)), key=lambda i: (self.in_flight[i], self.requests[i]))

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        ids = [int(i) for i in prompt_ids]
        budget = None if self.max_len is None else self.max_len - len(ids)
        if budget is not None and budget <= 0:
            raise ContinuationLimitError(f"the context holds {len(ids)} tokens: no room under max_len={self.max_len}")
        sampling_params = self.make_sampling_params(**to_vllm_kwargs(params, budget))
        i = self._pick()
        self.in_flight[i] += 1
        self.requests[i] += 1
        try:
            output = await self.engines[i].generate.remote(ids, sampling_params)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise EngineError(f"vLLM engine {i} raised {type(exc).__name__}: {exc}") from exc
        finally:
            self.in_flight[i] -= 1
        seen = getattr(output, "prompt_token_ids", None)
        if seen is not None and [int(t) for t in seen] != ids:
            raise EngineError(f"vLLM engine {i} generated from {len(seen)} prompt tokens, not the {len(ids)} sent")
        return to_generation(output)

    def call_all(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """OpenRLHF's ``batch_vllm_engine_call(engines, method, ...)``: the same call on every engine, gathered."""
        batch_call = importlib.import_module(VLLM_ENGINE_MODULE).batch_vllm_engine_call
        return batch_call(self.engines, method, *args, **kwargs)

    @contextmanager
    def awake(self, sleep_after: bool) -> Iterator[None]:
        """Engines awake (weights and KV cache) inside; asleep again after if ``sleep_after``.

        With ``--vllm.enable_sleep`` OpenRLHF puts the engines to sleep after the rollout
        (``SamplesGenerator.generate_samples``: ``wake_up`` ... ``sleep``), before the advantage step; level-1
        sleep keeps the rollout's weights, which are the current policy until ``broadcast_to_vllm``.
        """
        if not sleep_after:
            yield
            return
        self.call_all("wake_up")
        try:
            yield
        finally:
            self.call_all("sleep")


def text_or_decode(tokenizer: Any) -> Callable[[Generation], str]:
    """The action the executor hands the agent instance: the engine's text (unstripped), else the decoded ids."""

    def parse(generation: Generation) -> str:
        if generation.text is not None:
            return generation.text
        return str(tokenizer.decode(list(generation.token_ids), skip_special_tokens=False))

    return parse


def feedback_ids(tokenizer: Any) -> Callable[[Any], list[int]]:
    """The ids OpenRLHF's executor appends for feedback: ``tokenizer(text=..., add_special_tokens=False)``."""

    def render(feedback: Any) -> list[int]:
        return [int(i) for i in tokenizer(text=feedback, add_special_tokens=False)["input_ids"]]

    return render


def rollout_sampling(args: Any) -> SamplingParams:
    """OpenRLHF's rollout sampling, read in ONE place from the trainer's ``args``.

    ``SamplesGenerator._dispatch_prompts_to_vllm`` builds ``vllm.SamplingParams(temperature=rollout.temperature,
    top_p=rollout.top_p, top_k=-1, min_tokens=1, skip_special_tokens=False)`` (the generate kwargs
    ``train_ppo_ray`` passes carry no top-k, min-p or penalties: vLLM's neutral values), and the multi-turn
    executor gives every action the room left, ``max_len - len(ids)`` (``--rollout.max_new_tokens``
    only trims the first prompt). So ``max_tokens`` is ``data.max_len``: :class:`RolloutEngines` caps each
    action at the room left, exactly as the executor does.
    """
    rollout = args.rollout
    return SamplingParams(
        max_tokens=int(args.data.max_len),
        temperature=float(getattr(rollout, "temperature", 1.0)),
        top_p=float(getattr(rollout, "top_p", 1.0)),
        top_k=0,
        min_p=0.0,
        repetition_penalty=1.0,
        presence_penalty=0.0,
        frequency_penalty=0.0,
        extra={"min_tokens": 1, "skip_special_tokens": False},
    )


def engine_policy(
    maker: Any,
    *,
    engines: Sequence[Any] | None = None,
    sampling: SamplingParams | None = None,
    max_concurrency: int = 512,
    timeout_s: float | None = 600.0,
    make_sampling_params: Callable[..., Any] = vllm_sampling_params,
) -> EnginePolicy:
    """An :class:`EnginePolicy` over the experience maker's vLLM engines, sampling as OpenRLHF's rollout does.

    ``maker`` is the :class:`~prover_openrlhf.ProverExperienceMaker` the setup factory receives
    (``maker.args``, ``maker.tokenizer``, ``maker.vllm_engines``). The maker fills the policy's token
    store from each step's rows and wakes the engines around verification.
    """
    handles = list(engines) if engines is not None else list(maker.vllm_engines)
    tokenizer = maker.tokenizer
    engine = RolloutEngines(handles, max_len=int(maker.args.data.max_len), make_sampling_params=make_sampling_params)
    return EnginePolicy(
        engine,
        TokenStore(),
        render_observation=feedback_ids(tokenizer),
        parse_action=text_or_decode(tokenizer),
        sampling=sampling or rollout_sampling(maker.args),
        max_concurrency=max_concurrency,
        timeout_s=timeout_s,
    )


# ---- Where the trainer finds the engines ---------------------------------------------------------


class EngineRegistry:
    """The Ray actor that holds the engine handles for the job (named :data:`ENGINES_ACTOR_NAME`)."""

    def __init__(self) -> None:
        self.engines: list[Any] = []

    def set(self, engines: list[Any]) -> int:
        self.engines = list(engines)
        return len(self.engines)

    def get(self) -> list[Any]:
        return list(self.engines)


_CREATED: list[Any] = []  # the creating handle keeps a (non-detached) named actor alive: never drop it


def registry(create: bool = False) -> Any:
    """The named registry actor, looked up; created (by the driver, for the job's lifetime) if ``create``."""
    import ray

    try:
        return ray.get_actor(ENGINES_ACTOR_NAME)
    except ValueError:
        if not create:
            raise
    handle = ray.remote(num_cpus=0)(EngineRegistry).options(name=ENGINES_ACTOR_NAME, get_if_exists=True).remote()
    _CREATED.append(handle)
    return handle


def publish_engines(engines: Sequence[Any]) -> int:
    """Store ``engines`` (``RolloutRayActor`` handles) in the registry; returns how many."""
    import ray

    count: int = ray.get(registry(create=True).set.remote(list(engines)))
    return count


def find_engines() -> list[Any]:
    """The published engine handles; :class:`SetupError` when there are none."""
    import ray

    try:
        engines: list[Any] = ray.get(registry().get.remote())
    except ValueError:
        engines = []
    if not engines:
        raise SetupError(
            "no vLLM engine handles are published: start training with `python -m prover_openrlhf.launch` "
            "(which publishes what create_vllm_engines returns) or call prover_openrlhf.engine.publish_engines "
            "in the driver, and give OpenRLHF --vllm.num_engines >= 1"
        )
    return engines


def publish_on_create() -> Callable[..., Any]:
    """Wrap OpenRLHF's ``create_vllm_engines`` (module and package names) to publish what it returns.

    Run in the driver before ``openrlhf.cli.train_ppo_ray`` imports the name; idempotent. Returns the wrapper.
    """
    module: Any = importlib.import_module(VLLM_ENGINE_MODULE)
    package: Any = importlib.import_module(VLLM_ENGINE_MODULE.rpartition(".")[0])
    original = module.create_vllm_engines
    if getattr(original, "publishes_engines", False):
        package.create_vllm_engines = original
        return original  # type: ignore[no-any-return]

    @functools.wraps(original)
    def create_vllm_engines(*args: Any, **kwargs: Any) -> Any:
        engines = original(*args, **kwargs)
        if engines:
            publish_engines(engines)
        return engines

    create_vllm_engines.publishes_engines = True  # type: ignore[attr-defined]
    module.create_vllm_engines = create_vllm_engines
    package.create_vllm_engines = create_vllm_engines
    return create_vllm_engines
