"""A vLLM-shaped ``/v1/completions`` server on 127.0.0.1 with a deterministic "model" (in-process thread).

The model is a function ``(prompt_ids, request) -> ids``, so a test can work out every context by
hand; ``request`` is the body as vLLM would sample it (below). The default, :func:`shift_model`,
answers ``[last + 1, last + 2]``. What it does as vLLM 0.29 does (``vllm/entrypoints/openai/completion/
protocol.py``, ``vllm/v1/core/sched/utils.py: check_stop``, ``vllm/renderers/params.py``,
``vllm/v1/engine/core.py: sleep``), so that a client that gets these wrong fails a test:

* takes token ids as ``prompt``; returns ``choices[0].token_ids`` when asked with ``return_token_ids``,
  and logprob tokens as ``"token_id:N"`` when asked with ``logprobs`` and ``return_tokens_as_token_ids``;
* stops on the model's ``eos_token_id`` (unless ``ignore_eos``) and on ``stop_token_ids``: the stop id
  is kept in ``token_ids`` but not in ``text``; ``finish_reason`` ``"stop"``, ``stop_reason`` the stop
  id (``None`` for EOS); otherwise the output is cut at ``max_tokens`` (default 16, as vLLM's
  ``CompletionRequest``) with ``finish_reason`` ``"length"``: an end-of-turn id appears only when the
  model stopped on it;
* ``max_model_len``: a prompt with ``len(prompt) + max_tokens > max_model_len`` gets vLLM's 400
  (``{"error": {"message": "This model's maximum context length is ...", "type": "BadRequestError",
  "param": "input_tokens", "code": 400}}``); ``max_tokens: null`` means the room left;
* sampling defaults: a field among ``temperature, top_p, top_k, min_p, repetition_penalty`` that the
  request does not send (or sends as ``null``) is taken from ``generation_config`` (the model's
  ``generation_config.json``, as ``--generation-config auto``), else vLLM's neutral default; the
  request as sampled is recorded in ``sampled``;
* ``sleep()`` / ``wake_up()`` (also ``POST /sleep``, ``POST /wake_up``, ``GET /is_sleeping``): while
  asleep, requests are accepted and wait (vLLM's paused scheduler queues them) until woken; they do
  not fail.

What it leaves out: real sampling (the model is a function; seeds, temperature and top-k reach it only
as fields), stop strings and ``include_stop_str_in_output``, ``min_tokens``, detokenisation (``text``
is ``"<id>"`` per id), prompt logprobs, ``n > 1``, streaming, batching effects on logits, the prefix
cache, the API key check, the multi-EOS list of a ``generation_config``, and sleep levels (a sleeping
server here keeps its "weights").

Every request is recorded (body and headers); ``max_in_flight`` is the most requests it ever served at
once (also at ``GET /stats``, for a server in another process). Each request sleeps ``latency_s`` in its
own thread, as a batching engine serves requests concurrently. ``faults`` replaces chosen answers with
a scripted :class:`~tests.loopback.Reply` (any status, headers, body, delay, truncation or a
dropped connection).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tests.loopback import LoopbackServer, Reply, Request

Model = Callable[[list[int], dict[str, Any]], list[int]]
Faults = Sequence[Reply | None] | Callable[[dict[str, Any], int], Reply | None]


VLLM_DEFAULTS: dict[str, float | int] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
}
"""``CompletionRequest._DEFAULT_SAMPLING_PARAMS``: what vLLM samples with when neither the request nor the
model's ``generation_config`` sets a field (``top_k`` 0: off)."""


def shift_model(prompt: list[int], body: dict[str, Any]) -> list[int]:
    """``[last + 1, last + 2]`` after the prompt's last id (the server cuts it to ``max_tokens``)."""
    return [prompt[-1] + 1, prompt[-1] + 2]


def stop_cut(
    ids: list[int], body: dict[str, Any], eos_token_id: int | None = None
) -> tuple[list[int], str, int | None]:
    """``(ids, finish_reason, stop_reason)`` as vLLM's ``check_stop``: EOS (unless ``ignore_eos``), then
    ``stop_token_ids``, then the token limit, checked after every generated id."""
    stop = set(body.get("stop_token_ids") or ())
    eos = None if body.get("ignore_eos") else eos_token_id
    limit = body.get("max_tokens", 16)
    for n, t in enumerate(ids, start=1):
        if t == eos:
            return ids[:n], "stop", None
        if t in stop:
            return ids[:n], "stop", t
        if limit is not None and n >= int(limit):
            return ids[:n], "length", None
    return ids, "length", None


def completion_body(
    ids: list[int], body: dict[str, Any], token_ids: bool = True, eos_token_id: int | None = None
) -> dict[str, Any]:
    """A vLLM completion answering ``body`` with ``ids`` (``token_ids`` off: an engine that ignores the flag)."""
    ids, finish, stop_reason = stop_cut(list(ids), body, eos_token_id)
    shown = ids[:-1] if finish == "stop" else ids  # the stop id's text is not in ``text``
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
        "text": "".join(f"<{t}>" for t in shown),
        "logprobs": logprobs,
        "finish_reason": finish,
        "stop_reason": stop_reason,
        "token_ids": ids if token_ids and body.get("return_token_ids") else None,
        "prompt_token_ids": None,
    }
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}
    return {"id": "cmpl-test", "object": "text_completion", "model": body["model"], "choices": [choice], "usage": usage}


