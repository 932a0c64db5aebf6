"""Accounting of the LLM judge, per step and in total, with the step's budget and circuit breaker.

Counters (all per step, since the last ``new_step()``):

* ``calls``: chat-completion requests sent (every retry attempt is one); ``retries``: attempts after the
  first that were sent (a retry refused by the budget or the open circuit is not counted);
  ``failed_requests``: attempts that ended in an error status, a timeout or a connection error.
* ``prompt_tokens``: prompt tokens the server did *not* serve from its prefix cache (``usage.prompt_tokens``
  minus ``usage.prompt_tokens_details.cached_tokens``); ``cached_prompt_tokens``: those it did;
  ``completion_tokens``. ``usage_missing`` counts responses without ``usage``. ``cache_hits``: responses
  served from the on-disk cache (no call); ``cache_write_errors``: answers that could not be written to it (each
  still used).
* ``latency_s``: seconds spent waiting for responses (sum); ``latency_max_s``; ``retry_wait_s``:
  seconds slept between attempts (backoff or ``Retry-After``).
* ``repairs``: answers sent back with the reason they were invalid; ``tool_calls``, ``tool_rounds``.
* ``proposals``, ``declines``, ``errors``: how each ``propose`` ended. ``circuit_open``: 1 once the
  circuit has opened in this step.

Circuit breaker: it counts consecutive failed *requests*, each after all its retries (an answered
request resets the count), not failed attempts. So one outage shorter than the retry schedule opens
nothing however many requests were in flight, and their retries reach the recovered server; a server
that stays down opens the circuit after ``circuit_failures`` requests have used up their retries.
The budget (``max_tokens_per_step``) counts uncached prompt tokens plus completion tokens.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from prover_core.errors import JudgeRefusedError

__all__ = ["JudgeStats"]

_COUNTERS = (
    "calls",
    "retries",
    "failed_requests",
    "cache_hits",
    "cache_write_errors",
    "prompt_tokens",
    "cached_prompt_tokens",
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
        self._step = dict.fromkeys(_COUNTERS, 0.0)
        self._total = dict.fromkeys(_COUNTERS, 0.0)
        self._latency_max = 0.0
        self._consecutive_failures = 0
        self._circuit_open = False

    def add(self, **amounts: float) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self._step[name] += amount
                self._total[name] += amount

    def response(
        self, latency: float, prompt_tokens: int | None, completion_tokens: int | None, cached_tokens: int = 0
    ) -> None:
        """Record one answered request (``prompt_tokens`` as the server reports it, cached ones included)."""
        cached = min(max(cached_tokens, 0), prompt_tokens or 0)
        with self._lock:
            for target in (self._step, self._total):
                target["latency_s"] += latency
                target["prompt_tokens"] += (prompt_tokens or 0) - cached
                target["cached_prompt_tokens"] += cached
                target["completion_tokens"] += completion_tokens or 0
                target["usage_missing"] += prompt_tokens is None
            self._latency_max = max(self._latency_max, latency)
            self._consecutive_failures = 0

    def failure(self) -> None:
        """Record one failed attempt (``failed_requests``); the circuit counts requests, see :meth:`request_failed`."""
        with self._lock:
            self._step["failed_requests"] += 1
            self._total["failed_requests"] += 1

    def request_failed(self) -> None:
        """Record a request that failed after all its retries; opens the circuit after ``circuit_failures`` in a row."""
        with self._lock:
            self._consecutive_failures += 1
            if self._consecutive_failures >= self.circuit_failures:
                self._circuit_open = True

    @property
    def circuit_open(self) -> bool:
        return self._circuit_open

    def admit(self, retry: bool = False) -> None:
        """Count one request about to be sent (``retry``: not its first attempt); raise
        :class:`~prover_core.errors.JudgeRefusedError` if the circuit or the budget says no."""
        with self._lock:
            if self._circuit_open:
                raise JudgeRefusedError(
                    f"circuit open: {self.circuit_failures} requests in a row failed (after their retries) in this "
                    "step; no more judge calls until new_step()"
                )
            if self.max_calls is not None and self._step["calls"] >= self.max_calls:
                raise JudgeRefusedError(f"judge budget exhausted: {self.max_calls} calls per step")
            tokens = self._step["prompt_tokens"] + self._step["completion_tokens"]
            if self.max_tokens is not None and tokens >= self.max_tokens:
                raise JudgeRefusedError(
                    f"judge budget exhausted: {int(tokens)} of {self.max_tokens} tokens per step used"
                )
            for target in (self._step, self._total):
                target["calls"] += 1
                target["retries"] += retry

    def new_step(self) -> None:
        """Reset the per-step counters, budget and circuit (totals are kept)."""
        with self._lock:
            self._step = dict.fromkeys(_COUNTERS, 0.0)
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
