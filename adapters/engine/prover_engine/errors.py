"""The engines' exceptions. Each is an :class:`~prover_core.errors.EngineError` (a failed continuation, counted,
never raised out of ``compute_bonus``) or, for a training row's recorded tokens, a :class:`ValueError`.

The tree below :mod:`prover_core.errors`'s (a class's other bases in brackets; ``tests/test_errors.py`` checks it)::

    EngineError
        EngineTimeoutError [ContinuationTimeoutError]
        EngineHTTPError
        EngineResponseError
            EngineAnswerTooLargeError [AnswerTooLargeError]
        ContextLengthError
    ProverError
        TokenRecordError [ValueError]

``EngineError`` itself lives in the core (:mod:`prover_core.hosts`): the host adapters' in-process engines raise it
too.
"""

from __future__ import annotations

from prover_core.errors import AnswerTooLargeError, ContinuationTimeoutError, EngineError, ProverError

__all__ = [
    "ContextLengthError",
    "EngineAnswerTooLargeError",
    "EngineHTTPError",
    "EngineResponseError",
    "EngineTimeoutError",
    "TokenRecordError",
]


class EngineTimeoutError(EngineError, ContinuationTimeoutError):
    """An inference engine did not answer within its time limit."""


class EngineHTTPError(EngineError):
    """An inference engine answered with an HTTP error status (``status``), after any retries."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[type[EngineHTTPError], tuple[str, int]]:  # pickles across processes
        return type(self), (str(self), self.status)


class EngineResponseError(EngineError):
    """An inference engine's answer is not a completion with token ids (bad JSON, missing or invalid ids)."""


class EngineAnswerTooLargeError(EngineResponseError, AnswerTooLargeError):
    """An inference engine answered more than its ``max_answer_bytes``."""


class ContextLengthError(EngineError):
    """A continuation's context leaves no room for one more token within the engine's ``max_model_len``."""


class TokenRecordError(ProverError, ValueError):
    """A training row's recorded token ids do not fit its trajectory (missing, or spans out of range)."""
