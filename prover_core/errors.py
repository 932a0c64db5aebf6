"""Typed exceptions. Everything the library raises on purpose derives from :class:`ProverError`.

The tree (a class's other bases in brackets; ``tests/test_errors.py`` checks it against the classes)::

    ProverError
        HostImportError [ImportError]
        InvalidBatchError [ValueError]
        InvalidSegmentError [ValueError]
        ThreadsExhaustedError [RuntimeError]
        AnswerTooLargeError
        JudgeError
            JudgeUnsupportedError
            JudgeTimeoutError
            JudgeRefusedError
            JudgeAnswerTooLargeError [AnswerTooLargeError]
            AnswerTimeout [TimeoutError]
        RestoreError
            ReplayMismatchError
        ContinuationError
            ContinuationLimitError
                RolloutLimitError
            ContinuationTimeoutError
            EngineError
            WorkerLostError
            InvalidOutcomeError [ValueError]
            BudgetExhaustedError
        UsageError
            ProtocolError [TypeError]
            EventLoopError [RuntimeError]
            MissingReseedError [ValueError]
            ResourceError [ValueError]
            CredentialError
        _ToolError

A :class:`ContinuationError` is counted as a failed continuation, never raised out of ``compute_bonus``
(unless ``ProverConfig.strict``); a :class:`UsageError` is raised at once, never recorded as a skip. A class
whose name starts with ``_`` is internal: it never leaves the library (it is caught where it is raised) and is
not exported. The engines' own errors (``EngineTimeoutError``, ``EngineHTTPError``, ``EngineResponseError``,
``EngineAnswerTooLargeError``, ``ContextLengthError``, ``TokenRecordError``) live with them:
``prover_engine.errors``.
"""

from __future__ import annotations

__all__ = [
    "AnswerTimeout",
    "AnswerTooLargeError",
    "BudgetExhaustedError",
    "ContinuationError",
    "ContinuationLimitError",
    "ContinuationTimeoutError",
    "CredentialError",
    "EngineError",
    "EventLoopError",
    "HostImportError",
    "InvalidBatchError",
    "InvalidOutcomeError",
    "InvalidSegmentError",
    "JudgeAnswerTooLargeError",
    "JudgeError",
    "JudgeRefusedError",
    "JudgeTimeoutError",
    "JudgeUnsupportedError",
    "MissingReseedError",
    "ProtocolError",
    "ProverError",
    "ReplayMismatchError",
    "ResourceError",
    "RestoreError",
    "RolloutLimitError",
    "ThreadsExhaustedError",
    "UsageError",
    "WorkerLostError",
]


class ProverError(Exception):
    """Base class of every error raised on purpose by prover-core."""


class HostImportError(ProverError, ImportError):
    """An adapter's host library (TRL, verl, OpenRLHF, torch) is not installed; the message says how to install it."""


class InvalidBatchError(ProverError, ValueError):
    """The batch of trajectories handed to ``compute_bonus`` is malformed (empty, duplicate ids, ...)."""


class InvalidSegmentError(ProverError, ValueError):
    """A proposed segment is out of range, too long, or ends on the terminal turn."""


class JudgeError(ProverError):
    """A judge failed to produce a usable proposal (garbage answer, timeout, exhausted repairs)."""


class JudgeUnsupportedError(JudgeError):
    """The judge's chat server refused a request parameter it does not support (not retried)."""


class AnswerTooLargeError(ProverError):
    """A server's answer is larger than the client's ``max_answer_bytes`` (read no further, not retried)."""


class JudgeAnswerTooLargeError(JudgeError, AnswerTooLargeError):
    """The judge's chat server answered more than ``LLMJudgeConfig.max_answer_bytes``."""


class RestoreError(ProverError):
    """An environment could not be restored to a turn boundary."""


