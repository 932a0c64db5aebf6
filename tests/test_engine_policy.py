"""EnginePolicy over OpenAICompletionsEngine against a real completions server on 127.0.0.1.

The server's model is deterministic (``shift_model``: ``[last + 1, last + 2]``; ``seed_model``: ``take``
iff the request's seed is odd), so every context the engine is sent is worked out by hand below.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from prover_core import ProverConfig, ReplayEnv, Segment, Trajectory, Turn, compute_bonus
from prover_core.continuations import env_continuer
from prover_core.errors import EngineError, ProverError
from prover_core.protocols import PolicyContext, Step, policy_rng
from prover_core.verify import continuation_seeds, verify_segment
from prover_engine import (
    EnginePolicy,
    Generation,
    OpenAICompletionsEngine,
    SamplingParams,
    TokenSequence,
    TokenStore,
    action_seed,
)
from prover_engine.errors import TokenRecordError
from tests.chat_server import Reply
from tests.completions_server import CompletionsServer
from tests.engine_support import FixedJudge, KeyEnv, key_group, parse, record, render, seed_model, store_of

WIN = ["wait", "take", "wait", "wait"]
PROMPT = [1, 2, 3, 100]  # SYSTEM + render((0, False))
COMPLETION = [50, 110, 51, 121, 50, 131, 50]  # wait, (1,F), take, (2,T), wait, (3,T), wait


def make_policy(server: CompletionsServer, store: TokenStore, **kw: Any) -> EnginePolicy:
    engine = OpenAICompletionsEngine(server.url, "test-model", backoff_s=0.0, timeout_s=5.0, max_attempts=2)
    return EnginePolicy(
        engine,
        store,
        render_observation=render,
        parse_action=parse,
        sampling=SamplingParams(max_tokens=2, temperature=1.0),
        **kw,
    )


def verify(policy: EnginePolicy, trajectory: Trajectory, config: ProverConfig) -> Any:
    continuer = env_continuer(ReplayEnv(lambda: KeyEnv(horizon=4)), policy, config.max_continuation_turns)
    return asyncio.run(
        verify_segment(
            trajectory, Segment(trajectory_id=trajectory.id, start=1, end=1), continuer, config.stages.verify
        )
    )


def sent(server: CompletionsServer) -> list[tuple[int, tuple[int, ...]]]:
    return sorted((body["seed"], tuple(body["prompt"])) for body in server.requests)


# -- the recorded tokens ---------------------------------------------------------------------------


def test_the_recorded_row_is_laid_out_as_worked_by_hand() -> None:
    trajectory, prompt, completion = record("a", "g", WIN)
    assert (prompt, completion) == (PROMPT, COMPLETION)
    assert [t.token_span for t in trajectory.turns] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    row = TokenSequence.of(prompt, completion)
    assert [row.context_before(trajectory, t) for t in range(4)] == [
        [1, 2, 3, 100],
        [1, 2, 3, 100, 50, 110],
        [1, 2, 3, 100, 50, 110, 51, 121],
        [1, 2, 3, 100, 50, 110, 51, 121, 50, 131],
    ]


def test_token_store_refuses_records_that_do_not_fit() -> None:
    trajectory, prompt, completion = record("a", "g", WIN)
    store = TokenStore()
    with pytest.raises(TokenRecordError, match=r"turn 3 of trajectory 'a' spans \(6, 7\), past the 6 recorded"):
        store.add(trajectory, prompt, completion[:-1])
    no_span = Trajectory(id="b", group_id="g", success=True, turns=[Turn(observation=0, action="x")])
    with pytest.raises(TokenRecordError, match="turn 0 of trajectory 'b' has no token span"):
        store.add(no_span, [1], [2])
    with pytest.raises(TokenRecordError, match="has no token span"):
        TokenSequence.of([1], [2]).context_before(no_span, 0)
    with pytest.raises(TokenRecordError, match="no recorded tokens for trajectory 'a'"):
        store.get("a")
    store.add(trajectory, np.array(prompt), completion)
    assert "a" in store and len(store) == 1 and store.get("a") == TokenSequence(tuple(prompt), tuple(completion))
    assert (
        store.get("a").digest()
        == TokenSequence.of(prompt, completion).digest()
        != TokenSequence.of(prompt, [1]).digest()
    )
    store.clear()
    assert "a" not in store and len(store) == 0
    assert issubclass(TokenRecordError, ProverError) and issubclass(TokenRecordError, ValueError)


# -- token-exact continuations ----------------------------------------------------------------------


def test_pre_and_post_continuations_send_exactly_the_hand_worked_contexts() -> None:
    """Pre (s_1): [ctx + 110] -> 111 112, obs (2,F) 120 -> 121 122, obs (3,F) 130 -> 131 132 (end, no key).
    Post (s_2): [ctx + 121] -> 122 123, obs (3,T) 131 -> 132 133 (end, key held)."""
    trajectory, prompt, completion = record("a", "g", WIN)
    pre = [
        [1, 2, 3, 100, 50, 110],
        [1, 2, 3, 100, 50, 110, 111, 112, 120],
        [1, 2, 3, 100, 50, 110, 111, 112, 120, 121, 122, 130],
    ]
    post = [
        [1, 2, 3, 100, 50, 110, 51, 121],
        [1, 2, 3, 100, 50, 110, 51, 121, 122, 123, 131],
    ]
    config = ProverConfig(k=3)
    seeds, _ = continuation_seeds(config.stages.verify, trajectory)
    with CompletionsServer() as server:
        policy = make_policy(server, store_of([(trajectory, prompt, completion)]))
        v = verify(policy, trajectory, config)
    assert (v.pre_successes, v.pre_count, v.post_successes, v.post_count, v.delta) == (0, 3, 3, 3, 1.0)
    expected = [(action_seed(s, j), tuple(ctx)) for s in seeds for j, ctx in [*enumerate(pre), *enumerate(post)]]
    assert sent(server) == sorted(expected)
    assert all(body["max_tokens"] == 2 and body["temperature"] == 1.0 for body in server.requests)
    assert (policy.stats.calls, policy.stats.generated_tokens, policy.stats.failures) == (15, 30, 0)
    assert policy.stats.prompt_tokens == 3 * sum(map(len, pre + post))


def test_replayed_choices_on_the_recorded_path_send_the_post_contexts_of_the_state_delta() -> None:
    """``delta_of="choices"`` on a deterministic environment: the post continuation restores s_1, replays the
    recorded ``take`` (no tokens generated), lands on the recorded s_2 and then sends exactly the contexts
    and seeds the post continuation from s_2 sends."""
    trajectory, prompt, completion = record("a", "g", WIN)
    config = ProverConfig(k=3)
    with CompletionsServer() as server:
        states = verify(make_policy(server, store_of([(trajectory, prompt, completion)])), trajectory, config)
    with CompletionsServer() as replaying:
        policy = make_policy(replaying, store_of([(trajectory, prompt, completion)]))
        choices = verify(policy, trajectory, config.model_copy(update={"delta_of": "choices"}))
    assert sent(replaying) == sent(server)
    assert (choices.pre_successes, choices.post_successes, choices.delta) == (states.pre_successes, 3, 1.0)
    assert policy.stats.calls == 15  # the replayed take is not a call


class SlipKeyEnv(KeyEnv):
    """``take`` at the key turn works as recorded until reseeded, then with probability 1/2."""

    rng: np.random.Generator | None = None

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def step(self, action: Any) -> Any:
        if action == "take" and self.t == self.key_turn and self.rng is not None and self.rng.random() >= 0.5:
            self.t += 1  # the key slipped away: (2, False) instead of the recorded (2, True)
            return Step((self.t, self.key), done=self.t >= self.horizon, success=False)
        return super().step(action)


def test_replayed_choices_off_the_recorded_path_continue_from_the_new_observation() -> None:
    """Off the path the first context is the recorded one with the recorded observation's tokens (121,
    key held) replaced by the new one's (120, no key): what the agent would have seen."""
    trajectory, prompt, completion = record("a", "g", WIN)
    config = ProverConfig(k=8, delta_of="choices")
    _, post_seeds = continuation_seeds(config.stages.verify, trajectory)
    slipped = sum(np.random.default_rng(s).random() >= 0.5 for s in post_seeds)
    with CompletionsServer() as server:
        policy = make_policy(server, store_of([(trajectory, prompt, completion)]))
        continuer = env_continuer(ReplayEnv(lambda: SlipKeyEnv(horizon=4)), policy, config.max_continuation_turns)
        v = asyncio.run(
            verify_segment(trajectory, Segment(trajectory_id="a", start=1, end=1), continuer, config.stages.verify)
        )
    firsts = [tuple(b["prompt"]) for b in server.requests if len(b["prompt"]) == 8 and b["prompt"][6] == 51]
    assert sorted(set(firsts)) == [(1, 2, 3, 100, 50, 110, 51, 120), (1, 2, 3, 100, 50, 110, 51, 121)]
    assert firsts.count((1, 2, 3, 100, 50, 110, 51, 120)) == slipped and 0 < slipped < 8
    assert v.post_successes == 8 - slipped  # the shift model never takes; only the replayed take can win


