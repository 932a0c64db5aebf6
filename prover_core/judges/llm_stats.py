"""Accounting of the LLM judge, per step and in total, with the step's budget and circuit breaker.

Counters (all per step, since the last ``new_step()``):

* ``calls``: chat-completion requests sent (every retry attempt is one); ``retries``: attempts after the
  first; ``failed_requests``: attempts that ended in an error status, a timeout or a connection error.
* ``prompt_tokens``, ``completion_tokens``: summed from each response's ``usage``; ``usage_missing``
  counts responses without it. ``cache_hits``: responses served from the on-disk cache (no call).
* ``latency_s``: seconds spent waiting for responses (sum); ``latency_max_s``; ``retry_wait_s``:
  seconds slept between attempts (backoff or ``Retry-After``).
* ``repairs``: answers sent back with the reason they were invalid; ``tool_calls``, ``tool_rounds``.
* ``proposals``, ``declines``, ``errors``: how each ``propose`` ended. ``circuit_open``: 1 once the
  circuit has opened in this step.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from prover_core.errors import JudgeError

COUNTERS = (
    "calls",
    "retries",
    "failed_requests",
    "cache_hits",
    "prompt_tokens",
    "completion_tokens",
    "usage_missing",
    "latency_s",
    "retry_wait_s",
    "repairs",
    "tool_calls",
    "tool_rounds",
    "proposals",
    "declines",
    "errors",
)


class JudgeStats:
    """Thread-safe counters, the per-step budget check and the circuit breaker."""

    def __init__(self, max_calls: int | None = None, max_tokens: int | None = None, circuit_failures: int = 8) -> None:
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.circuit_failures = circuit_failures
        self._lock = threading.Lock()
        self._step = dict.fromkeys(COUNTERS, 0.0)
        self._total = dict.fromkeys(COUNTERS, 0.0)
        self._latency_max = 0.0
        self._consecutive_failures = 0
        self._circuit_open = False

    def add(self, **amounts: float) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self._step[name] += amount
                self._total[name] += amount

    def response(self, latency: float, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """Record one answered request."""
        with self._lock:
            for target in (self._step, self._total):
                target["latency_s"] += latency
                target["prompt_tokens"] += prompt_tokens or 0
                target["completion_tokens"] += completion_tokens or 0
                target["usage_missing"] += prompt_tokens is None
            self._latency_max = max(self._latency_max, latency)
            self._consecutive_failures = 0

    def failure(self) -> None:
        """Record one failed attempt; opens the circuit after ``circuit_failures`` in a row."""
        with self._lock:
            self._step["failed_requests"] += 1
            self._total["failed_requests"] += 1
            self._consecutive_failures += 1
            if self._consecutive_failures >= self.circuit_failures:
                self._circuit_open = True

    @property
    def circuit_open(self) -> bool:
        return self._circuit_open

    def admit(self) -> None:
        """Count one request about to be sent; raise :class:`JudgeError` if the circuit or the budget says no."""
        with self._lock:
            if self._circuit_open:
                raise JudgeError(
                    f"circuit open: {self.circuit_failures} requests in a row failed in this step; "
                    "no more judge calls until new_step()"
                )
            if self.max_calls is not None and self._step["calls"] >= self.max_calls:
                raise JudgeError(f"judge budget exhausted: {self.max_calls} calls per step")
            tokens = self._step["prompt_tokens"] + self._step["completion_tokens"]
            if self.max_tokens is not None and tokens >= self.max_tokens:
                raise JudgeError(f"judge budget exhausted: {int(tokens)} of {self.max_tokens} tokens per step used")
            self._step["calls"] += 1
            self._total["calls"] += 1

    def new_step(self) -> None:
        """Reset the per-step counters, budget and circuit (totals are kept)."""
        with self._lock:
            self._step = dict.fromkeys(COUNTERS, 0.0)
            self._latency_max = 0.0
            self._consecutive_failures = 0
            self._circuit_open = False

    def step(self) -> Mapping[str, float]:
        """This step's counters, plus ``latency_max_s``, ``latency_mean_s`` and ``circuit_open``."""
        with self._lock:
            out = dict(self._step)
            answered = out["calls"] - out["failed_requests"]
            out["latency_max_s"] = self._latency_max
            out["latency_mean_s"] = out["latency_s"] / answered if answered > 0 else 0.0
            out["circuit_open"] = float(self._circuit_open)
            return out

    def total(self) -> Mapping[str, float]:
        """Counters summed over every step."""
        with self._lock:
            return dict(self._total)
