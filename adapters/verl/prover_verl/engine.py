"""A :class:`~prover_engine.TokenEngine` over verl's own ``LLMServerClient`` (vLLM, SGLang, TRT-LLM).

verl's agent loops reach the rollout replicas through ``LLMServerClient.generate(request_id, *,
prompt_ids, sampling_params) -> TokenOutput`` (``verl/workers/rollout/llm_server.py``): the client asks
verl's global load balancer (a Ray actor) for a replica and awaits the replica server's
``generate.remote(...)`` (token ids in, token ids out, no re-tokenisation). :class:`VerlServerEngine`
turns that into the engine protocol, so ``EnginePolicy(VerlServerEngine(client), tokens, ...)``
continues recorded trajectories on the same replicas (and the same batching) as the rollout::

    policy = EnginePolicy(VerlServerEngine(trainer.get_llm_client()), tokens, render_observation=...)

The sampling dict holds the complete distribution (``temperature``, ``top_p``, ``top_k`` with 0 sent as
verl's "off" ``-1``, ``min_p``, ``repetition_penalty``, ``presence_penalty``, ``frequency_penalty``),
``logprobs``, ``max_tokens``, ``stop_token_ids`` and the seed under the backend's name (vLLM and TRT-LLM
``seed``, SGLang ``sampling_seed``). verl's replica server clamps ``max_tokens`` to the room left under
``max_model_len`` (``vllm_async_server.py``, ``async_sglang_server.py``), for continuations as for the rollout.

SGLang ignores ``sampling_seed`` unless its server runs with deterministic inference
(``+actor_rollout_ref.rollout.engine_kwargs.sglang.enable_deterministic_inference=true``):
:func:`sglang_seed_note` says so at start-up. Without it, pre and post continuations are not paired
(higher variance of Delta) and a verification cannot be reproduced.

Routing: verl's load balancer sends equal request ids to the same replica. :func:`prefix_request_id`
(the default) keys on the first 256 prompt ids, so every continuation of a group lands on the replica
that holds the group's prefix in its cache; with fewer groups than replicas some replicas idle. Pass
``request_id=`` (e.g. :func:`spread_request_id`) to spread continuations over replicas at the cost of
recomputing the shared prefix on each (not measured here: it needs GPU replicas).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prover_core.hosts import EngineError
from prover_engine import Generation, SamplingParams

SEED_KEYS = {"vllm": "seed", "sglang": "sampling_seed", "trtllm": "seed"}
"""The per-request seed's name in each backend's sampling parameters."""

ABORTED = ("aborted", "abort")


def prefix_request_id(prompt_ids: Sequence[int], prefix_tokens: int = 256) -> str:
    """A request id shared by prompts with the same first ``prefix_tokens`` ids.

    verl's load balancer routes equal request ids to the same replica (sticky sessions), so the
    pre/post continuations of one trajectory land where its prefix is already cached.
    """
    h = hashlib.blake2b(repr(list(prompt_ids[:prefix_tokens])).encode(), digest_size=12)
    return f"prover-{h.hexdigest()}"


def spread_request_id(prompt_ids: Sequence[int], prefix_tokens: int = 256) -> str:
    """A request id keyed on the whole context: continuations of one group spread over the replicas.

    Every action of every continuation gets its own id (no stickiness), so the load balancer places
    each request on the least-loaded replica; each replica recomputes (or caches) the shared prefix.
    """
    h = hashlib.blake2b(repr([int(i) for i in prompt_ids]).encode(), digest_size=12)
    return f"prover-{h.hexdigest()}-{len(prompt_ids)}"


def sglang_seed_note(config: Any) -> str | None:
    """A warning when verl's rollout runs on SGLang without deterministic inference (seeds ignored)."""
    rollout = config.actor_rollout_ref.rollout
    if str(rollout.name) != "sglang":
        return None
    kwargs = rollout.get("engine_kwargs", None) if hasattr(rollout, "get") else getattr(rollout, "engine_kwargs", None)
    sglang = (kwargs or {}).get("sglang", None) or {}
    if bool(sglang.get("enable_deterministic_inference", False)):
        return None
    return (
        "verl's rollout runs on SGLang without deterministic inference: SGLang ignores the per-request "
        "sampling_seed, so ProVer's pre and post continuations are not paired (Delta stays unbiased but has a "
        "higher variance) and a verification cannot be reproduced. Set "
        "+actor_rollout_ref.rollout.engine_kwargs.sglang.enable_deterministic_inference=true (slower sampling) "
        "or accept it; see docs/adapters/verl.md"
    )


class VerlServerEngine:
    """``generate(prompt_ids, params)`` through an ``LLMServerClient`` (async; one client call per action).

    ``backend`` (default: ``client.config.actor_rollout_ref.rollout.name``) picks the seed's name;
    ``base_sampling`` is merged under each call's parameters (e.g. ``{"ignore_eos": False}``); ``logprobs``
    asks the server for per-token log-probabilities. A reply with ``stop_reason`` ``"aborted"``
    (the replica was paused mid-request) raises :class:`~prover_core.errors.EngineError`: a
    continuation never silently ends early.
    """

    def __init__(
        self,
        client: Any,
        *,
        backend: str | None = None,
        base_sampling: Mapping[str, Any] | None = None,
        logprobs: bool = False,
        request_id: Callable[[Sequence[int]], str] = prefix_request_id,
    ) -> None:
        if not callable(getattr(client, "generate", None)):
            raise TypeError(f"client must be verl's LLMServerClient (a generate method), got {type(client).__name__}")
        self.client = client
        self.backend = backend or _backend_of(client)
        if self.backend not in SEED_KEYS:
            raise ValueError(f"unknown rollout backend {self.backend!r}; expected one of {sorted(SEED_KEYS)}")
        self.base_sampling = dict(base_sampling or {})
        self.logprobs = logprobs
        self.request_id = request_id

    def sampling_params(self, params: SamplingParams) -> dict[str, Any]:
        """The ``sampling_params`` dict handed to ``LLMServerClient.generate``."""
        out: dict[str, Any] = {**self.base_sampling, **params.extra, **params.distribution()}
        out["top_k"] = int(out["top_k"]) or -1  # verl's backends spell "off" -1
        out["max_tokens"] = params.max_tokens
        out["logprobs"] = self.logprobs
        if params.stop_token_ids:
            out["stop_token_ids"] = list(params.stop_token_ids)
        if params.seed is not None:
            out[SEED_KEYS[self.backend]] = int(params.seed)
        return out

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        ids = [int(i) for i in prompt_ids]
        output = await self.client.generate(
            self.request_id(ids), prompt_ids=ids, sampling_params=self.sampling_params(params)
        )
        if output.stop_reason in ABORTED:
            raise EngineError(
                "the rollout replica aborted the request (paused for a weight sync?); verification needs the "
                "replicas awake and generating (prover_verl.awake_replicas)"
            )
        logprobs = tuple(float(x) for x in output.log_probs) if output.log_probs else None
        return Generation(
            token_ids=tuple(int(i) for i in output.token_ids), logprobs=logprobs, finish_reason=output.stop_reason
        )


def _backend_of(client: Any) -> str:
    try:
        return str(client.config.actor_rollout_ref.rollout.name)
    except AttributeError as exc:
        raise ValueError("cannot read actor_rollout_ref.rollout.name from the client's config; pass backend=") from exc
