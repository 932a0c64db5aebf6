"""An SGLang-0.5.12-shaped server on 127.0.0.1: the native ``/generate`` and the OpenAI ``/v1/completions``.

Same deterministic "model" as :mod:`tests.completions_server` (``(input_ids, sampling_params) -> ids``),
answering in SGLang 0.5.12's schema (read from the 0.5.12 wheel: ``sglang/srt/managers/io_struct.py``
``GenerateReqInput``, ``tokenizer_manager.py``, ``entrypoints/http_server.py``,
``entrypoints/openai/serving_completions.py`` and ``protocol.py``, ``sampling/sampling_params.py``,
``sampling/sampling_batch_info.py``):

* ``POST /generate`` takes ``input_ids`` and ``sampling_params`` (SGLang's defaults for unsent fields:
  ``max_new_tokens`` 128, ``temperature`` 1, ``top_p`` 1, ``top_k`` -1, ``min_p`` 0, penalties neutral) and
  answers ``{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
  "completion_tokens", "cached_tokens", "weight_version", ...}}``; ``finish_reason`` is ``{"type": "stop",
  "matched": id}`` or ``{"type": "length", "length": n}``; ``output_ids`` run through the stop id (EOS
  unless ``ignore_eos``, or one of ``stop_token_ids``), whose text is trimmed from ``text``; with
  ``return_logprob``, ``meta_info.output_token_logprobs`` is ``[[logprob, id, null], ...]``;
* validation as ``SamplingParams.verify`` and ``TokenizerManager._validate_one_request``, answered 400
  ``{"error": {"message": ...}}``: ``top_k`` 0 ("top_k must be -1 (disable) or at least 1"), an input of
  ``context_len`` tokens or more, ``len(input_ids) + max_new_tokens > context_len``;
* seeds: the model sees ``sampling_seed`` only when the server runs with ``deterministic=True``
  (``--enable-deterministic-inference``); otherwise it sees ``None``, as SGLang then ignores the seed;
* ``POST /v1/completions`` answers as 0.5.12 does: choices with ``text``, ``finish_reason``,
  ``matched_stop`` and text logprob tokens, no ``token_ids`` (``return_token_ids`` is ignored: an unknown
  field), ``metadata.weight_version``.

What it leaves out: real sampling, batching, the radix cache, ``release_memory_occupation`` (sleep),
streaming, ``n > 1``, stop strings and ``no_stop_trim``, the chat endpoint and its ``generation_config``
defaults (0.5.12 applies those to chat only), the API key, aborts (``finish_reason`` ``abort``) except
through ``faults``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.completions_server import CompletionsServer, Faults, Model
from tests.loopback import Reply

SGLANG_DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 128,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "stop_token_ids": None,
    "sampling_seed": None,
    "ignore_eos": False,
}


def error(message: str) -> Reply:
    """SGLang's ``_create_error_response``: status 400, ``{"error": {"message": ...}}``."""
    return Reply(status=400, body={"error": {"message": message}})


