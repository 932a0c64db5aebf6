"""The HTTP plumbing every loopback test server shares: a threaded server on 127.0.0.1 (free port) that
turns each request into a :class:`Request`, asks the double for a :class:`Reply` and sends it.

One job: moving requests and replies. What a request means (routes, schema, validation, sampling) lives
in each double's own module, with what it leaves out of the real server: :mod:`tests.chat_server`
(OpenAI chat), :mod:`tests.completions_server` (vLLM), :mod:`tests.sglang_server`, :mod:`tests.llama_server`
(llama.cpp), :mod:`tests.adapters.vllm_loopback` (the vLLM server TRL's client calls).

What every double gets from here: HTTP/1.1 keep-alive without Nagle (headers and body are separate writes:
without ``TCP_NODELAY`` a 40 ms delayed-ACK stall), a listen backlog for hundreds of concurrent connects
(the default of 5 drops them: 1 s SYN retries), daemon handler threads, a quiet log, a stop that closes the
kept-alive connections too (a stopped server refuses, as a real one that went down), and replies that can be
delayed, truncated, trickled or dropped (:class:`Reply`).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import urlsplit


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


@dataclass(frozen=True)
class Request:
    """One request as the double sees it (the body read whole)."""

    method: str
    target: str
    """The request target as sent (path and query)."""
    headers: dict[str, str]
    raw: bytes

    @property
    def path(self) -> str:
        """The target without its query string."""
        return urlsplit(self.target).path

    def json(self) -> Any:
        """The body as JSON (``ValueError`` if it is not)."""
        return json.loads(self.raw)


_S = TypeVar("_S", bound="LoopbackServer")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # hundreds of concurrent connects (the default backlog of 5 drops them)


class LoopbackServer:
    """A double's HTTP side: subclasses answer :meth:`serve`; ``with Double() as d: d.root`` is
    ``http://127.0.0.1:<port>``. The port is taken at construction, so the URL is known before start."""

    def __init__(self, port: int = 0) -> None:
        self._conn_lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._listen(port)

    def serve(self, request: Request) -> Reply:
        """The double's answer to ``request`` (runs on the connection's own thread)."""
        raise NotImplementedError

    @property
    def root(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def _listen(self, port: int) -> None:
        self._server = _Server(("127.0.0.1", port), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    def start(self: _S) -> _S:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and close every open connection (kept-alive ones included)."""
        if self._thread.is_alive():  # shutdown() waits for serve_forever, forever if it never ran
            self._server.shutdown()
        self._server.server_close()
        with self._conn_lock:
            live = list(self._connections)
        for conn in live:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def restart(self) -> None:
        """Listen again on the same port after :meth:`stop`."""
        self._listen(self.port)
        self._thread.start()

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler(double: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()  # no Nagle: headers and body are separate writes (else ~40 ms delayed-ACK stalls)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with double._conn_lock:
                double._connections.add(self.connection)

        def finish(self) -> None:
            with double._conn_lock:
                double._connections.discard(self.connection)
            with suppress(OSError):  # closed by stop()
                super().finish()

        def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr log
            pass

        def do_GET(self) -> None:
            self._serve(b"")

        def do_POST(self) -> None:
            self._serve(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

        def _serve(self, raw: bytes) -> None:
            self._send(double.serve(Request(self.command, self.path, dict(self.headers.items()), raw)))

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
            except OSError:  # the client gave up (timeout tests) or stop() closed the connection
                self.close_connection = True

    return Handler
