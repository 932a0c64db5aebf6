"""Stage 2, Propose: ask a judge where the successful run did what the failed runs did not.

The judge only decides *where* Monte Carlo budget is spent; it never sets the size of the credit.
Its answer is re-checked against :class:`~prover_core.data.SegmentRules` here, whatever the judge.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from prover_core._aio import call_user
from prover_core.data import Decline, Proposal, SegmentRules, Trajectory
from prover_core.errors import InvalidSegmentError, JudgeError, ProverError
from prover_core.protocols import Judge, OthersJudge

__all__ = ["propose", "takes_others"]


def takes_others(judge: Judge) -> bool:
    """Whether ``judge`` is an :class:`~prover_core.protocols.OthersJudge`: its ``propose`` takes the group's other
    runs with the representative's outcome (a keyword-only ``others``)."""
    return isinstance(judge, OthersJudge)


async def propose(
    judge: Judge,
    success: Trajectory,
    failures: Sequence[Trajectory],
    rules: SegmentRules,
    others: Sequence[Trajectory] = (),
) -> Proposal | Decline:
    """The judge's proposal, checked; a :class:`Decline` passes through.

    ``others`` (the group's other runs with ``success``'s outcome) reach only an
    :class:`~prover_core.protocols.OthersJudge`; the rest get the plain protocol's three arguments.
    Raises :class:`JudgeError` if the judge raises or answers with something else, and
    :class:`InvalidSegmentError` if its segment breaks ``rules``.
    """
    try:
        method: Callable[..., object] = judge.propose
        if isinstance(judge, OthersJudge):
            method = functools.partial(method, others=others)
        answer = await call_user(method, success, failures, rules, threaded=True)  # sync judges overlap
    except ProverError:
        raise
    except Exception as exc:
        raise JudgeError(f"judge {type(judge).__name__} raised {type(exc).__name__}: {exc}") from exc
    if isinstance(answer, Decline):
        return answer
    if not isinstance(answer, Proposal):
        raise JudgeError(f"judge {type(judge).__name__} returned {answer!r}, not a Proposal or Decline")
    reason = rules.violation(answer.segment, success)
    if reason is not None:
        raise InvalidSegmentError(f"judge {type(judge).__name__} proposed an invalid segment: {reason}")
    return answer
