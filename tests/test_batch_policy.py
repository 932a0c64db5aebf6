"""One round for every caller: a policy that declares ``act_batch`` (:class:`~prover_core.protocols.BatchPolicy`) is
served one call per round of continuations across the whole batch, so verification's sequential policy calls
(``prover/verify_policy_rounds``) are no more than its longest continuation's turns; and the continuer is built, and
its parts checked, in one place (:func:`~prover_core.continuations.make_continuer`)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from prover_core import ChoiceJudge, LocalExecutor, ProverConfig, SnapshotEnv, compute_bonus
from prover_core._aio import MAX_BLOCKED_THREADS, blocked_threads
from prover_core.batching import BatchedPolicy, Batcher
from prover_core.bonus import BonusResult
from prover_core.clock import METER, Meter
from prover_core.continuations import Metered, env_continuer, hook_continuer, make_continuer, metered
from prover_core.demo import MDPEnv, VaultBatchPolicy, VaultMDP, vault_policy
from prover_core.demo.run import rollout_batch
from prover_core.errors import ProtocolError, ThreadsExhaustedError
from prover_core.protocols import BatchPolicy, Policy, PolicyContext, Step, policy_rng
from prover_core.restore import ReplayEnv

BATCH = rollout_batch(VaultMDP(), groups=8, group_size=8, seed=0)


def make_env() -> MDPEnv:
    return MDPEnv(VaultMDP())


class Recording:
    """A batch policy that records every call: the batch sizes and each continuation's turns."""

    def __init__(self) -> None:
        self.policy = vault_policy()
        self.sizes: list[int] = []
        self.turns: Counter[tuple[str, int | None, int]] = Counter()

    def act_batch(self, contexts: Sequence[PolicyContext]) -> list[str]:
        self.sizes.append(len(contexts))
        for c in contexts:
            assert c.trajectory is not None
            self.turns[(c.trajectory.id, c.boundary, c.seed)] += 1
        return [self.policy.act(c) for c in contexts]


class AsyncRecording(Recording):
    async def act_batch(self, contexts: Sequence[PolicyContext]) -> list[str]:  # type: ignore[override]
        await asyncio.sleep(0)  # a served model: the answer comes later
        return super().act_batch(contexts)


def run(policy: Any, **config: Any) -> BonusResult:
    return compute_bonus(
        BATCH, judge=ChoiceJudge(), env=SnapshotEnv(make_env), policy=policy, config=ProverConfig(k=4, **config)
    )


@pytest.mark.parametrize("kind", [Recording, AsyncRecording])
def test_a_batch_policy_makes_one_call_per_round_no_more_than_the_longest_continuation(kind: type[Recording]) -> None:
    policy = kind()
    result = run(policy)
    m = result.report.metrics(prefix="")
    longest = max(policy.turns.values())
    assert isinstance(policy, BatchPolicy) and not isinstance(policy, Policy)
    assert m["groups_accepted"] >= 3
    # every call serves a round of every continuation still running: as many calls as the clock's rounds
    assert len(policy.sizes) == m["verify_policy_rounds"] <= longest
    assert sum(policy.sizes) == m["policy_turns"] and max(policy.sizes) > 2 * 4  # several groups in one call


def test_the_same_decisions_and_outcomes_as_one_context_at_a_time() -> None:
    """Each context samples from its own seeded stream: batching changes the schedule, never the numbers."""
    batched, plain = run(VaultBatchPolicy()), run(vault_policy())
    assert [g.verification for g in batched.report.groups] == [g.verification for g in plain.report.groups]
    mb, mp = batched.report.metrics(prefix=""), plain.report.metrics(prefix="")
    # a plain act: one call after another, the sum of the continuations' turns (the README's 470 against 15)
    assert mp["verify_policy_rounds"] == mp["policy_turns"] > 20 * mb["verify_policy_rounds"]


def test_a_batch_policy_under_a_time_limit_still_batches() -> None:
    """With ``continuation_timeout_s`` synchronous env calls run in threads; ``act_batch`` stays on the loop. A
    round's steps then end at different moments, so a round may take a few calls, never one per continuation."""
    policy = Recording()
    m = run(policy, continuation_timeout_s=30.0).report.metrics(prefix="")
    assert m["verify_policy_rounds"] <= max(policy.turns.values())
    assert len(policy.sizes) <= 3 * m["verify_policy_rounds"] < m["policy_turns"] / 10