def test_pre_and_post_share_the_seed_of_their_jth_action_and_continuations_differ() -> None:
    trajectory, prompt, completion = record("a", "g", WIN)
    with CompletionsServer() as server:
        verify(make_policy(server, store_of([(trajectory, prompt, completion)])), trajectory, ProverConfig(k=4))
    by_boundary: dict[str, dict[int, set[int]]] = {"pre": {}, "post": {}}
    for body in server.requests:
        side = "post" if body["prompt"][6:7] == [51] else "pre"  # the recorded "take" is in the post context only
        j = (len(body["prompt"]) - (6 if side == "pre" else 8)) // 3
        by_boundary[side].setdefault(j, set()).add(body["seed"])
    pre, post = by_boundary["pre"], by_boundary["post"]
    assert post[0] == pre[0] and post[1] == pre[1]  # common random numbers, action by action
    assert len(pre[0]) == 4 and len(pre[1]) == 4 and len(pre[2]) == 4  # four continuations, four seeds
    assert not pre[0] & pre[1] and not pre[1] & pre[2]  # a new seed for every action


def test_unpaired_seeds_give_pre_and_post_their_own_seeds() -> None:
    trajectory, prompt, completion = record("a", "g", WIN)
    with CompletionsServer() as server:
        verify(
            make_policy(server, store_of([(trajectory, prompt, completion)])),
            trajectory,
            ProverConfig(k=4, paired_seeds=False),
        )
    pre = {b["seed"] for b in server.requests if b["prompt"][6:7] != [51]}
    post = {b["seed"] for b in server.requests if b["prompt"][6:7] == [51]}
    assert len(pre) == 12 and len(post) == 8 and not pre & post


