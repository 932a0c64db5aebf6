"""Stage 3, Verify: Monte Carlo success rates at the segment's two boundaries.

For segment ``[l, r]`` of the successful trajectory, K continuations of the current policy run from
``s_pre = s_l`` and K from ``s_post = s_{r+1}``:

    Delta = (1/K) sum_i R_post,i  -  (1/K) sum_i R_pre,i

``Delta`` is an unbiased estimate of ``V(s_post) - V(s_pre)`` under the current policy. Continuation
``i`` from both boundaries gets the same seed (common random numbers) unless
``ProverConfig.paired_seeds`` is off. The paper accepts iff ``Delta > 0``; other rules live in
:mod:`prover_core.acceptance`, and adaptive (anytime-valid, early-stopping) sampling in
:mod:`prover_core.sequential`. With ``curtail`` (the default) the second boundary (pre for a gain) is not
finished once the first boundary's outcomes show that none of its own could be accepted (:func:`settled`): the
same decisions as running all ``2 K``, from fewer policy turns. ``curtail_mode="overlap"`` (the default) starts
both boundaries together and stops the second when settled: one round, as many sequential policy calls as the
longest continuation needs. ``curtail_mode="wait"`` starts the second boundary after the first has ended: the
fewest policy turns, up to twice the rounds.

Latency: every continuation carries a :class:`~prover_core.clock.Meter` of the policy turns it has taken, on a
:class:`~prover_core.clock.PolicyClock` shared by the call's verifications, whose reading at the end is the
critical path of verification in sequential policy calls (``prover/verify_policy_rounds``, :mod:`prover_core.clock`).

Failures never hang or silently count: a continuation that raises, runs past
``max_continuation_turns`` or past ``continuation_timeout_s`` seconds, ends with a non-binary
outcome, or whose worker dies, is counted by kind in :class:`~prover_core.report.VerifyStats`; a
boundary with more failures than ``k - required_finished`` is not accepted (the verification is
``incomplete``). With ``continuation_timeout_s`` set, synchronous user code (``restore``, ``act``,
``step``, ``continue_from``) runs in threads so that the limit holds while it blocks; a blocked
thread is abandoned, not killed. Programming errors (:class:`~prover_core.errors.UsageError`,
async code bound to another event loop) are raised, never counted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import pickle
import zlib
from collections.abc import Awaitable, Sequence

import numpy as np

from prover_core.acceptance import AcceptanceRule
from prover_core.clock import METER, Meter, PolicyClock
from prover_core.config import ProverConfig
from prover_core.continuations import Continuer, failure_kind, metered, usage_error
from prover_core.data import Outcome, Segment, Trajectory, Verification, json_plain
from prover_core.errors import (
    ContinuationTimeoutError,
)
from prover_core.report import Direction, VerifyStats
from prover_core.sequential import SequentialState, SequentialTest


def continuation_seeds(
    config: ProverConfig, trajectory: Trajectory | str, count: int | None = None
) -> tuple[list[int], list[int]]:
    """Seeds of ``count`` (default K) pre and post continuations; equal pairwise when ``paired_seeds``.

    Derived from ``config.seed``, the trajectory id and, given a :class:`Trajectory`, a digest of its
    content (reset spec, observations, actions): stable across processes and runs, so the same batch
    gets the same seeds, while each training step's new episodes get new ones even when ``config.seed``
    and the ids repeat (a ``ProverConfig`` built once and reused every step). Content that does not
    pickle falls back to the id alone. The pre seeds of a longer list start with those of a shorter
    one, so adaptive sampling's first K pre continuations are the fixed-K ones.
    """
    n = config.k if count is None else count
    trajectory_id = trajectory if isinstance(trajectory, str) else trajectory.id
    words = [config.seed, zlib.crc32(trajectory_id.encode())]
    if not isinstance(trajectory, str):
        words += _content_words(trajectory)
    seeds = np.random.SeedSequence(words).generate_state(2 * n, dtype=np.uint32).tolist()
    pre = seeds[:n]
    return pre, (pre if config.paired_seeds else seeds[n:])


def _content_words(trajectory: Trajectory) -> list[int]:
    """Four 32-bit words of a SHA-256 of the trajectory's reset spec, observations and actions.

    Hashed in their JSON form (so a trajectory loaded back from JSON gets the same seeds), else
    pickled; ``[]`` when neither works.
    """
    content = (trajectory.reset, [(turn.observation, turn.action) for turn in trajectory.turns])
    try:
        blob = json.dumps(json_plain(content), sort_keys=True).encode()
    except (TypeError, ValueError):
        try:
            blob = pickle.dumps(content, protocol=5)
        except Exception:
            return []
    digest = hashlib.sha256(blob).digest()
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def acceptance_rule(config: ProverConfig) -> AcceptanceRule:
    """The fixed-K rule ``config`` selects."""
    return AcceptanceRule(config.acceptance, threshold=config.posterior_threshold, alpha=config.lcb_alpha)


def sequential_test(config: ProverConfig) -> SequentialTest:
    """The adaptive test ``config`` selects."""
    return SequentialTest(
        alpha=config.adaptive_alpha,
        beta=config.adaptive_beta,
        min_effect=config.adaptive_min_effect,
        max_pairs=config.max_adaptive_k,
        round_pairs=config.adaptive_round,
    )


def accept(
    pre_successes: int,
    pre_count: int,
    post_successes: int,
    post_count: int,
    config: ProverConfig,
    direction: Direction = "gain",
) -> tuple[bool, str]:
    """The fixed-K acceptance rule of ``config`` (default the paper's: accept iff ``Delta > 0``).

    ``direction="drop"`` tests the reverse (``p_pre > p_post``), for negative credit.
    """
    rule = acceptance_rule(config)
    if direction == "gain":
        return rule.decide(pre_successes, pre_count, post_successes, post_count)
    ok, reason = rule.decide(post_successes, post_count, pre_successes, pre_count)
    return ok, f"drop (roles of pre and post swapped): {reason}"


Result = Outcome | BaseException


class _Runner:
    """Launches the continuations of one verification, with the concurrency and wall-time limits, each
    with a :class:`Meter` on the call's :class:`PolicyClock`."""

    def __init__(
        self,
        trajectory: Trajectory,
        continuer: Continuer,
        config: ProverConfig,
        limit: asyncio.Semaphore,
        clock: PolicyClock | None = None,
    ) -> None:
        self.trajectory, self.continuer, self.config, self.limit = trajectory, continuer, config, limit
        self.clock = clock or PolicyClock()
        self.spent = 0
        """Continuations launched (started running; finished, failed or stopped)."""
        self.cancelled = 0
        """Continuations launched, then stopped or discarded because the other boundary settled the decision."""
        self.cancelled_turns = 0
        self.last_round = 0
        """The clock's round at which this verification's last continuation ended."""

    def meters(self, count: int) -> list[Meter]:
        return [Meter(self.clock) for _ in range(count)]

    async def one(self, turn: int, seed: int, replay: int = 0, meter: Meter | None = None) -> Result:
        """One continuation from ``s_turn``; failures are returned, not raised."""
        if turn == self.trajectory.num_turns:  # terminal post boundary: its outcome is recorded
            return Outcome(success=self.trajectory.success)
        meter = meter or Meter(self.clock)
        async with self.limit:
            meter.start, meter.started = self.clock.now, True  # one that waited for a slot starts later
            self.spent += 1
            token = METER.set(meter)
            try:
                outcome = await self._call(turn, seed, replay)
                meter.finish(outcome.turns)
                return outcome
            except Exception as exc:
                fatal = usage_error(exc)
                if fatal is exc:
                    raise
                if fatal is not None:
                    raise fatal from exc
                if self.config.strict:
                    raise
                return exc
            finally:
                METER.reset(token)
                self.last_round = max(self.last_round, meter.start + meter.turns)

    async def _call(self, turn: int, seed: int, replay: int) -> Outcome:
        if replay:
            call = self.continuer(self.trajectory, turn, seed, replay=replay)
        else:
            call = self.continuer(self.trajectory, turn, seed)
        timeout = self.config.continuation_timeout_s
        if timeout is None:
            return await call
        try:
            return await asyncio.wait_for(call, timeout)
        except asyncio.TimeoutError as exc:
            raise ContinuationTimeoutError(f"continuation ran past {timeout} s of wall time") from exc

    def pre(self, segment: Segment, seeds: list[int], meters: Sequence[Meter] = ()) -> list[Awaitable[Result]]:
        """Continuations from ``s_l``, one per seed (each with its meter, if given)."""
        return self._launch(segment.start, 0, seeds, meters)

    def post(self, segment: Segment, seeds: list[int], meters: Sequence[Meter] = ()) -> list[Awaitable[Result]]:
        """Continuations from ``s_{r+1}`` (``delta_of="states"``), or from ``s_l`` replaying the segment's
        ``r - l + 1`` recorded actions (``delta_of="choices"``), one per seed."""
        if self.config.delta_of == "choices":
            return self._launch(segment.start, segment.num_turns, seeds, meters)
        return self._launch(segment.end + 1, 0, seeds, meters)

    def _launch(self, turn: int, replay: int, seeds: list[int], meters: Sequence[Meter]) -> list[Awaitable[Result]]:
        none: list[None] = [None] * len(seeds)
        return [self.one(turn, seed, replay, meter) for seed, meter in zip(seeds, list(meters) or none, strict=True)]

    async def pairs(self, segment: Segment, pre_seeds: list[int], post_seeds: list[int]) -> list[Result]:
        """Pre results then post results, in seed order, all launched at once."""
        return await asyncio.gather(*self.pre(segment, pre_seeds), *self.post(segment, post_seeds))

    async def discard(self, tasks: Sequence[asyncio.Future[Result]], meters: Sequence[Meter]) -> None:
        """Stop ``tasks`` (a boundary the decision no longer needs), wait until they have let go, count their cost.

        One that has not started (waiting for a concurrency slot) is cancelled; one that has stops
        before its next turn, after the call it is in (see :mod:`prover_core.clock`), so its turns are all counted.
        """
        halt(tasks, meters)
        await asyncio.gather(*tasks, return_exceptions=True)
        started = [m for m in meters if m.started]
        self.cancelled += len(started)
        self.cancelled_turns += sum(m.turns for m in started)


def halt(tasks: Sequence[asyncio.Future[Result]], meters: Sequence[Meter]) -> None:
    """Stop continuations, at once: each one that has not started is cancelled, each one that has stops before its
    next turn (its meter says so)."""
    for task, meter in zip(tasks, meters, strict=True):
        meter.stopped = True
        if not meter.started:
            task.cancel()


def _tally(pre: list[Result], post: list[Result]) -> dict[str, int]:
    pre_ok = [r for r in pre if isinstance(r, Outcome)]
    post_ok = [r for r in post if isinstance(r, Outcome)]
    return dict(
        pre_successes=sum(r.success for r in pre_ok),
        pre_count=len(pre_ok),
        post_successes=sum(r.success for r in post_ok),
        post_count=len(post_ok),
        failed_continuations=len(pre) + len(post) - len(pre_ok) - len(post_ok),
        policy_turns=sum(r.turns for r in pre_ok + post_ok),
    )


def _failures(results: list[Result]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results:
        if not isinstance(r, Outcome):
            kind = failure_kind(r)
            out[kind] = out.get(kind, 0) + 1
    return out


def _incomplete_reason(
    pre: list[Result], post: list[Result], need: int, drawn: int, not_run: str | None = None
) -> str | None:
    """Why too few continuations finished to decide, or ``None``; the boundary ``not_run`` (curtailment) is exempt."""
    finished = {"pre": sum(isinstance(r, Outcome) for r in pre), "post": sum(isinstance(r, Outcome) for r in post)}
    if all(n >= need or name == not_run for name, n in finished.items()):
        return None
    first = next(r for r in pre + post if not isinstance(r, Outcome))
    counts = ", ".join(f"{name} not run" if name == not_run else f"{name} {n}/{drawn}" for name, n in finished.items())
    return f"too few finished continuations ({counts}, need {need}); first error: {type(first).__name__}: {first}"


async def verify_segment_detailed(
    trajectory: Trajectory,
    segment: Segment,
    continuer: Continuer,
    config: ProverConfig,
    limit: asyncio.Semaphore | None = None,
    direction: Direction = "gain",
    clock: PolicyClock | None = None,
) -> tuple[Verification, VerifyStats]:
    """Verify ``segment`` by ``config.sampling`` and return the verification with its cost and stopping.

    ``direction="drop"`` asks whether the segment *lowered* the success rate (negative credit). ``clock``: the
    :class:`PolicyClock` of every verification that runs together (default: one of its own).
    """
    limit = limit or asyncio.Semaphore(config.max_concurrency)
    runner = _Runner(trajectory, continuer, config, limit, clock)
    if config.sampling == "adaptive":
        return await _adaptive(runner, segment, direction)
    return await _fixed(runner, segment, direction)


def best_case(
    first_successes: int, first_count: int, config: ProverConfig, direction: Direction = "gain"
) -> tuple[bool, str]:
    """The rule's decision (and reason) if the second boundary's K continuations all failed.

    The first boundary is the one acceptance needs higher: post for a gain, pre for a drop. Its outcomes
    fixed, 0 successes of K is the second boundary's best case (every rule's acceptance grows as that
    boundary's rate falls and as its count grows at rate 0; checked exhaustively in the tests).
    """
    k = config.k
    if direction == "gain":
        return accept(0, k, first_successes, first_count, config, direction)
    return accept(first_successes, first_count, 0, k, config, direction)


def hopeless(first_successes: int, first_count: int, config: ProverConfig, direction: Direction = "gain") -> bool:
    """Whether no outcome of the second boundary's K continuations could lead to acceptance (curtailment).

    If even the :func:`best_case` is rejected, no draw is accepted, and the K continuations can be skipped
    without changing any decision.
    """
    return not best_case(first_successes, first_count, config, direction)[0]


def curtailed_cost(p_first: float, config: ProverConfig, direction: Direction = "gain") -> float:
    """Expected continuations of a curtailed fixed-K verification whose first boundary succeeds at rate ``p_first``.

    ``E[spent] = K + K * P(not hopeless(Y))`` with ``Y ~ Bin(K, p_first)`` (no failures); under the paper's rule
    ``hopeless`` is ``Y = 0``, so ``E[spent] = K (2 - (1 - p_first)^K)`` for a gain, against ``2 K`` uncurtailed.
    """
    k = config.k
    pmf = [math.comb(k, y) * p_first**y * (1 - p_first) ** (k - y) for y in range(k + 1)]
    return k + k * sum(p for y, p in enumerate(pmf) if not hopeless(y, k, config, direction))


def settled(first: Sequence[Result], pending: int, config: ProverConfig, direction: Direction = "gain") -> bool:
    """Whether the first boundary's results decide the verification whatever its ``pending`` continuations give.

    Settled means the second boundary cannot matter: every way the pending continuations can end (a success, a
    failure, or an error that is not counted) leaves the first boundary with too few finished continuations
    (incomplete) or :func:`hopeless`. Under the paper's rule that is "every continuation has ended, none succeeded"
    (or too many errors).
    """
    finished = [r for r in first if isinstance(r, Outcome)]
    successes, failed = sum(r.success for r in finished), len(first) - len(finished)
    for wins in range(pending + 1):
        for losses in range(pending - wins + 1):
            if failed + pending - wins - losses > config.allowed_failures:
                continue  # too few finished: incomplete, whatever the second boundary gives
            if not hopeless(successes + wins, len(finished) + wins + losses, config, direction):
                return False
    return True


async def _curtailed(
    runner: _Runner, segment: Segment, pre_seeds: list[int], post_seeds: list[int], direction: Direction
) -> tuple[list[Result], list[Result], bool]:
    """Pre and post results of fixed-K sampling with curtailment, and whether the second boundary was skipped.

    The first boundary is post for a gain, pre for a drop. ``curtail_mode="overlap"``: both boundaries start
    together and the second boundary's continuations are stopped the moment the first boundary's results settle
    the decision (checked as each of them ends, inside its own task, before a batching policy sends the next
    call). ``"wait"``, and ``"overlap"`` for a continuer whose turns cannot be stopped from here (a
    ``continue_from`` hook, an executor that runs elsewhere: not ``metered``): the second boundary starts once the
    first has ended, if the first has not :func:`settled` the decision. Either way a skipped boundary's results
    are not used, so every schedule decides as running every continuation would.
    """
    config = runner.config
    gain = direction == "gain"
    first_name, second_name = ("post", "pre") if gain else ("pre", "post")

    def launch(boundary: str, meters: Sequence[Meter] = ()) -> list[Awaitable[Result]]:
        if boundary == "pre":
            return runner.pre(segment, pre_seeds, meters)
        return runner.post(segment, post_seeds, meters)

    if config.curtail_mode == "wait" or not metered(runner.continuer):
        first: list[Result] = list(await asyncio.gather(*launch(first_name)))
        if settled(first, 0, config, direction):
            return ([], first, True) if gain else (first, [], True)
        second: list[Result] = list(await asyncio.gather(*launch(second_name)))
        return (second, first, False) if gain else (first, second, False)

    meters = runner.meters(config.k)
    stopping: list[asyncio.Future[Result]] = []
    ended: list[Result] = []

    async def watched(call: Awaitable[Result]) -> Result:
        result = await call
        ended.append(result)
        if not meters[0].stopped and settled(ended, config.k - len(ended), config, direction):
            halt(stopping, meters)
        return result

    firsts = [asyncio.ensure_future(watched(call)) for call in launch(first_name)]
    stopping += [asyncio.ensure_future(call) for call in launch(second_name, meters)]
    try:
        first = list(await asyncio.gather(*firsts))
    except BaseException:
        await runner.discard(stopping, meters)
        raise
    if settled(first, 0, config, direction):
        await runner.discard(stopping, meters)
        return ([], first, True) if gain else (first, [], True)
    second = list(await asyncio.gather(*stopping))
    return (second, first, False) if gain else (first, second, False)


async def _fixed(runner: _Runner, segment: Segment, direction: Direction) -> tuple[Verification, VerifyStats]:
    config, trajectory = runner.config, runner.trajectory
    pre_seeds, post_seeds = continuation_seeds(config, trajectory)
    skipped = False
    if config.curtail:
        pre, post, skipped = await _curtailed(runner, segment, pre_seeds, post_seeds, direction)
    else:
        results = await runner.pairs(segment, pre_seeds, post_seeds)
        pre, post = results[: config.k], results[config.k :]
    counts = _tally(pre, post)
    counts["policy_turns"] += runner.cancelled_turns
    waited = config.curtail and not skipped and (config.curtail_mode == "wait" or not metered(runner.continuer))
    stats = dict(
        sampling="fixed",
        rule=config.acceptance,
        direction=direction,
        budget=2 * config.k,
        fixed_budget=2 * config.k,
        spent=runner.spent,
        cancelled=runner.cancelled,
        rounds=2 if waited else 1,
        policy_rounds=runner.last_round,
        failures=_failures(pre + post),
    )
    second = ("pre" if direction == "gain" else "post") if skipped else None
    reason = _incomplete_reason(pre, post, config.required_finished, config.k, not_run=second)
    if reason is not None:
        return Verification(accepted=False, reason=reason, incomplete=True, **counts), VerifyStats(
            stop="incomplete", **stats
        )
    if skipped:
        first = "post" if direction == "gain" else "pre"
        successes, count = counts[f"{first}_successes"], counts[f"{first}_count"]
        _, why = best_case(successes, count, config, direction)
        fate = f"were stopped after {runner.cancelled_turns} policy turns" if runner.cancelled else "were not run"
        reason = (
            f"curtailed: {first} {successes}/{count}; even with 0/{config.k} at {second} it would be rejected "
            f"({why}), so the {config.k} {second} continuations {fate}"
        )
        return Verification(accepted=False, reason=reason, curtailed=True, **counts), VerifyStats(
            stop="curtailed", **stats
        )
    accepted, reason = accept(
        counts["pre_successes"], counts["pre_count"], counts["post_successes"], counts["post_count"], config, direction
    )
    return Verification(accepted=accepted, reason=reason, **counts), VerifyStats(stop="fixed", **stats)


async def _adaptive(runner: _Runner, segment: Segment, direction: Direction) -> tuple[Verification, VerifyStats]:
    config, trajectory = runner.config, runner.trajectory
    test = sequential_test(config)
    pre_seeds, post_seeds = continuation_seeds(config, trajectory, test.max_pairs)
    state = SequentialState(test)
    pre: list[Result] = []
    post: list[Result] = []
    rounds = 0
    decision = "continue"
    incomplete: str | None = None
    while decision == "continue":
        lo, hi = state.drawn, min(state.drawn + test.round_pairs, test.max_pairs)
        results = await runner.pairs(segment, pre_seeds[lo:hi], post_seeds[lo:hi])
        rounds += 1
        new_pre, new_post = results[: hi - lo], results[hi - lo :]
        pre += new_pre
        post += new_post
        for a, b in zip(new_pre, new_post, strict=True):
            ra = a.success if isinstance(a, Outcome) else None
            rb = b.success if isinstance(b, Outcome) else None
            state.add(*((ra, rb) if direction == "gain" else (rb, ra)))
        incomplete = _incomplete_reason(pre, post, max(1, state.drawn - config.allowed_failures), state.drawn)
        if incomplete is not None:
            decision = "incomplete"
            break
        decision = state.decide()
    counts = _tally(pre, post)
    stats = VerifyStats(
        sampling="adaptive",
        rule="sequential",
        direction=direction,
        budget=2 * test.max_pairs,
        fixed_budget=2 * config.k,
        spent=runner.spent,
        rounds=rounds,
        policy_rounds=runner.last_round,
        stop=decision,
        failures=_failures(pre + post),
        accept_evidence=state.accept_evidence,
        futility_evidence=state.futility_evidence,
    )
    if incomplete is not None:
        return Verification(accepted=False, reason=incomplete, incomplete=True, **counts), stats
    delta = (counts["post_successes"] / counts["post_count"]) - (counts["pre_successes"] / counts["pre_count"])
    sign = "+1/-1 pairs" if direction == "gain" else "drop pairs (pre won)/(post won)"
    reason = (
        f"{'drop: ' if direction == 'drop' else ''}Delta = {delta:+.3f} after {state.drawn} pairs ({sign} "
        f"{state.plus}/{state.minus}); stop: {decision}; e-value {state.accept_evidence:.2f} "
        f"{'>=' if decision == 'accept' else '<'} 1/alpha = {1 / test.alpha:.1f}"
    )
    return Verification(accepted=decision == "accept", reason=reason, **counts), stats


async def verify_segment(
    trajectory: Trajectory,
    segment: Segment,
    continuer: Continuer,
    config: ProverConfig,
    limit: asyncio.Semaphore | None = None,
) -> Verification:
    """Run continuations from each boundary of ``segment`` and apply the acceptance rule.

    With ``config.sampling == "fixed"`` (default) K run from each boundary; a boundary with fewer than
    ``config.required_finished`` finished continuations is not accepted and the first error is named
    in the reason. With ``config.strict`` the error is raised instead. See
    :func:`verify_segment_detailed` for the cost and stopping record.
    """
    verification, _ = await verify_segment_detailed(trajectory, segment, continuer, config, limit)
    return verification
