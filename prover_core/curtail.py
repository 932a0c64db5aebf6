"""Curtailment: skip (or stop) the second boundary's continuations once no outcome of theirs could be accepted.

The first boundary is the one acceptance needs higher: post for a gain, pre for a drop. With its outcomes fixed,
0 successes of K at the second boundary is that boundary's best case under every rule (:func:`best_case`), so if
even that is rejected the decision is made (:func:`hopeless`), and while the first boundary still runs,
:func:`settled` asks the same of every way its pending continuations can end. The functions take what the formula
needs: ``k`` continuations per boundary, the :class:`~prover_core.acceptance.AcceptanceRule`, and the failures a
boundary may have (``allowed_failures``). :func:`curtailed` is the schedule that uses them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Sequence

from prover_core.acceptance import AcceptanceRule, Direction
from prover_core.clock import Meter
from prover_core.continuations import metered
from prover_core.data import Outcome, Segment
from prover_core.runner import Result, Runner, halt

__all__ = ["best_case", "curtailed", "curtailed_cost", "hopeless", "settled"]


def best_case(
    first_successes: int, first_count: int, k: int, rule: AcceptanceRule, direction: Direction = "gain"
) -> tuple[bool, str]:
    """``rule``'s decision (and reason) if the second boundary's ``k`` continuations all failed.

    The first boundary is the one acceptance needs higher: post for a gain, pre for a drop. Its outcomes
    fixed, 0 successes of K is the second boundary's best case (every rule's acceptance grows as that
    boundary's rate falls and as its count grows at rate 0; checked exhaustively in the tests).
    """
    if direction == "gain":
        return rule.accept(0, k, first_successes, first_count, direction)
    return rule.accept(first_successes, first_count, 0, k, direction)


def hopeless(
    first_successes: int, first_count: int, k: int, rule: AcceptanceRule, direction: Direction = "gain"
) -> bool:
    """Whether no outcome of the second boundary's ``k`` continuations could lead to acceptance.

    If even the :func:`best_case` is rejected, no draw is accepted, and the K continuations can be skipped
    without changing any decision.
    """
    return not best_case(first_successes, first_count, k, rule, direction)[0]


def curtailed_cost(p_first: float, k: int, rule: AcceptanceRule, direction: Direction = "gain") -> float:
    """Expected continuations of a curtailed fixed-K verification whose first boundary succeeds at rate ``p_first``.

    ``E[spent] = K + K * P(not hopeless(Y))`` with ``Y ~ Bin(K, p_first)`` (no failures); under the paper's rule
    ``hopeless`` is ``Y = 0``, so ``E[spent] = K (2 - (1 - p_first)^K)`` for a gain, against ``2 K`` uncurtailed.
    """
    pmf = [math.comb(k, y) * p_first**y * (1 - p_first) ** (k - y) for y in range(k + 1)]
    return k + k * sum(p for y, p in enumerate(pmf) if not hopeless(y, k, k, rule, direction))


def settled(
    first: Sequence[Result],
    pending: int,
    k: int,
    rule: AcceptanceRule,
    allowed_failures: int,
    direction: Direction = "gain",
) -> bool:
    """Whether the first boundary's results decide the verification whatever its ``pending`` continuations give.

    Settled means the second boundary cannot matter: every way the pending continuations can end (a success, a
    failure, or an error that is not counted) leaves the first boundary with more than ``allowed_failures``
    unfinished continuations (incomplete) or :func:`hopeless`. Under the paper's rule that is "every continuation
    has ended, none succeeded" (or too many errors).
    """
    finished = [r for r in first if isinstance(r, Outcome)]
    successes, failed = sum(r.success for r in finished), len(first) - len(finished)
    for wins in range(pending + 1):
        for losses in range(pending - wins + 1):
            if failed + pending - wins - losses > allowed_failures:
                continue  # too few finished: incomplete, whatever the second boundary gives
            if not hopeless(successes + wins, len(finished) + wins + losses, k, rule, direction):
                return False
    return True


async def curtailed(
    runner: Runner,
    segment: Segment,
    pre_seeds: list[int],
    post_seeds: list[int],
    rule: AcceptanceRule,
    direction: Direction = "gain",
) -> tuple[list[Result], list[Result], bool]:
    """Pre and post results of fixed-K sampling with curtailment, and whether the second boundary was skipped.

    The first boundary is post for a gain, pre for a drop. ``curtail="overlap"`` (``ProverConfig.curtail_mode``):
    both boundaries start together and the second boundary's continuations are stopped the moment the first
    boundary's results settle the decision (checked as each of them ends, inside its own task, before a batching
    policy sends the next call). ``"wait"``, and ``"overlap"`` for a continuer whose turns cannot be stopped from here
    (a ``continue_from`` hook, an executor that runs elsewhere: not ``metered``): the second boundary starts once the
    first has ended, if the first has not :func:`settled` the decision. Either way a skipped boundary's results
    are not used, so every schedule decides as running every continuation would.
    """
    settings = runner.settings
    k, allowed = settings.k, settings.allowed_failures
    gain = direction == "gain"
    first_name, second_name = ("post", "pre") if gain else ("pre", "post")

    def launch(boundary: str, meters: Sequence[Meter] = ()) -> list[Awaitable[Result]]:
        if boundary == "pre":
            return runner.pre(segment, pre_seeds, meters)
        return runner.post(segment, post_seeds, meters)

    if settings.curtail == "wait" or not metered(runner.continuer):
        first: list[Result] = list(await asyncio.gather(*launch(first_name)))
        if settled(first, 0, k, rule, allowed, direction):
            return ([], first, True) if gain else (first, [], True)
        second: list[Result] = list(await asyncio.gather(*launch(second_name)))
        return (second, first, False) if gain else (first, second, False)

    meters = runner.meters(k)
    stopping: list[asyncio.Future[Result]] = []
    ended: list[Result] = []

    async def watched(call: Awaitable[Result]) -> Result:
        result = await call
        ended.append(result)
        if not meters[0].stopped and settled(ended, k - len(ended), k, rule, allowed, direction):
            halt(stopping, meters)
        return result

    firsts = [asyncio.ensure_future(watched(call)) for call in launch(first_name)]
    stopping += [asyncio.ensure_future(call) for call in launch(second_name, meters)]
    try:
        first = list(await asyncio.gather(*firsts))
    except BaseException:
        await runner.discard(stopping, meters)
        raise
    if settled(first, 0, k, rule, allowed, direction):
        await runner.discard(stopping, meters)
        return ([], first, True) if gain else (first, [], True)
    second = list(await asyncio.gather(*stopping))
    return (second, first, False) if gain else (first, second, False)