def test_action_seed_is_stable_31_bit_and_distinct_per_action() -> None:
    seeds = [action_seed(s, j) for s in (0, 1, 2**32 - 1) for j in range(4)]
    assert seeds == [action_seed(s, j) for s in (0, 1, 2**32 - 1) for j in range(4)]
    assert len(set(seeds)) == 12 and all(0 <= x < 2**31 for x in seeds)


@pytest.mark.parametrize("limit", [3, 8])
def test_the_server_sees_up_to_max_concurrency_requests_at_once_and_never_more(limit: int) -> None:
    trajectory, prompt, completion = record("a", "g", WIN)
    with CompletionsServer(latency_s=0.4) as server:  # long enough for all requests to overlap on a busy machine
        policy = make_policy(server, store_of([(trajectory, prompt, completion)]), max_concurrency=limit)
        verify(policy, trajectory, ProverConfig(curtail=False, k=4))  # 8 continuations start together
    assert server.max_in_flight == limit


# -- the policy's own checks ------------------------------------------------------------------------


def context(trajectory: Trajectory | None, history: tuple[Turn, ...], boundary: int | None) -> PolicyContext:
    return PolicyContext(trajectory, history, (1, False), {}, 7, policy_rng(7), boundary)


def test_the_policy_refuses_a_context_it_cannot_continue_exactly() -> None:
    trajectory, prompt, completion = record("a", "g", WIN)
    with CompletionsServer() as server:
        policy = make_policy(server, store_of([(trajectory, prompt, completion)]))
        with pytest.raises(EngineError, match="recorded trajectories only"):
            asyncio.run(policy.act(context(None, (), None)))
        skipped = (*trajectory.turns[:1], Turn(observation=(1, False), action="wait"))
        with pytest.raises(EngineError, match=r"asked for action 1 but its context holds 0 actions"):
            asyncio.run(policy.act(context(trajectory, skipped, 1)))
        with pytest.raises(TokenRecordError, match="no recorded tokens"):
            asyncio.run(policy.act(context(trajectory.model_copy(update={"id": "zz"}), trajectory.turns[:1], 1)))
    assert server.requests == []


