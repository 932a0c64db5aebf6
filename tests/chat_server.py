"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (in-process thread, free port).

Each test gives a script: a list of :class:`Reply` served in order (the last one repeats), or a
function ``(request_body, index) -> Reply``. The server records every request (body and headers).
Replies can be delayed, carry any status, headers and body, send a truncated body, or drop the
connection, so tests exercise 429/``Retry-After``, 5xx, timeouts, HTML, malformed JSON, prose and
tool calls against the real httpx stack. :meth:`ChatServer.outage` takes the server down (listening
socket and open connections closed: connection refused) and brings it back on the same port.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted HTTP reply."""

    status: int = 200
    body: Any = None
    """A dict/list (sent as JSON) or a str/bytes body sent as is."""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    content_type: str = "application/json"
    truncate: bool = False
    """Announce the full Content-Length but send only half the body, then close."""
    drop: bool = False
    """Close the connection without answering."""
    trickle_s: float = 0.0
    """Send the body one byte at a time, this many seconds apart (a server that never stalls a read)."""


def completion(
    content: str | None = None,
    tool_calls: Sequence[tuple[str, dict[str, Any] | str]] = (),
    usage: tuple[int, int] | None = (100, 20),
    finish_reason: str | None = None,
    delay_s: float = 0.0,
    cached_tokens: int | None = None,
) -> Reply:
    """A 200 chat completion with ``content`` and/or ``tool_calls`` given as ``(name, arguments)``;
    ``cached_tokens`` goes to ``usage.prompt_tokens_details`` (vLLM, OpenAI)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
            }
            for i, (name, args) in enumerate(tool_calls)
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}
        ],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
        if cached_tokens is not None:
            body["usage"]["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return Reply(body=body, delay_s=delay_s)


def answer(
    start: int | None, end: int | None, failure_mode: str = "the failed runs never open the door", **kw: Any
) -> Reply:
    """A completion whose content is the judge's JSON answer."""
    text = json.dumps({"failure_mode": failure_mode, "start_turn": start, "end_turn": end, "rationale": "because"})
    return completion(text, **kw)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default backlog of 5 drops concurrent connects (1 s SYN retry)


Script = Sequence[Reply] | Callable[[dict[str, Any], int], Reply]


class ChatServer:
    """``with ChatServer(script) as server: server.url`` is ``http://127.0.0.1:<port>/v1``."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.headers.append(headers)
        if callable(self.script):
            return self.script(body, index)
        return self.script[min(index, len(self.script) - 1)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()  # no Nagle: headers and body are separate writes (else ~40 ms delayed-ACK stalls)
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with server._lock:
                    server._connections.add(self.connection)

            def finish(self) -> None:
                with server._lock:
                    server._connections.discard(self.connection)
                with suppress(OSError):  # closed by an outage
                    super().finish()

            def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr log
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_raw": raw.decode(errors="replace")}
                if self.path != "/v1/chat/completions":
                    self._send(Reply(status=404, body={"error": f"no route {self.path}"}))
                    return
                self._send(server._next(body, dict(self.headers.items())))

            def _send(self, reply: Reply) -> None:
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.drop:
                    self.close_connection = True
                    return
                data = reply.body
                if isinstance(data, str):
                    payload = data.encode()
                elif isinstance(data, bytes):
                    payload = data
                else:
                    payload = json.dumps(data).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    if reply.truncate:
                        self.wfile.write(payload[: len(payload) // 2])
                        self.close_connection = True
                    elif reply.trickle_s:
                        for byte in payload:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                            time.sleep(reply.trickle_s)
                    else:
                        self.wfile.write(payload)
                except OSError:  # the client gave up (timeout tests)
                    self.close_connection = True

        return Handler

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and close every open connection (kept-alive ones included)."""
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            live = list(self._connections)
        for conn in live:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def outage(self, down_s: float) -> threading.Thread:
        """Go down now (connection refused) and come back on the same port after ``down_s`` seconds.

        Returns the thread that restarts the server; join it before leaving the ``with`` block.
        """
        self.stop()

        def restart() -> None:
            time.sleep(down_s)
            self._server = _Server(("127.0.0.1", self._port), self._handler())
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
            self._thread.start()

        thread = threading.Thread(target=restart, daemon=True)
        thread.start()
        return thread

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def serving(script: Script) -> Iterator[ChatServer]:
    with ChatServer(script) as server:
        yield server
