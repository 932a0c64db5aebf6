"""What the rollout appends after an action, and the check that a continuation reproduces the rollout's layout.

A rollout lays out turn ``t`` of a row as ``g_t + c(g_t) + o_{t+1}``: the ids the engine generated,
then whatever the rollout's chat template closes the action with, ``c(g_t) = close_action(g_t)``, then
the rendered observation. An engine returns an end-of-turn token only when the model stopped on it
(not at the token limit), while a chat template closes every assistant turn: a continuation that
appends only ``render_observation(o)`` after its actions would see contexts the policy never saw.

:func:`close_turn` is the chat template's rule; :func:`check_record` replays a recorded row through
``close_action`` and ``render_observation`` and raises :class:`~prover_engine.errors.TokenRecordError`
where the rollout appended something else between two actions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prover_core.data import Trajectory
from prover_engine.errors import TokenRecordError
from prover_engine.protocol import Generation
from prover_engine.tokens import TokenSequence

__all__ = ["CloseAction", "check_record", "close_turn", "no_close"]

CloseAction = Callable[[Generation], Sequence[int]]
"""The ids the rollout appends right after a generated action (before the observation's ids)."""


def no_close(generation: Generation) -> tuple[int, ...]:
    """The default rule: nothing follows an action but the rendered observation."""
    return ()


def close_turn(end_ids: Sequence[int]) -> CloseAction:
    """A chat template's rule: ``end_ids`` follow an action unless the action already ends with them.

    E.g. ``close_turn([im_end])`` for ChatML (SmolLM2, Qwen): a generation that stopped on
    ``<|im_end|>`` carries it, one cut at ``max_tokens`` gets it appended, so every action is closed
    exactly once. Tokens the template adds after the end token (ChatML's ``"\\n"``) belong to the
    rendered observation or to ``end_ids`` alike, as long as the rollout put them there too.
    """
    end = tuple(int(i) for i in end_ids)
    if not end:
        raise ValueError("close_turn needs at least one end-of-turn id")

    def close(generation: Generation) -> tuple[int, ...]:
        ids = tuple(int(i) for i in generation.token_ids)
        return () if ids[-len(end) :] == end else end

    return close


def check_record(
    record: TokenSequence,
    trajectory: Trajectory,
    render_observation: Callable[[object], Sequence[int]],
    close_action: CloseAction = no_close,
) -> None:
    """Raise :class:`TokenRecordError` unless, between every two recorded actions ``t`` and ``t+1``,

        completion_ids[b_t : a_{t+1}] == close_action(g_t) + render_observation(turns[t+1].observation)

    with ``g_t = completion_ids[a_t : b_t]``: exactly what a continuation appends after reproducing
    action ``t``. A rule that reads only ``Generation.token_ids`` is checked exactly (a recorded action
    has no ``finish_reason``).
    """
    turns = trajectory.turns
    for t in range(len(turns) - 1):
        span, following = turns[t].token_span, turns[t + 1].token_span
        if span is None or following is None:
            raise TokenRecordError(f"turn {t} or {t + 1} of trajectory {trajectory.id!r} has no token span")
        action = record.completion_ids[span[0] : span[1]]
        got = list(record.completion_ids[span[1] : following[0]])
        closing = [int(i) for i in close_action(Generation(action))]
        expected = closing + [int(i) for i in render_observation(turns[t + 1].observation)]
        if got != expected:
            raise TokenRecordError(
                f"trajectory {trajectory.id!r}: after turn {t}'s action the rollout appended {_excerpt(got)}, "
                f"a continuation would append {_excerpt(expected)} (close_action {_excerpt(closing)} + "
                "render_observation): give EnginePolicy the rollout's own close_action/render_observation, "
                "or continuations sample from contexts the policy never saw"
            )


def _excerpt(ids: Sequence[int], n: int = 12) -> str:
    shown = list(ids[:n])
    return f"{shown}" if len(ids) <= n else f"{str(shown)[:-1]}, ...] ({len(ids)} ids)"