class ReplayMismatchError(RestoreError):
    """Deterministic replay produced an observation that differs from the recorded one.

    Raised instead of continuing from a state that is not the recorded one, which would verify
    (and credit) the wrong thing.
    """

    def __init__(self, trajectory_id: str, turn: int, expected: object, got: object, detail: str = "") -> None:
        self.trajectory_id = trajectory_id
        self.turn = turn
        self.expected = expected
        self.got = got
        super().__init__(
            f"replay of trajectory {trajectory_id!r} diverged at turn {turn}: "
            f"expected observation {_short(expected)} ({_type(expected)}), got {_short(got)} ({_type(got)})"
            + (f"; {detail}" if detail else "")
            + ". Remedies: an environment whose reset(spec) and step(action) replay exactly (seed it from the "
            "trajectory's reset spec); ReplayEnv(make_env, observation_equal=...) when observations differ only in "
            "what does not matter (timestamps, float noise); SnapshotEnv(make_env, copy_env=...) to replay each "
            "boundary once and copy the live state from then on"
        )


class ContinuationError(ProverError):
    """A continuation (policy acting in a restored environment) raised or did not finish."""


class ContinuationLimitError(ContinuationError):
    """A continuation ran past ``ProverConfig.max_continuation_turns`` without ending."""


class RolloutLimitError(ContinuationLimitError):
    """A recorded episode did not end within its turn limit, or ended at reset with no turn to record."""


class ContinuationTimeoutError(ContinuationError):
    """A continuation ran past ``ProverConfig.continuation_timeout_s`` seconds of wall time."""


class EngineError(ContinuationError):
    """An inference engine failed to generate a continuation's action (refused, unreachable, garbage)."""


class WorkerLostError(ContinuationError):
    """The worker process running a continuation died (or was killed after a timeout)."""


class InvalidOutcomeError(ContinuationError, ValueError):
    """A continuation's outcome is not binary (``success`` other than 0/1/bool, ``turns`` negative, ...).

    Counted as a failed continuation of kind ``invalid_outcome``, never as a success.
    """


class JudgeTimeoutError(JudgeError):
    """A judge did not answer within ``ProverConfig.judge_timeout_s`` seconds."""


class AnswerTimeout(JudgeError, TimeoutError):
    """One attempt of the LLM judge's request did not get its whole answer (connecting, sending, the full body)
    within ``LLMJudgeConfig.timeout_s``: retried like any timeout, then named in the :class:`JudgeError` that ends
    the request."""


class JudgeRefusedError(JudgeError):
    """A judge request that was not sent: the LLM judge's circuit is open or the step's budget
    (``LLMJudgeConfig.max_calls_per_step``, ``max_tokens_per_step``) is spent."""


class ThreadsExhaustedError(ProverError, RuntimeError):
    """Too many threads of synchronous user code (an environment's continuations, a judge's ``propose``) abandoned at
    their time limit are still blocked in one call: prover-core refuses to start another for it until they end
    (``prover_core._aio.MAX_BLOCKED_THREADS``); the message names the call. Counted like any failure there."""


class UsageError(ProverError):
    """The library is being used wrongly (a programming or setup error): raised at once from
    ``compute_bonus``, never recorded as a per-group skip."""


class ProtocolError(UsageError, TypeError):
    """An object does not implement the protocol it is passed as (a function as a policy, ``judge=None``, ...)."""


class EventLoopError(UsageError, RuntimeError):
    """Async user code is bound to another event loop than the one ``compute_bonus`` runs on."""


class MissingReseedError(UsageError, ValueError):
    """A restorer was told to refuse environments without ``reseed(seed)`` and got one."""


class CredentialError(UsageError):
    """A secret is misplaced or malformed: credentials in a URL, a key with a character no HTTP header can carry.
    The message names where it is (the variable, the URL with the secret masked), never the secret."""


class ResourceError(UsageError, ValueError):
    """An executor asks for more than is available (more Ray workers than CPUs, ...)."""


class _ToolError(ProverError):
    """A tool call the LLM judge cannot run: unknown tool or arguments that are not a JSON object. Internal: the
    conversation that called the tool hands its message back to the model as the tool's result."""


def _type(value: object) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class BudgetExhaustedError(ContinuationError):
    """The call's budget of extra policy turns (``ProverConfig.max_extra_share``) had no turn left for this
    continuation: it was stopped before its next turn, or not started (:mod:`prover_core.budget`)."""
