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
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tests.loopback import LoopbackServer, Reply, Request

__all__ = ["ChatServer", "Reply", "Script", "answer", "completion", "serving"]


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


Script = Sequence[Reply] | Callable[[dict[str, Any], int], Reply]


class ChatServer(LoopbackServer):
    """``with ChatServer(script) as server: server.url`` is ``http://127.0.0.1:<port>/v1``."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        super().__init__()

    @property
    def url(self) -> str:
        return f"{self.root}/v1"

    def serve(self, request: Request) -> Reply:
        try:
            body = request.json()
        except ValueError:
            body = {"_raw": request.raw.decode(errors="replace")}
        if request.method != "POST" or request.target != "/v1/chat/completions":
            return Reply(status=404, body={"error": f"no route {request.target}"})
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.headers.append(request.headers)
        if callable(self.script):
            return self.script(body, index)
        return self.script[min(index, len(self.script) - 1)]

    def outage(self, down_s: float) -> threading.Thread:
        """Go down now (connection refused) and come back on the same port after ``down_s`` seconds.

        Returns the thread that restarts the server; join it before leaving the ``with`` block.
        """
        self.stop()

        def restart() -> None:
            time.sleep(down_s)
            self.restart()

        thread = threading.Thread(target=restart, daemon=True)
        thread.start()
        return thread


@contextmanager
def serving(script: Script) -> Iterator[ChatServer]:
    with ChatServer(script) as server:
        yield server
