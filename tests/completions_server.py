"""A vLLM-shaped ``/v1/completions`` server on 127.0.0.1 with a deterministic "model" (in-process thread).

The model is a function ``(prompt_ids, request_body) -> generated ids``, so a test can work out every
context by hand; the default, :func:`shift_model`, answers ``[last + 1, last + 2]`` (cut to
``max_tokens``). Like vLLM, the server takes token ids as ``prompt``, stops after a ``stop_token_ids``
id (kept in ``token_ids``), returns ``choices[0].token_ids`` when asked with ``return_token_ids``, and
logprob tokens as ``"token_id:N"`` when asked with ``logprobs`` and ``return_tokens_as_token_ids``.

Every request is recorded (body and headers); ``max_in_flight`` is the most requests it ever served at
once (also at ``GET /stats``, for a server in another process). Each request sleeps ``latency_s`` in its
own thread, as a batching engine serves requests concurrently. ``faults`` replaces chosen answers with
a scripted :class:`~tests.chat_server.Reply` (any status, headers, body, delay, truncation or a
dropped connection).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.chat_server import Reply

Model = Callable[[list[int], dict[str, Any]], list[int]]
Faults = Sequence[Reply | None] | Callable[[dict[str, Any], int], Reply | None]


def shift_model(prompt: list[int], body: dict[str, Any]) -> list[int]:
    """``[last + 1, last + 2]`` after the prompt's last id, at most ``max_tokens`` of them."""
    return [prompt[-1] + 1 + i for i in range(min(2, int(body["max_tokens"])))]


def completion_body(ids: list[int], body: dict[str, Any], token_ids: bool = True) -> dict[str, Any]:
    """A vLLM completion answering ``body`` with ``ids`` (``token_ids`` off: an engine that ignores the flag)."""
    stop = set(body.get("stop_token_ids") or ())
    cut = next((i + 1 for i, t in enumerate(ids) if t in stop), None)
    ids = ids if cut is None else ids[:cut]
    finish = "stop" if cut is not None else "length"
    logprobs = None
    if body.get("logprobs") is not None:
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        logprobs = {
            "tokens": [f"token_id:{t}" if as_ids else f"<{t}>" for t in ids],
            "token_logprobs": [-0.25 * (k + 1) for k in range(len(ids))],
            "text_offset": [],
            "top_logprobs": [],
        }
    choice = {
        "index": 0,
        "text": "".join(f"<{t}>" for t in ids),
        "logprobs": logprobs,
        "finish_reason": finish,
        "stop_reason": None,
        "token_ids": ids if token_ids and body.get("return_token_ids") else None,
        "prompt_token_ids": None,
    }
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}
    return {"id": "cmpl-test", "object": "text_completion", "model": body["model"], "choices": [choice], "usage": usage}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # hundreds of concurrent connects (the default backlog of 5 drops them)


class CompletionsServer:
    """``with CompletionsServer() as server: server.url`` is ``http://127.0.0.1:<port>/v1``."""

    def __init__(
        self,
        model: Model = shift_model,
        *,
        latency_s: float = 0.0,
        faults: Faults = (),
        token_ids: bool = True,
    ) -> None:
        self.model = model
        self.latency_s = latency_s
        self.faults = faults
        self.token_ids = token_ids
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def _fault(self, body: dict[str, Any], index: int) -> Reply | None:
        if callable(self.faults):
            return self.faults(body, index)
        return self.faults[index] if index < len(self.faults) else None

    def answer(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.headers.append(headers)
        fault = self._fault(body, index)
        if fault is not None:
            return fault
        prompt = body.get("prompt")
        if not isinstance(prompt, list) or not prompt or not all(isinstance(i, int) and i >= 0 for i in prompt):
            return Reply(status=400, body={"error": {"message": "prompt must be a non-empty list of token ids"}})
        time.sleep(self.latency_s)
        return Reply(body=completion_body(self.model(prompt, body), body, self.token_ids))

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != "/stats":
                    self._send(Reply(status=404, body={"error": f"no route {self.path}"}))
                    return
                with server._lock:
                    stats = {
                        "requests": len(server.requests),
                        "max_in_flight": server.max_in_flight,
                        "cpu_s": time.process_time(),  # the server process's CPU time so far
                    }
                self._send(Reply(body=stats))

            def do_POST(self) -> None:
                server._enter()
                try:
                    raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                    if self.path != "/v1/completions":
                        self._send(Reply(status=404, body={"error": f"no route {self.path}"}))
                        return
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        self._send(Reply(status=400, body={"error": "body is not JSON"}))
                        return
                    self._send(server.answer(body, dict(self.headers.items())))
                finally:
                    server._leave()

            def _send(self, reply: Reply) -> None:
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.drop:
                    self.close_connection = True
                    return
                data = reply.body
                payload = data.encode() if isinstance(data, str) else data if isinstance(data, bytes) else None
                if payload is None:
                    payload = json.dumps(data).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up (timeout tests)
                    self.wfile.write(payload[: len(payload) // 2] if reply.truncate else payload)
                if reply.truncate:
                    self.close_connection = True

        return Handler

    def start(self) -> CompletionsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> CompletionsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
