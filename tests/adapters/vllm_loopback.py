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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from unittest import mock
from urllib.parse import urlparse

import torch


class LoopbackVLLM:
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
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def __enter__(self) -> LoopbackVLLM:
        handler = type("Handler", (_Handler,), {"app": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        timer = threading.Timer(self.lifetime_s, self.close)
        timer.daemon = True
        timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.shutdown()
            server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def load(self, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The weight transfer: copy ``(name, tensor)`` pairs into the served model."""
        with self._lock, torch.no_grad():
            params = dict(self.model.named_parameters())
            for name, tensor in named:
                params[name].copy_(tensor.detach().to(params[name].dtype))

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


class _Handler(BaseHTTPRequestHandler):
    app: LoopbackVLLM

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = urlparse(self.path).path
        if path == "/health":
            self._send(200, {})
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.app.model_name, "object": "model"}]})
        elif path == "/server_info":
            config = {"model_config": {"logprobs_mode": "processed_logprobs"}, "weight_transfer_config": None}
            self._send(200, {"vllm_config": config})
        elif path == "/get_world_size":
            self._send(200, {"world_size": 1})
        else:
            self._send(404, {"error": f"no route {path}"})

    def do_POST(self) -> None:
        path = urlparse(self.path).path
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if path == "/reset_prefix_cache":
            self.app.prefix_cache_resets += 1
            self._send(200, {"success": True})
            return
        if path != "/v1/completions":
            self._send(404, {"error": f"no route {path}"})
            return
        self.app.requests.append(body)
        if self.app.fail_next:
            self.app.fail_next = False
            self._send(400, {"error": {"message": "scripted failure", "type": "BadRequestError"}})
            return
        with self.app._count:
            self.app.in_flight += 1
            self.app.max_in_flight = max(self.app.max_in_flight, self.app.in_flight)
            self.app._count.notify_all()
            self.app._count.wait_for(lambda: self.app.max_in_flight >= self.app.hold_until, self.app.hold_s)
        try:
            if self.app.delay_s:
                time.sleep(self.app.delay_s)
            self._send(200, self.app.complete(body))
        except (ValueError, KeyError, TypeError) as exc:
            self._send(400, {"error": {"message": str(exc), "type": "BadRequestError"}})
        finally:
            with self.app._count:
                self.app.in_flight -= 1


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