def test_an_executor_serves_a_batch_policy_too() -> None:
    policy = Recording()
    executor = LocalExecutor(SnapshotEnv(make_env), policy, max_turns=100)
    result = compute_bonus(BATCH, judge=ChoiceJudge(), executor=executor, config=ProverConfig(k=4))
    m = result.report.metrics(prefix="")
    assert m["groups_accepted"] >= 3 and len(policy.sizes) == m["verify_policy_rounds"]


@pytest.mark.parametrize("extra", [-1, 1], ids=["one-too-few", "one-too-many"])
def test_a_batch_answer_of_the_wrong_length_fails_each_continuation_of_that_call(extra: int) -> None:
    class WrongLength:
        def act_batch(self, contexts: Sequence[PolicyContext]) -> list[str]:
            return ["wait"] * (len(contexts) + extra)

    result = run(WrongLength())
    skipped = [g for g in result.report.groups if g.status == "skipped"]
    assert skipped and all("ValueError: a batched call answered" in g.reason for g in skipped)


# --- the batcher: each answer to its own request, a wrong count to nobody ------------------------------


def sync_call(answers: Callable[[list[str]], list[str]]) -> Callable[[list[str]], list[str]]:
    return answers


def async_call(answers: Callable[[list[str]], list[str]]) -> Callable[[list[str]], Awaitable[list[str]]]:
    async def call(items: list[str]) -> list[str]:
        await asyncio.sleep(0)  # a served model: the answer comes later
        return answers(items)

    return call


CALLS = pytest.mark.parametrize("wrap", [sync_call, async_call], ids=["sync", "async"])


async def ask_all(batcher: Batcher[str, str], items: Sequence[str]) -> list[Any]:
    """Every item submitted in one pass of the loop; each caller's answer or exception, in order."""
    return await asyncio.gather(*(batcher.submit(x) for x in items), return_exceptions=True)


@CALLS
def test_each_request_of_a_batch_gets_the_answer_at_its_own_position(wrap: Any) -> None:
    """Distinct answers that do not depend on the requests: only the position can carry them to their caller."""
    batcher: Batcher[str, str] = Batcher(wrap(lambda items: ["first", "middle", "last"]))
    assert asyncio.run(ask_all(batcher, ["x", "y", "z"])) == ["first", "middle", "last"]
    assert (batcher.calls, batcher.rows) == (1, 3)


@CALLS
@pytest.mark.parametrize("answered", [2, 4], ids=["one-too-few", "one-too-many"])
def test_a_batched_call_that_answers_one_too_few_or_one_too_many_is_refused_to_every_caller(
    wrap: Any, answered: int
) -> None:
    """Three requests, 2 or 4 answers: no caller gets an answer that may be someone else's; each gets the
    ``ValueError`` that ``_settle`` documents (a wrong count of answers is an exception of the call)."""
    batcher: Batcher[str, str] = Batcher(wrap(lambda items: [f"answer {i}" for i in range(answered)]))
    results = asyncio.run(ask_all(batcher, ["x", "y", "z"]))
    assert [type(r) for r in results] == [ValueError] * 3
    assert {str(r) for r in results} == {f"a batched call answered {answered} of 3 requests"}


@CALLS
def test_a_batched_call_that_answers_an_empty_list_to_one_request_is_refused(wrap: Any) -> None:
    batcher: Batcher[str, str] = Batcher(wrap(lambda items: []))
    [result] = asyncio.run(ask_all(batcher, ["x"]))
    assert isinstance(result, ValueError) and str(result) == "a batched call answered 0 of 1 requests"


def answer_each(items: list[str]) -> list[str]:
    return [f"answer to {x}" for x in items]