class CompletionsServer(LoopbackServer):
    """``with CompletionsServer() as server: server.url`` is ``http://127.0.0.1:<port>/v1``."""

    def __init__(
        self,
        model: Model = shift_model,
        *,
        latency_s: float = 0.0,
        faults: Faults = (),
        token_ids: bool = True,
        eos_token_id: int | None = None,
        max_model_len: int | None = None,
        generation_config: dict[str, float | int] | None = None,
    ) -> None:
        self.model = model
        self.latency_s = latency_s
        self.faults = faults
        self.token_ids = token_ids
        self.eos_token_id = eos_token_id
        self.max_model_len = max_model_len
        self.generation_config = dict(generation_config or {})
        unknown = set(self.generation_config) - set(VLLM_DEFAULTS)
        if unknown:
            raise ValueError(f"generation_config fields vLLM does not read as sampling defaults: {sorted(unknown)}")
        self.requests: list[dict[str, Any]] = []
        self.sampled: list[dict[str, Any]] = []
        """Each served request as vLLM samples it: unsent sampling fields filled from the defaults."""
        self.waiting = 0
        self._awake = threading.Event()
        self._awake.set()
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        super().__init__()

    @property
    def url(self) -> str:
        return f"{self.root}/v1"

    def _fault(self, body: dict[str, Any], index: int) -> Reply | None:
        if callable(self.faults):
            return self.faults(body, index)
        return self.faults[index] if index < len(self.faults) else None

    def sleep(self) -> None:
        """Pause serving: requests are accepted and wait until :meth:`wake_up` (vLLM's paused scheduler)."""
        self._awake.clear()

    def wake_up(self) -> None:
        self._awake.set()

    @property
    def is_sleeping(self) -> bool:
        return not self._awake.is_set()

    def sampling(self, body: dict[str, Any], prompt_len: int) -> dict[str, Any]:
        """``body`` as vLLM samples it: unsent fields from ``generation_config``, then vLLM's defaults."""
        sampled = dict(body)
        for name, default in VLLM_DEFAULTS.items():
            if sampled.get(name) is None:
                sampled[name] = self.generation_config.get(name, default)
        sampled.setdefault("max_tokens", 16)
        if sampled["max_tokens"] is None and self.max_model_len is not None:
            sampled["max_tokens"] = self.max_model_len - prompt_len
        return sampled

    def too_long(self, prompt_len: int, max_tokens: int | None) -> Reply | None:
        """vLLM's 400 for ``len(prompt) + max_tokens > max_model_len`` (``renderers/params.py``)."""
        if self.max_model_len is None or max_tokens is None or prompt_len + max_tokens <= self.max_model_len:
            return None
        message = (
            f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
            f"{max_tokens} output tokens and your prompt contains {prompt_len} input tokens, for a total of "
            f"{prompt_len + max_tokens} tokens. Please reduce the length of the input prompt or the number "
            "of requested output tokens."
        )
        error = {"message": message, "type": "BadRequestError", "param": "input_tokens", "code": 400}
        return Reply(status=400, body={"error": error})

    def route(self, path: str) -> Callable[[dict[str, Any], dict[str, str]], Reply] | None:
        """The handler of a POST to ``path`` (``None``: 404)."""
        return self.answer if path == "/v1/completions" else None

    def record(self, body: dict[str, Any], headers: dict[str, str]) -> Reply | None:
        """Record a request; the scripted fault for it, if any."""
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.headers.append(headers)
        return self._fault(body, index)

    def queue(self) -> None:
        """Wait while asleep (requests are accepted and queued, as vLLM's paused scheduler does)."""
        with self._lock:
            self.waiting += 1
        self._awake.wait()
        with self._lock:
            self.waiting -= 1

    def answer(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        fault = self.record(body, headers)
        if fault is not None:
            return fault
        prompt = body.get("prompt")
        if not isinstance(prompt, list) or not prompt or not all(isinstance(i, int) and i >= 0 for i in prompt):
            return Reply(status=400, body={"error": {"message": "prompt must be a non-empty list of token ids"}})
        sampled = self.sampling(body, len(prompt))
        refusal = self.too_long(len(prompt), sampled["max_tokens"])
        if refusal is not None:
            return refusal
        self.queue()
        with self._lock:
            self.sampled.append(sampled)
        time.sleep(self.latency_s)
        return Reply(body=completion_body(self.model(prompt, sampled), sampled, self.token_ids, self.eos_token_id))

    def serve(self, request: Request) -> Reply:
        if request.method == "GET":
            return self._get(request.target)
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return self._post(request)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _get(self, path: str) -> Reply:
        if path == "/is_sleeping":
            return Reply(body={"is_sleeping": self.is_sleeping})
        if path != "/stats":
            return Reply(status=404, body={"error": f"no route {path}"})
        with self._lock:
            stats = {
                "requests": len(self.requests),
                "max_in_flight": self.max_in_flight,
                "cpu_s": time.process_time(),  # the server process's CPU time so far
            }
        return Reply(body=stats)

    def _post(self, request: Request) -> Reply:
        if request.path == "/sleep":
            self.sleep()
            return Reply(body="")
        if request.target == "/wake_up":
            self.wake_up()
            return Reply(body="")
        route = self.route(request.target)
        if route is None:
            return Reply(status=404, body={"error": f"no route {request.target}"})
        try:
            body = request.json()
        except ValueError:
            return Reply(status=400, body={"error": "body is not JSON"})
        return route(body, request.headers)

    def stop(self) -> None:
        self.wake_up()  # let queued requests finish
        super().stop()