class SGLangServer(CompletionsServer):
    """``with SGLangServer() as server: server.root`` is ``http://127.0.0.1:<port>`` (``server.url`` adds /v1)."""

    def __init__(
        self,
        model: Model | None = None,
        *,
        context_len: int = 4096,
        eos_token_id: int | None = None,
        deterministic: bool = False,
        latency_s: float = 0.0,
        faults: Faults = (),
    ) -> None:
        kw: dict[str, Any] = {} if model is None else {"model": model}
        super().__init__(latency_s=latency_s, faults=faults, eos_token_id=eos_token_id, **kw)
        self.context_len = context_len
        self.deterministic = deterministic

    def route(self, path: str) -> Callable[[dict[str, Any], dict[str, str]], Reply] | None:
        return {"/generate": self.generate, "/v1/completions": self.completions}.get(path)

    def run(self, ids: list[int], params: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
        """The output ids through the stop id, and SGLang's ``finish_reason``."""
        stop = set(params.get("stop_token_ids") or ())
        eos = None if params.get("ignore_eos") else self.eos_token_id
        seen = {**params, "sampling_seed": params["sampling_seed"] if self.deterministic else None}
        generated = self.model(ids, seen)
        limit = int(params["max_new_tokens"])
        out: list[int] = []
        for t in generated:
            out.append(t)
            if t == eos or t in stop:
                return out, {"type": "stop", "matched": t}
            if len(out) >= limit:
                break
        return out, {"type": "length", "length": len(out)}

    def check(self, ids: Any, params: dict[str, Any]) -> Reply | None:
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
            return error("input_ids must be a non-empty list of token ids")
        top_k = params["top_k"]
        if top_k != -1 and top_k < 1:
            return error(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
        if len(ids) >= self.context_len:
            return error(
                f"The input ({len(ids)} tokens) is longer than the model's context length ({self.context_len} tokens)."
            )
        new = params["max_new_tokens"]
        if new is not None and len(ids) + new > self.context_len:
            return error(
                "Requested token count exceeds the model's maximum context length of "
                f"{self.context_len} tokens. You requested a total of {len(ids) + new} tokens: {len(ids)} tokens "
                f"from the input messages and {new} tokens for the completion. Please reduce the number of "
                "tokens in the input messages or the completion to fit within the limit."
            )
        return None

    def generate(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        fault = self.record(body, headers)
        if fault is not None:
            return fault
        given = body.get("sampling_params") or {}
        params = {**SGLANG_DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
        ids = body.get("input_ids")
        refusal = self.check(ids, params)
        if refusal is not None:
            return refusal
        with self._lock:
            self.sampled.append(params)
        out, finish = self.run(list(ids), params)
        shown = out[:-1] if finish["type"] == "stop" else out
        meta: dict[str, Any] = {
            "id": f"req-{len(self.requests)}",
            "finish_reason": finish,
            "prompt_tokens": len(ids),
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": len(out),
            "cached_tokens": 0,
        }
        if body.get("return_logprob"):
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [[-0.25 * (k + 1), t, None] for k, t in enumerate(out)]
            meta["output_token_logprobs_length"] = len(out)
        return Reply(body={"text": "".join(f"<{t}>" for t in shown), "output_ids": out, "meta_info": meta})

    def completions(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        """0.5.12's ``/v1/completions``: ``serving_completions.py`` maps the request onto ``/generate``."""
        fault = self.record(body, headers)
        if fault is not None:
            return fault
        mapped = {
            "max_new_tokens": body.get("max_tokens", 16),
            "sampling_seed": body.get("seed"),
            **{k: body[k] for k in SGLANG_DEFAULTS if k in body and k not in ("max_new_tokens", "sampling_seed")},
        }
        params = {**SGLANG_DEFAULTS, **{k: v for k, v in mapped.items() if v is not None}}
        ids = body.get("prompt")
        refusal = self.check(ids, params)
        if refusal is not None:
            return refusal
        out, finish = self.run(list(ids), params)
        shown = out[:-1] if finish["type"] == "stop" else out
        logprobs = None
        if body.get("logprobs") is not None:
            logprobs = {
                "text_offset": [-1] * len(out),
                "token_logprobs": [-0.25 * (k + 1) for k in range(len(out))],
                "tokens": [f"<{t}>" for t in out],  # return_text_in_logprobs=True: token text, never ids
                "top_logprobs": [],
            }
        choice = {
            "index": 0,
            "text": "".join(f"<{t}>" for t in shown),
            "logprobs": logprobs,
            "finish_reason": finish["type"],
            "matched_stop": finish.get("matched"),
        }
        usage = {"prompt_tokens": len(ids), "total_tokens": len(ids) + len(out), "completion_tokens": len(out)}
        return Reply(
            body={
                "id": "req-1",
                "object": "text_completion",
                "created": 0,
                "model": body.get("model", "default"),
                "choices": [choice],
                "usage": usage,
                "metadata": {"weight_version": "default"},
                "sglext": None,
            }
        )