@CALLS
@pytest.mark.parametrize("how", ["cancelled", "stopped"])
def test_a_row_left_out_of_the_batch_shifts_no_answer(wrap: Any, how: str) -> None:
    """Five requests; the middle one's caller is cancelled, or its continuation's meter stopped, before the batch
    is sent: the call serves the other four, in order, and each of them gets its own answer."""
    sent: list[list[str]] = []

    def record(items: list[str]) -> list[str]:
        sent.append(list(items))
        return answer_each(items)

    batcher: Batcher[str, str] = Batcher(wrap(record))
    submitted: list[str] = []

    async def ask(item: str) -> str:
        if item == "c" and how == "stopped":
            METER.set(Meter(stopped=True))  # this task's own context: verification no longer needs it
        submitted.append(item)  # submit appends the request before it first waits
        return await batcher.submit(item)

    async def main() -> list[Any]:
        tasks = [asyncio.ensure_future(ask(x)) for x in "abcde"]
        await asyncio.sleep(0)  # every task has submitted; the batch is not sent yet
        assert submitted == list("abcde") and not sent
        if how == "cancelled":
            tasks[2].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(main())
    assert sent == [["a", "b", "d", "e"]] and batcher.rows == 4
    assert results[:2] + results[3:] == ["answer to a", "answer to b", "answer to d", "answer to e"]
    assert isinstance(results[2], asyncio.CancelledError)


def test_a_caller_cancelled_while_an_async_call_runs_shifts_no_answer() -> None:
    """Five requests in the call; the middle caller is cancelled while the call is in flight: its answer is
    dropped, and the others still get the answers at their own positions."""
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(items: list[str]) -> list[str]:
        started.set()
        await release.wait()
        return answer_each(items)

    async def main() -> tuple[list[Any], Batcher[str, str]]:
        batcher: Batcher[str, str] = Batcher(slow)
        tasks = [asyncio.ensure_future(batcher.submit(x)) for x in "abcde"]
        await started.wait()
        tasks[2].cancel()
        await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(*tasks, return_exceptions=True), batcher

    results, batcher = asyncio.run(main())
    assert batcher.rows == 5 and isinstance(results[2], asyncio.CancelledError)
    assert results[:2] + results[3:] == ["answer to a", "answer to b", "answer to d", "answer to e"]


def test_a_batched_policy_answers_each_context_with_its_own_action() -> None:
    """:class:`BatchedPolicy` over an ``act_batch`` that answers by position: each ``act`` gets its row."""

    class ByPosition:
        def act_batch(self, contexts: Sequence[PolicyContext]) -> list[str]:
            return [f"row {i}" for i in range(len(contexts))]

    policy = BatchedPolicy(ByPosition())

    async def main() -> list[Any]:
        contexts = [PolicyContext(None, (), f"o{i}", {}, i, policy_rng(i)) for i in range(3)]
        return await asyncio.gather(*(policy.act(c) for c in contexts))

    assert asyncio.run(main()) == ["row 0", "row 1", "row 2"]


# --- the continuer in one place ---------------------------------------------------------------------


def test_the_continuer_declares_whether_it_is_metered() -> None:
    """``metered`` is declared (:class:`Metered`, checked with isinstance), never guessed."""
    env_run = env_continuer(ReplayEnv(make_env), vault_policy(), 10)
    hook = hook_continuer(lambda t, turn, seed: True)
    assert isinstance(env_run, Metered) and metered(env_run)
    assert isinstance(hook, Metered) and not metered(hook)
    assert metered(LocalExecutor(ReplayEnv(make_env), vault_policy()))
    assert not metered(LocalExecutor(continue_from=lambda t, turn, seed: True))

    async def users_own(trajectory: Any, turn: int, seed: int) -> Any:  # declares nothing: not metered
        raise AssertionError

    assert not isinstance(users_own, Metered) and not metered(users_own)


@pytest.mark.parametrize(
    "kwargs, text",
    [
        (dict(env=SnapshotEnv(make_env), policy=VaultBatchPolicy), "policy must be an object, not a class"),
        (dict(env=SnapshotEnv, policy=vault_policy()), "env must be an object, not a class"),
        (dict(env=make_env(), policy=vault_policy()), "ReplayEnv"),
        (dict(env=SnapshotEnv(make_env), policy=3), r"act\(context\) or act_batch\(contexts\)"),
        (dict(continue_from=3), "continue_from must be callable"),
        (dict(executor=LocalExecutor), "executor must be callable"),
    ],
)
def test_compute_bonus_and_the_executors_refuse_the_same_mistakes_alike(kwargs: dict[str, Any], text: str) -> None:
    with pytest.raises(ProtocolError, match=text):
        compute_bonus(BATCH, judge=ChoiceJudge(), **kwargs)
    if "executor" not in kwargs:
        with pytest.raises(ProtocolError, match=text):
            LocalExecutor(**kwargs)
    with pytest.raises(ProtocolError, match=text):
        make_continuer(**kwargs, max_turns=10)


