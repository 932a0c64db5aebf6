"""A real HTTP server on 127.0.0.1 speaking the part of the vLLM OpenAI server that TRL's ``VLLMClient``
calls (``vllm serve``, which ``trl vllm-serve`` launches): ``/health``, ``/v1/models``,
``/v1/completions`` with token-id prompts (``return_token_ids``, ``return_tokens_as_token_ids``,
``logprobs``, ``seed``, ``stop_token_ids``), ``/server_info``, ``/get_world_size``, ``/reset_prefix_cache``.

Generation is a tiny transformers causal LM sampled token by token on CPU: temperature (0 = greedy)
and top-k, stopping at EOS and the request's stop ids; fields a request leaves out come from
``generation_config`` (vLLM's ``--generation-config auto``); ``len(prompt) + max_tokens`` over
``max_model_len`` answers 400 as vLLM does; a request's ``seed`` seeds its own generator (vLLM's
per-request seed); log-probabilities
are vLLM's ``processed_logprobs`` (after temperature), the sampled token's first. The weight transfer
(NCCL in vLLM) is replaced by :meth:`LoopbackVLLM.load`, called in-process. Faults: ``fail_next`` makes
the next completions request answer 400, ``delay_s`` delays every completion. The server stops by
itself after ``lifetime_s``.

Left out (vLLM has them, these tests do not need them): top-p / min-p / penalties other than their
neutral values (refused with 400, never ignored), sleep mode (TRL's server mode never sleeps the
server), batching and prefix caching (requests are served one at a time under a lock), streaming.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import torch

from tests.loopback import LoopbackServer, Reply, Request


class LoopbackVLLM(LoopbackServer):
    """``with LoopbackVLLM(model) as server: VLLMClient(base_url=server.url)``."""

    def __init__(
        self,
        model: Any,
        *,
        eos_token_id: int,
        model_name: str = "tiny",
        lifetime_s: float = 600.0,
        max_model_len: int | None = None,
        generation_config: dict[str, Any] | None = None,
    ) -> None:
        self.model = model.eval()
        self.max_model_len = max_model_len
        """vLLM answers 400 when ``len(prompt) + max_tokens`` exceeds it (``None``: no limit)."""
        self.generation_config = dict(generation_config or {})
        """vLLM's ``--generation-config auto``: sampling fields a request leaves out come from the model's
        ``generation_config.json`` (e.g. ``{"top_k": 20}``), not from the neutral values."""
        self.eos_token_id = eos_token_id
        self.model_name = model_name
        self.lifetime_s = lifetime_s
        self.requests: list[dict[str, Any]] = []
        self.fail_next = False
        self.delay_s = 0.0
        self.mangle_prompts = False
        """Echo a different prompt than the one sent (a server that re-tokenised the context)."""
        self.prefix_cache_resets = 0
        self.in_flight = 0
        self.max_in_flight = 0
        """Completion requests being answered at once (the most seen): what the client keeps in flight."""
        self.hold_until = 0
        """Hold every completion until this many are in flight at once (at most ``hold_s``), so a test of the
        client's concurrency does not depend on how fast the machine starts its requests."""
        self.hold_s = 20.0
        self._lock = threading.Lock()
        self._count = threading.Condition()
        self._closed = threading.Lock()
        super().__init__()

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> LoopbackVLLM:
        super().start()
        timer = threading.Timer(self.lifetime_s, self.close)
        timer.daemon = True
        timer.start()
        return self

    def stop(self) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving (once: the lifetime timer and the ``with`` block may both call it)."""
        if self._closed.acquire(blocking=False):
            super().stop()

    @property
    def url(self) -> str:
        return self.root

    def load(self, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The weight transfer: copy ``(name, tensor)`` pairs into the served model."""
        with self._lock, torch.no_grad():
            params = dict(self.model.named_parameters())
            for name, tensor in named:
                params[name].copy_(tensor.detach().to(params[name].dtype))

    # -- HTTP -------------------------------------------------------------------------------------------------
    def serve(self, request: Request) -> Reply:
        path = request.path
        if request.method == "GET":
            if path == "/health":
                return Reply(body={})
            if path == "/v1/models":
                return Reply(body={"object": "list", "data": [{"id": self.model_name, "object": "model"}]})
            if path == "/server_info":
                config = {"model_config": {"logprobs_mode": "processed_logprobs"}, "weight_transfer_config": None}
                return Reply(body={"vllm_config": config})
            if path == "/get_world_size":
                return Reply(body={"world_size": 1})
            return Reply(status=404, body={"error": f"no route {path}"})
        body = json.loads(request.raw or b"{}")
        if path == "/reset_prefix_cache":
            self.prefix_cache_resets += 1
            return Reply(body={"success": True})
        if path != "/v1/completions":
            return Reply(status=404, body={"error": f"no route {path}"})
        self.requests.append(body)
        if self.fail_next:
            self.fail_next = False
            return Reply(status=400, body={"error": {"message": "scripted failure", "type": "BadRequestError"}})
        with self._count:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._count.notify_all()
            self._count.wait_for(lambda: self.max_in_flight >= self.hold_until, self.hold_s)
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            return Reply(body=self.complete(body))
        except (ValueError, KeyError, TypeError) as exc:
            return Reply(status=400, body={"error": {"message": str(exc), "type": "BadRequestError"}})
        finally:
            with self._count:
                self.in_flight -= 1

    # -- generation --------------------------------------------------------------------------------------------
    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompts = body["prompt"]
        if not (isinstance(prompts, list) and prompts and all(isinstance(p, list) for p in prompts)):
            raise ValueError("prompt must be a non-empty list of token-id lists")
        if not (body.get("return_token_ids") and body.get("return_tokens_as_token_ids")):
            raise ValueError("TRL asks for return_token_ids and return_tokens_as_token_ids")
        neutral_values = (
            ("top_p", 1.0),
            ("min_p", 0.0),
            ("repetition_penalty", 1.0),
            ("presence_penalty", 0.0),
            ("frequency_penalty", 0.0),
        )
        body = {**self.generation_config, **body}
        for key, neutral in neutral_values:
            if float(body.get(key, neutral)) != neutral:
                raise ValueError(f"{key}={body[key]} is not supported by the loopback server")
        n, seed = int(body.get("n", 1)), body.get("seed")
        limit = self.max_model_len
        for prompt in prompts:
            if limit is not None and len(prompt) + int(body.get("max_tokens", 16)) > limit:
                raise ValueError(
                    f"This model's maximum context length is {limit} tokens. However, you requested "
                    f"{len(prompt) + int(body.get('max_tokens', 16))} tokens ({len(prompt)} in the prompt)"
                )
        choices = []
        for prompt in prompts:
            generator = torch.Generator().manual_seed(int(seed)) if seed is not None else None
            for _ in range(n):
                choices.append(self._sample(list(map(int, prompt)), body, generator, len(choices)))
        return {"id": "cmpl-loopback", "object": "text_completion", "model": self.model_name, "choices": choices}

    def _sample(self, prompt: list[int], body: dict[str, Any], generator: Any, index: int) -> dict[str, Any]:
        temperature = float(body.get("temperature", 1.0))
        top_k = int(body.get("top_k", 0) or 0)
        stops = {self.eos_token_id, *map(int, body.get("stop_token_ids") or [])}
        ids, tokens, logps, tops = list(prompt), [], [], []
        finish = "length"
        with self._lock, torch.no_grad():
            for _ in range(int(body.get("max_tokens", 16))):
                logits = self.model(torch.tensor([ids])).logits[0, -1].float()
                if temperature == 0:
                    token = int(logits.argmax())
                    logprobs = torch.log_softmax(logits, dim=-1)
                else:
                    logprobs = torch.log_softmax(logits / temperature, dim=-1)
                    weights = logprobs.exp()
                    if 0 < top_k < len(weights):
                        weights[weights < torch.topk(weights, top_k).values[-1]] = 0
                    token = int(torch.multinomial(weights, 1, generator=generator))
                ids.append(token)
                tokens.append(token)
                logps.append(float(logprobs[token]))
                tops.append({f"token_id:{token}": float(logprobs[token])})
                if token in stops:
                    finish = "stop"
                    break
        logprobs_field = None
        if body.get("logprobs") is not None:
            logprobs_field = {
                "tokens": [f"token_id:{t}" for t in tokens],
                "token_logprobs": logps,
                "top_logprobs": tops,
                "text_offset": list(range(len(tokens))),
            }
        return {
            "index": index,
            "text": "",
            "token_ids": tokens,
            "prompt_token_ids": prompt[1:] if self.mangle_prompts else prompt,
            "logprobs": logprobs_field,
            "finish_reason": finish,
        }