class SyncEngine:
    """A blocking engine (run in a thread by the policy); returns one fixed answer."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.prompts: list[list[int]] = []

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> object:
        self.prompts.append(list(prompt_ids))
        return self.answer


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (Generation((51,)), None),
        (Generation(()), "generated no tokens"),
        ([51], "must return a Generation"),
        (Generation((51, -2)), "invalid token ids"),
    ],
)
def test_a_blocking_engine_works_and_bad_answers_are_engine_errors(answer: object, match: str | None) -> None:
    trajectory, prompt, completion = record("a", "g", WIN)
    engine = SyncEngine(answer)
    policy = EnginePolicy(
        engine, store_of([(trajectory, prompt, completion)]), render_observation=render, parse_action=parse
    )
    act = policy.act(context(trajectory, trajectory.turns[:1], 1))
    if match is None:
        assert asyncio.run(act) == "take" and engine.prompts == [[1, 2, 3, 100, 50, 110]]
    else:
        with pytest.raises(EngineError, match=match):
            asyncio.run(act)
        assert policy.stats.failures == 1


# -- compute_bonus end to end -----------------------------------------------------------------------


def batch() -> tuple[list[Trajectory], TokenStore]:
    """Group g: 2 of 8 take the key (eligible); group h: none does (not eligible)."""
    rows = key_group("g", successes=2) + key_group("h", successes=0)
    return [t for t, _, _ in rows], store_of(rows)


def bonus(server: CompletionsServer, config: ProverConfig, **policy_kw: Any) -> Any:
    trajectories, store = batch()
    policy = make_policy(server, store, **policy_kw)
    policy.sampling = SamplingParams(max_tokens=1)
    env = ReplayEnv(lambda: KeyEnv(horizon=4))
    return compute_bonus(trajectories, judge=FixedJudge(1, 1), env=env, policy=policy, config=config)


GRPO = {**{f"g-{i}": (0.75 if i < 2 else -0.25) for i in range(8)}, **{f"h-{i}": 0.0 for i in range(8)}}


def test_compute_bonus_through_the_engine_credits_the_exact_delta() -> None:
    """Pre continuations (s_1, key still on the floor) succeed iff their first action is ``take``, i.e.
    iff ``action_seed(seed_i, 0)`` is odd; post continuations (key held) always succeed."""
    config = ProverConfig(k=8, seed=3)
    pre_seeds, _ = continuation_seeds(config.stages.verify, batch()[0][0])  # g-0, the representative success
    takes = sum(action_seed(s, 0) % 2 for s in pre_seeds)
    assert 0 < takes < 8, "pick a config seed where the pre rate is strictly between 0 and 1"
    with CompletionsServer(seed_model) as server:
        result = bonus(server, config)
    record_g = next(g for g in result.report.groups if g.group_id == "g")
    v = record_g.verification
    assert record_g.status == "accepted" and record_g.trajectory_id == "g-0"
    assert (v.pre_successes, v.pre_count, v.post_successes, v.post_count) == (takes, 8, 8, 8)
    assert v.policy_turns == len(server.requests) == 8 * 3 + 8 * 2  # pre: turns 1-3, post: turns 2-3
    assert {b["seed"] for b in server.requests if len(b["prompt"]) == 6} == {action_seed(s, 0) for s in pre_seeds}
    assert result.advantages == GRPO
    np.testing.assert_array_equal(result.turn_bonus["g-0"], [0.0, 1.0 - takes / 8, 0.0, 0.0])
    assert all(not result.turn_bonus[t].any() for t in GRPO if t != "g-0")


@pytest.mark.parametrize(
    ("faults", "policy_kw", "why", "kind"),
    [
        (lambda b, i: Reply(status=500, body="CUDA error"), {}, "EngineHTTPError", "error"),
        (lambda b, i: Reply(body="{oops"), {}, "EngineResponseError", "error"),
        (lambda b, i: Reply(body={"choices": [{"text": "", "token_ids": []}]}), {}, "generated no tokens", "error"),
        (lambda b, i: Reply(delay_s=1.0), {"timeout_s": 0.2}, "EngineTimeoutError", "timeout"),
    ],
    ids=["http-500", "malformed-json", "empty-generation", "timeout"],
)
def test_a_failing_engine_is_a_recorded_skip_and_grpo_credit_stays(
    faults: Any, policy_kw: dict[str, Any], why: str, kind: str
) -> None:
    with CompletionsServer(seed_model, faults=faults) as server:
        result = bonus(server, ProverConfig(k=8), **policy_kw)
    record_g = next(g for g in result.report.groups if g.group_id == "g")
    assert (record_g.status, record_g.stage) == ("skipped", "verify")
    # the default curtails: the post boundary runs first, fails, and the pre boundary never reaches the server
    assert why in record_g.reason and "too few finished continuations (pre not run, post 0/8" in record_g.reason
    assert record_g.verify_stats is not None and record_g.verify_stats.failures == {kind: 8}
    assert result.report.summary() == {
        "not_eligible": 1,
        "unverified": 0,
        "declined": 0,
        "skipped": 1,
        "rejected": 0,
        "accepted": 0,
    }
    assert result.advantages == GRPO
    assert all(not b.any() for b in result.turn_bonus.values())
