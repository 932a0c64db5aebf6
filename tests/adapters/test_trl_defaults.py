"""The TRL adapter's defaults are the core's (issue 37): the judge, and what continuations take from the rollout."""

from __future__ import annotations

import functools

from tests.hosts import require_host

require_host("trl")

from prover_core import default_judge  # noqa: E402
from prover_trl import ProverSetup, make_rollout_func, rollout_policy_options  # noqa: E402


class Env:
    def reset(self, spec):  # type: ignore[no-untyped-def]
        raise AssertionError("not played here")

    def step(self, action):  # type: ignore[no-untyped-def]
        raise AssertionError("not played here")


def test_the_default_judge_is_the_cores() -> None:
    assert type(ProverSetup().judge) is type(default_judge())


def test_the_rollout_function_carries_what_continuations_must_do_alike() -> None:
    def render(observation: object) -> list[int]:
        return [1]

    def parse(ids: object) -> str:
        return "go"

    built = make_rollout_func(Env, max_turns=3, render_observation=render, parse_action=parse, max_action_tokens=5)
    assert rollout_policy_options(built) == {
        "render_observation": render,
        "parse_action": parse,
        "max_action_tokens": 5,
    }
    assert rollout_policy_options(make_rollout_func(Env, max_turns=3)) == {}  # the tokenizer's defaults, both sides
    assert rollout_policy_options(lambda prompts, trainer: {}) == {}  # a rollout function of the user's own

    @functools.wraps(built)
    def logged(prompts: list[object], trainer: object) -> dict[str, object]:
        return built(prompts, trainer)  # type: ignore[no-any-return]

    assert rollout_policy_options(logged) == rollout_policy_options(built)  # through __wrapped__
