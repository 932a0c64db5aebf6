"""``LLMJudgeConfig``: where the judge's model is served, and how hard to try.

The API key is never a field of the config: the config names an environment variable
(``api_key_env``) and :meth:`LLMJudgeConfig.api_key` reads it into a :class:`pydantic.SecretStr`, so
it cannot appear in a repr, a log line or a serialised config. ``extra_headers`` and ``proxy`` are left out of the
repr too, and their values are scrubbed from messages like the key (:mod:`~prover_core.redaction`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from prover_core._finite import FINITE
from prover_core.connections import MAX_ANSWER_BYTES
from prover_core.redaction import read_key, refuse_url_credentials

__all__ = ["RESERVED_BODY_KEYS", "LLMJudgeConfig"]

Mode = Literal["structured", "agentic"]
ResponseFormat = Literal["json_schema", "json_object", "none"]

RESERVED_BODY_KEYS = frozenset(
    {
        "model",
        "messages",
        "temperature",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "tools",
        "tool_choice",
        "response_format",
        "stream",
    }
)
"""Request-body keys the judge writes itself; ``extra_body`` may not hold them (each has a config field)."""


class LLMJudgeConfig(BaseModel):
    """Configuration of :class:`~prover_core.judges.llm.LLMJudge` (an OpenAI-compatible chat server)."""

    model_config = ConfigDict(frozen=True, extra="forbid", **FINITE)

    # Where.
    base_url: str = Field(min_length=1)
    """Root of the OpenAI-compatible API, e.g. ``http://127.0.0.1:8000/v1``; ``/chat/completions`` is appended."""
    model: str = Field(min_length=1)
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (``None``: send no ``Authorization`` header)."""
    extra_headers: dict[str, str] = Field(default_factory=dict, repr=False)
    """Sent with every request; their values (of 8 characters or more) are treated as secrets: never in a repr or a
    message."""
    proxy: str | None = Field(default=None, repr=False)
    """The proxy to send requests through; ``None``: none (the environment's proxy variables are ignored)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Merged into every request body (e.g. ``{"chat_template_kwargs": {"enable_thinking": False}}`` for vLLM).
    A key the judge sets itself (:data:`RESERVED_BODY_KEYS`) is refused when the config is built."""

    # Sampling.
    temperature: float = Field(default=0.0, ge=0.0)
    max_tokens: int = Field(default=1024, ge=1)
    """Completion tokens per request."""
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The body key that carries ``max_tokens`` (OpenAI's newer models only accept ``max_completion_tokens``)."""
    seed: int | None = None
    """Sent as ``seed`` with every request when set. Repair requests always carry ``seed + repair number``."""
    repair_temperature: float = Field(default=0.7, ge=0.0)
    """Repair requests sample at ``max(temperature, repair_temperature)``, so a temperature-0 model does not
    repeat the answer that was just rejected."""

    # Protocol.
    mode: Mode = "structured"
    """``structured``: one JSON answer; ``agentic``: tool calls ``search_trajectory`` / ``get_segment`` first."""
    response_format: ResponseFormat = "json_schema"
    """What ``response_format`` to send in structured mode (``json_schema`` needs server support)."""
    max_tool_rounds: int = Field(default=4, ge=0)
    """Agentic mode: assistant turns that may call tools before a final answer is demanded."""
    response_format_with_tools: bool = False
    """Agentic mode: also send ``response_format`` with ``tools`` (OpenAI allows it; vLLM's and llama.cpp's
    constrained decoding would forbid the tool calls). Off: ``response_format`` is sent once the tools are
    withdrawn, i.e. after the tool rounds or after the model's first answer without a tool call."""
    max_history_chars: int = Field(default=16000, ge=1000)
    """Bound on the characters of the conversation after the prompt (tool calls, tool results, rejected
    answers and repair notes; see :mod:`~prover_core.judges.llm.conversation`)."""
    max_repairs: int = Field(default=3, ge=0)
    """Times an invalid answer is sent back with the reason before the group is skipped."""
    allow_decline: bool = True
    """Whether the judge may answer ``start_turn = end_turn = null`` (no segment; the group keeps GRPO credit)."""
    answer_form: Literal["segment", "span"] = "segment"
    """``segment``: the model answers ``start_turn`` and ``end_turn``; ``span``: ``start_turn`` and ``turns``
    (a length), each from an enum, and every pair the schema allows maps to an admissible segment (the
    longest admissible one from ``start_turn`` of at most ``turns`` turns; :mod:`~prover_core.judges.llm.span`).
    For small models under constrained decoding, which otherwise produce over-long segments."""
    evidence_summary: bool = False
    """Add to the prompt the group's choice statistics (:class:`~prover_core.judges.choice.ChoiceJudge`):
    the turns where the failed runs, at the same state, chose otherwise (for small models)."""

    # Prompt size (see :mod:`prover_core.judges.llm.prompt` for the truncation rule).
    max_field_chars: int = Field(default=1500, ge=40)
    """An observation or action longer than this keeps its head and tail around a ``[... N chars cut ...]`` mark."""
    max_trajectory_chars: int = Field(default=24000, ge=100)
    """Budget of the successful trajectory's block in the prompt."""
    max_failures_shown: int = Field(default=8, ge=1)
    preview_head_turns: int = Field(default=2, ge=0)
    preview_tail_turns: int = Field(default=3, ge=0)
    preview_field_chars: int = Field(default=200, ge=20)
    max_search_results: int = Field(default=8, ge=1)
    max_segment_read: int = Field(default=12, ge=1)
    """``get_segment`` returns at most this many turns per call."""
    max_tool_calls_per_reply: int = Field(default=8, ge=1)
    """Agentic mode: tool calls of one reply that are run; more is a violation and the rest are dropped from the
    history (each call's name and arguments are kept clipped to ``max_field_chars``)."""

    # Transport.
    timeout_s: float = Field(default=120.0, gt=0.0)
    """Total deadline for one answer (one attempt's HTTP request and response): connecting, sending and reading
    the whole body end within ``timeout_s``, however slowly the server trickles its answer; past it the attempt
    is retried as a timeout. The read timeout (also ``timeout_s``) stays inside it."""
    connect_timeout_s: float = Field(default=10.0, gt=0.0)
    """Limit on connecting, inside the ``timeout_s`` deadline."""
    max_answer_bytes: int = Field(default=MAX_ANSWER_BYTES, ge=1)
    """An answer's body is read up to this many bytes; past it the request fails
    (:class:`~prover_core.errors.JudgeAnswerTooLargeError`, not retried)."""
    max_concurrency: int = Field(default=16, ge=1)
    """Requests in flight at once (and the size of the connection pool)."""
    max_attempts: int = Field(default=4, ge=1)
    """Attempts per request, the first included, on 408/409/429/5xx, connection errors and timeouts."""
    backoff_initial_s: float = Field(default=1.0, ge=0.0)
    backoff_max_s: float = Field(default=30.0, ge=0.0)
    backoff_jitter_s: float = Field(default=1.0, ge=0.0)
    max_retry_after_s: float = Field(default=60.0, ge=0.0)
    """A server's ``Retry-After`` is honoured up to this many seconds."""
    circuit_failures: int = Field(default=8, ge=1)
    """After this many consecutive requests failed in one step, each after all its retries, no more requests
    until ``new_step()`` (failed attempts that a retry recovers do not count)."""

    # Budget per step (``None``: unlimited). Checked before each request.
    max_calls_per_step: int | None = Field(default=None, ge=0)
    max_tokens_per_step: int | None = Field(default=None, ge=0)

    cache_dir: Path | None = None
    """If set, responses are stored here keyed by the SHA-256 of the request, so a rerun costs nothing. A private
    directory (made 0o700; a link, another user's or one others may write to is refused): whoever can write there
    chooses the judge's answers (:mod:`~prover_core.judges.llm.cache`)."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        url = refuse_url_credentials(url)  # first, whatever the scheme's spelling: CredentialError is not a
        # ValueError, so pydantic does not wrap it in a ValidationError, whose message would show the URL as given
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {url!r}")
        return url.rstrip("/")

    @field_validator("extra_body")
    @classmethod
    def _no_reserved_keys(cls, body: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(RESERVED_BODY_KEYS & body.keys())
        if clash:
            raise ValueError(
                f"extra_body may not set {clash}: the judge sets these itself; use the config fields "
                "(model, temperature, max_tokens with max_tokens_field, seed, mode, response_format) instead"
            )
        return body

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    def api_key(self) -> SecretStr | None:
        """The key from ``api_key_env`` (:func:`~prover_core.redaction.read_key`: stripped; unset or blank raises
        :class:`ValueError`, a non-printable character :class:`~prover_core.errors.CredentialError`); ``None`` when
        no variable is named."""
        if self.api_key_env is None:
            return None
        return read_key(self.api_key_env, "the judge's API key")