def test_a_judge_passed_as_its_class_is_refused_at_once() -> None:
    with pytest.raises(ProtocolError, match=r"judge must be an object, not a class.*judge=ChoiceJudge\(\)"):
        compute_bonus(BATCH, judge=ChoiceJudge, env=SnapshotEnv(make_env), policy=vault_policy())  # type: ignore[arg-type]


# --- a synchronous environment that hangs does not pile up threads ------------------------------------


class Hangs:
    """A plain environment whose step blocks, a fresh gate per test (opened at its end)."""

    gate = threading.Event()

    def __init__(self) -> None:
        self.inner = make_env()

    def reset(self, spec: Mapping[str, Any]) -> Step:
        return self.inner.reset(spec)

    def step(self, action: Any) -> Step:
        self.gate.wait(60)
        return self.inner.step(action)


def live_threads() -> int:
    return sum(t.name == "prover-user-code" for t in threading.enumerate())


def test_ten_calls_whose_environment_hangs_hold_a_bounded_number_of_threads() -> None:
    """Before: +8 abandoned threads per call (one per continuation), +80 after ten. Now the first call's
    continuations stay blocked (the limit cannot know a call will hang) and, with ``MAX_BLOCKED_THREADS`` of them
    blocked, every later continuation is refused at once, the cause named: no call adds a thread."""
    Hangs.gate = threading.Event()
    before = live_threads()
    config = ProverConfig(k=4, continuation_timeout_s=0.05)
    results, counts = [], []
    try:
        for _ in range(10):
            env = ReplayEnv(Hangs)
            results.append(compute_bonus(BATCH, judge=ChoiceJudge(), env=env, policy=vault_policy(), config=config))
            counts.append(blocked_threads())
            # the live ones are the blocked ones, give or take a judge's thread that is just ending
            assert live_threads() - before <= counts[-1] + 2
        first = results[0].report.metrics(prefix="")["continuations"]
        assert MAX_BLOCKED_THREADS <= counts[0] <= first and counts == [counts[0]] * 10, counts
        reasons = [g.reason for g in results[-1].report.groups if g.status == "skipped"]
        assert len(reasons) == 7 and all(
            f"first error: {ThreadsExhaustedError.__name__}: {counts[0]} threads abandoned at their time limit are "
            "still blocked in a continuation of ReplayEnv with TabularPolicy" in r
            for r in reasons
        )
    finally:
        Hangs.gate.set()
    deadline = time.monotonic() + 30
    while blocked_threads() and time.monotonic() < deadline:  # once the gate opens, the threads end
        time.sleep(0.05)
    assert blocked_threads() == 0


def test_an_unknown_trajectory_id_is_a_key_error_that_names_the_batchs_ids() -> None:
    result = run(vault_policy())
    asks = [lambda: result.token_advantages("nope", 10), lambda: result.turn_advantages("nope")]
    asks += [lambda: result.token_bonus("nope", 10), lambda: result.bonus_matrix(["g00-0", "nope"], 1000)]
    for ask in asks:
        with pytest.raises(KeyError, match=r"no trajectory 'nope' in this batch; its ids are 'g00-0', 'g00-1', "):
            ask()
    with pytest.raises(KeyError, match=r"\(64 in all\)"):
        result.token_advantages("nope", 10)


def test_verification_takes_one_round_at_a_batch_size_past_the_former_limit() -> None:
    """``benchmarks/verify_rounds.py`` at 128 groups of 8 (792 continuations): with the default
    (``max_concurrency=None``, every continuation in flight) verification's rounds of policy calls stay within the
    rollout's plus one; with 256 in flight, the former default, the waves add rounds."""
    from tests.conftest import load_script

    bench = load_script(Path(__file__).resolve().parents[1] / "benchmarks" / "verify_rounds.py", "verify_rounds")
    rollout, default, spent, _ = bench.rounds(128, 4, None)
    _, limited, _, _ = bench.rounds(128, 4, 256)
    assert spent > 256 and default <= rollout + 1 < limited
    assert ProverConfig().stages.verify.concurrency_for(3) == 2 * 4 * 3  # 2 k per group
    assert ProverConfig(sampling="adaptive").stages.verify.concurrency_for(3) == 2 * 6 * 3  # 2 ceil(1.5 k)
    assert ProverConfig(max_concurrency=7).stages.verify.concurrency_for(3) == 7