def client_for(url: str) -> Any:
    """TRL's real ``VLLMClient`` connected to ``url``.

    Its constructor refuses to run without vllm installed (an import guard: the HTTP methods use only
    ``requests``), so the guard is lifted for the construction.
    """
    from trl.generation import vllm_client

    with mock.patch.object(vllm_client, "is_vllm_available", lambda *a, **k: True):
        return vllm_client.VLLMClient(base_url=url, connection_timeout=10.0)


@contextmanager
def trl_server_mode(server: LoopbackVLLM | None) -> Iterator[None]:
    """Let ``GRPOTrainer(use_vllm=True, vllm_mode="server")`` run on CPU against ``server``.

    Exactly what needs a GPU build of vllm is replaced: the import guards of TRL's vLLM modules, and
    the NCCL weight transfer (``init_communicator``, ``update_named_params``), which here copies the
    trainer's parameters into the loopback server's model (``server=None``: a process without a
    server, whose client is never built). Everything else is TRL's own code: ``VLLMGeneration``'s
    gather/broadcast generation, ``VLLMClient``'s HTTP calls, weight iteration, prefix-cache reset.
    """
    from trl.generation import vllm_client, vllm_generation

    def push(client: Any, metadata: Any, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        assert server is not None
        server.load(named)

    with (
        mock.patch.object(vllm_generation, "is_vllm_available", lambda *a, **k: True),
        mock.patch.object(vllm_client, "is_vllm_available", lambda *a, **k: True),
        mock.patch.object(vllm_client.VLLMClient, "init_communicator", lambda self, device=0: None),
        mock.patch.object(vllm_client.VLLMClient, "update_named_params", push),
    ):
        yield
