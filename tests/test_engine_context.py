"""What EnginePolicy puts around an action: a chat template's end-of-turn (close_action, the record check),
and the room left within max_model_len. Against the vLLM-shaped loopback server, contexts worked by hand."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from prover_core import ProverConfig, ReplayEnv, Segment, Trajectory, Turn
from prover_core.continuations import env_continuer
from prover_core.errors import EngineError
from prover_core.verify import continuation_seeds, verify_segment
from prover_engine import (
    EnginePolicy,
    Generation,
    OpenAICompletionsEngine,
    SamplingParams,
    TokenSequence,
    action_seed,
    check_record,
    close_turn,
)
from prover_engine.errors import ContextLengthError, EngineHTTPError, TokenRecordError
from tests.completions_server import CompletionsServer
from tests.engine_support import (
    SYSTEM,
    KeyEnv,
    key_group,
    parse,
    record,
    render,
    seed_model,
    store_of,
    verify_key_group,
)

EOT = 7  # the chat template's end-of-turn id (ChatML's <|im_end|>)
CHATML = close_turn([EOT])
WIN = ["wait", "take", "wait", "wait"]


def chat_record(
    generated: list[list[int]], tid: str = "a", stray: dict[int, list[int]] | None = None
) -> tuple[Trajectory, list[int], list[int]]:
    """A rollout through a chat template: each action's generated ids, then EOT unless the model stopped on
    it, then ``stray[t]`` (ids the rollout appended that no rule reproduces), then the observation. Spans cover the
    generated ids only."""
    env = KeyEnv(horizon=len(generated))
    step = env.reset({})
    prompt = [*SYSTEM, *render(step.observation)]
    completion: list[int] = []
    turns = []
    for t, ids in enumerate(generated):
        start = len(completion)
        completion += ids
        action = parse(Generation(tuple(ids)))
        turns.append(Turn(observation=step.observation, action=action, token_span=(start, len(completion))))
        step = env.step(action)
        if not step.done:
            completion += [*CHATML(Generation(tuple(ids))), *(stray or {}).get(t, []), *render(step.observation)]
    return Trajectory(id=tid, group_id="g", turns=turns, success=step.success), prompt, completion


# turn 0 stopped on EOT, turn 1 ran into the token limit (no EOT generated: the template adds one)
GENERATED = [[50, EOT], [51, 51], [50, EOT], [50, 50]]
PROMPT = [1, 2, 3, 100]
COMPLETION = [50, EOT, 110, 51, 51, EOT, 121, 50, EOT, 131, 50, 50]


def policy_of(server: CompletionsServer, rows: Any, **kw: Any) -> EnginePolicy:
    engine = OpenAICompletionsEngine(server.url, "m", backoff_s=0.0, timeout_s=5.0, max_attempts=1)
    kw.setdefault("sampling", SamplingParams(max_tokens=2))
    return EnginePolicy(engine, store_of(rows), render_observation=render, parse_action=parse, **kw)


def verify(policy: EnginePolicy, trajectory: Trajectory, config: ProverConfig) -> Any:
    continuer = env_continuer(ReplayEnv(lambda: KeyEnv(horizon=4)), policy, config.max_continuation_turns)
    segment = Segment(trajectory_id=trajectory.id, start=1, end=1)
    return asyncio.run(verify_segment(trajectory, segment, continuer, config.stages.verify))


def test_the_chat_record_is_laid_out_as_worked_by_hand() -> None:
    trajectory, prompt, completion = chat_record(GENERATED)
    assert (prompt, completion) == (PROMPT, COMPLETION)
    assert [t.token_span for t in trajectory.turns] == [(0, 2), (3, 5), (7, 9), (10, 12)]
    assert trajectory.success


def test_close_turn_appends_the_end_of_turn_only_when_the_model_did_not_stop_on_it() -> None:
    assert CHATML(Generation((51, 51))) == (EOT,)
    assert CHATML(Generation((51, EOT))) == ()
    two = close_turn([EOT, 198])  # end-of-turn and newline
    assert two(Generation((5, EOT, 198))) == () and two(Generation((5, EOT))) == (EOT, 198)
    with pytest.raises(ValueError, match="at least one"):
        close_turn([])


def test_check_record_finds_the_turn_where_the_rollout_appended_an_end_of_turn_the_rule_omits() -> None:
    trajectory, prompt, completion = chat_record(GENERATED)
    record = TokenSequence.of(prompt, completion)
    check_record(record, trajectory, render, CHATML)  # the rollout's own rule reproduces it
    with pytest.raises(TokenRecordError, match=r"after turn 1's action the rollout appended \[7, 121\], a "):
        check_record(record, trajectory, render)  # default: nothing follows an action
    with pytest.raises(TokenRecordError, match=r"after turn 0's action the rollout appended \[110\]"):
        check_record(record, trajectory, render, close_turn([EOT, 9]))


def stopping_model(prompt: list[int], body: dict[str, Any]) -> list[int]:
    """Odd seed: ``take`` then stop on EOT; even seed: ``wait wait EOT`` (cut at max_tokens=2: no EOT)."""
    return [51, EOT] if int(body["seed"]) % 2 else [50, 50, EOT]


def test_continuations_close_every_action_exactly_once_as_the_rollout_did() -> None:
    """Defect (a) of issue 19. Pre (boundary 1) and post (boundary 2) continuations; each action is
    ``[51, EOT]`` (stopped) or ``[50, 50]`` (length), and the next context holds the action closed once."""
    trajectory, prompt, completion = chat_record(GENERATED)
    config = ProverConfig(k=2, seed=5)
    seeds, _ = continuation_seeds(config.stages.verify, trajectory)
    with CompletionsServer(stopping_model, eos_token_id=EOT) as server:
        policy = policy_of(server, [(trajectory, prompt, completion)], close_action=CHATML)
        v = verify(policy, trajectory, config)
    assert policy.stats.failures == 0 and v.pre_count == v.post_count == 2

    def closed(seed: int, j: int) -> list[int]:
        return [51, EOT] if action_seed(seed, j) % 2 else [50, 50, EOT]

    expected = []
    for s in seeds:
        for start, observations in ((3, [120, 130]), (7, [130])):  # (a_b, observations after it, key not held)
            context = [*PROMPT, *COMPLETION[:start]]
            held = start == 7  # the post continuation starts with the key held
            for j in range(len(observations) + 1):
                expected.append((action_seed(s, j), tuple(context)))
                if j < len(observations):
                    took = j == 0 and not held and action_seed(s, 0) % 2 == 1
                    held = held or took
                    context = [*context, *closed(s, j), observations[j] + int(held)]
    got = sorted((b["seed"], tuple(b["prompt"])) for b in server.requests)
    assert got == sorted(expected)


RECORDED_PREFIXES = {(*PROMPT, *COMPLETION[:3]), (*PROMPT, *COMPLETION[:7])}  # boundaries 1 and 2


def test_without_the_rollouts_rule_every_continuation_fails_before_its_own_first_context() -> None:
    trajectory, prompt, completion = chat_record(GENERATED)
    with CompletionsServer(lambda p, b: [50, 50, EOT], eos_token_id=EOT) as server:
        policy = policy_of(server, [(trajectory, prompt, completion)])
        v = verify(policy, trajectory, ProverConfig(curtail=False, k=2))
        assert {tuple(b["prompt"]) for b in server.requests} == RECORDED_PREFIXES  # action 0 only
        assert len(server.requests) == 4
        server.requests.clear()
        unchecked = policy_of(server, [(trajectory, prompt, completion)], check_contexts=False)
        verify(unchecked, trajectory, ProverConfig(curtail=False, k=2))
    assert (v.pre_count, v.post_count) == (0, 0)
    # unchecked, a continuation whose first action hit the limit sends a context without its EOT
    assert any(b["prompt"][7:10] == [50, 50, 120] for b in server.requests)


def test_a_mismatched_record_is_a_recorded_skip_in_compute_bonus() -> None:
    rows = [chat_record(GENERATED, "g-0"), *key_group("g", successes=0)[1:]]
    with CompletionsServer(stopping_model, eos_token_id=EOT) as server:
        policy = EnginePolicy(
            OpenAICompletionsEngine(server.url, "m", backoff_s=0.0, max_attempts=1),
            store_of(rows), render_observation=render, parse_action=parse, sampling=SamplingParams(max_tokens=2),
        )  # fmt: skip
        result = verify_key_group(rows, policy, ProverConfig(k=4, curtail=False))
    (group,) = result.report.groups
    assert (group.status, group.stage) == ("skipped", "verify")
    assert "TokenRecordError" in group.reason and "the rollout appended [7, 121]" in group.reason
    assert {tuple(b["prompt"]) for b in server.requests} == RECORDED_PREFIXES and len(server.requests) == 8


# -- max_model_len ----------------------------------------------------------------------------------


class NoEngine:
    def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        raise AssertionError("not called")


def test_the_room_left_caps_max_tokens_and_a_full_context_fails_before_sending() -> None:
    policy = EnginePolicy(NoEngine(), store_of([]), render_observation=render, max_model_len=10)
    params = SamplingParams(max_tokens=4, seed=3)
    assert policy.fit(6, params) == params
    assert policy.fit(7, params) == replace(params, max_tokens=3) and policy.stats.clamped == 1
    assert policy.fit(9, params).max_tokens == 1
    with pytest.raises(ContextLengthError, match=r"holds 10 tokens, which leaves no room .* max_model_len=10"):
        policy.fit(10, params)
    assert policy.stats.failures == 1 and issubclass(ContextLengthError, EngineError)
    with pytest.raises(ValueError, match="max_model_len"):
        EnginePolicy(policy.engine, store_of([]), render_observation=render, max_model_len=1)


def test_vllm_refuses_a_context_past_max_model_len_and_the_clamped_policy_fits_it() -> None:
    """Item 5 of issue 19. shift_model, max_tokens 2, record WIN: the pre continuation's third context holds
    12 tokens; with max_model_len 13 vLLM refuses 12 + 2 with a 400, the clamped policy asks for 1 token."""
    trajectory, prompt, completion = record("a", "g", WIN)
    rows = [(trajectory, prompt, completion)]
    config = ProverConfig(k=1)
    with CompletionsServer(max_model_len=13) as server:
        v = verify(policy_of(server, rows), trajectory, config)
        assert v.pre_count == 0 and v.post_count == 1
        refused = [b for b in server.requests if len(b["prompt"]) == 12]
        assert len(refused) == 1 and refused[0]["max_tokens"] == 2
        server.requests.clear()
        policy = policy_of(server, rows, max_model_len=13)
        v = verify(policy, trajectory, config)
        assert (v.pre_count, v.post_count, policy.stats.clamped, policy.stats.failures) == (1, 1, 1, 0)
        sizes = sorted((len(b["prompt"]), b["max_tokens"]) for b in server.requests)
        assert sizes == [(6, 2), (8, 2), (9, 2), (11, 2), (12, 1)]
        with pytest.raises(EngineHTTPError, match="maximum context length is 13"):
            asyncio.run(OpenAICompletionsEngine(server.url, "m").generate([1] * 12, SamplingParams(max_tokens=2)))


def test_a_context_with_no_room_left_is_a_recorded_skip_with_the_reason() -> None:
    rows = key_group("g", successes=2)
    with CompletionsServer(seed_model, max_model_len=8) as server:
        policy = policy_of(server, rows, sampling=SamplingParams(max_tokens=1), max_model_len=8)
        result = verify_key_group(rows, policy, ProverConfig(k=4, curtail=False))
    (group,) = result.report.groups
    assert (group.status, group.stage) == ("skipped", "verify")
    assert "ContextLengthError" in group.reason and "leaves no room" in group.reason
    assert all(len(b["prompt"]) + b["max_tokens"] <= 8 for b in server.requests)
