"""The end-of-turn check (``close_turn``) and the record-layout check (``check_record``) at the first, a middle and
the LAST position of a record (issue 55). The last gap between two actions is where the context of a continuation
from the last boundary ends, and a cut final action's end-of-turn is the record's last token.

Records are worked by hand on ``tests.engine_support``'s KeyEnv: observation ``(t, key)`` renders to
``100 + 10 t + key``, an action is ``take`` iff its first id is 51; ``EOT`` (7) is ChatML's ``<|im_end|>``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prover_core import Trajectory, Turn
from prover_core.protocols import PolicyContext, policy_rng
from prover_engine import (
    EnginePolicy,
    Generation,
    SamplingParams,
    TokenSequence,
    TokenStore,
    check_record,
    close_turn,
)
from prover_engine.errors import TokenRecordError
from tests.engine_support import parse, render, store_of
from tests.test_engine_context import chat_record

EOT = 7
CHATML = close_turn([EOT])
NEWLINE = 198
TWO = close_turn([EOT, NEWLINE])  # end-of-turn and newline


def laid_out(
    generated: Sequence[Sequence[int]], stray: dict[int, list[int]] | None = None
) -> tuple[Trajectory, list[int], list[int]]:
    """A rollout through ChatML (``chat_record``): each action's generated ids, ``CHATML``'s closing, then
    ``stray[t]`` (ids that no rule reproduces), then the observation. Spans cover the generated ids only."""
    return chat_record([list(ids) for ids in generated], "a", stray)


# Turns 0, 1 and 3 stopped on EOT; turn 2, the action right before the last boundary, ran into the token limit, so
# the only id a template added is the EOT in the last gap (between turn 2 and turn 3).
GENERATED = [[50, EOT], [51, EOT], [50, 50], [50, EOT]]
PROMPT = [1, 2, 3, 100]
COMPLETION = [50, EOT, 110, 51, EOT, 121, 50, 50, EOT, 131, 50, EOT]
SPANS = [(0, 2), (3, 5), (6, 8), (10, 12)]
LAST_CONTEXT = [*PROMPT, 50, EOT, 110, 51, EOT, 121, 50, 50, EOT, 131]  # before a_3 = 10


def row(completion: list[int] | None = None) -> TokenSequence:
    return TokenSequence.of(PROMPT, COMPLETION if completion is None else completion)


def test_the_record_is_laid_out_as_worked_by_hand() -> None:
    trajectory, prompt, completion = laid_out(GENERATED)
    assert (prompt, completion) == (PROMPT, COMPLETION)
    assert [t.token_span for t in trajectory.turns] == SPANS and trajectory.success
    assert row().context_before(trajectory, 3) == LAST_CONTEXT


# -- the end-of-turn check: close_turn ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("generated", "closing"),
    [
        ((EOT, 50, 51), (EOT,)),  # first position: the model went on after it, so the template closes the turn
        ((50, EOT, 51), (EOT,)),  # a middle position
        ((50, 51, EOT), ()),  # the last position: the model stopped on it
        ((EOT,), ()),  # a one-id action: first and last position at once
        ((50, 51), (EOT,)),  # cut at max_tokens, no EOT anywhere
    ],
    ids=["first", "middle", "last", "only", "absent"],
)
def test_close_turn_counts_an_end_of_turn_only_at_the_actions_last_position(
    generated: tuple[int, ...], closing: tuple[int, ...]
) -> None:
    assert CHATML(Generation(generated)) == closing


@pytest.mark.parametrize(
    ("generated", "closing"),
    [
        ((EOT, NEWLINE, 5), (EOT, NEWLINE)),  # at the first positions
        ((5, EOT, NEWLINE, 5), (EOT, NEWLINE)),  # in the middle
        ((5, EOT, NEWLINE), ()),  # at the last two positions
        ((EOT, NEWLINE), ()),  # the whole action
        ((5, NEWLINE), (EOT, NEWLINE)),  # only the end's last id at the last position
        ((NEWLINE,), (EOT, NEWLINE)),  # an action shorter than the end, ending with its last id
        ((NEWLINE, EOT), (EOT, NEWLINE)),  # the ids in the wrong order
    ],
    ids=["first", "middle", "last", "whole", "last-id-only", "shorter", "reversed"],
)
def test_a_two_id_end_counts_only_when_both_ids_end_the_action(
    generated: tuple[int, ...], closing: tuple[int, ...]
) -> None:
    assert TWO(Generation(generated)) == closing


# -- the record-layout check: check_record --------------------------------------------------------------


@pytest.mark.parametrize(
    ("gap", "appended", "expected"),
    [
        (0, [9, 110], [110]),  # the first gap
        (1, [9, 121], [121]),  # a middle gap
        (2, [EOT, 9, 131], [EOT, 131]),  # the last gap: the end of a continuation's context from the last boundary
    ],
    ids=["first", "middle", "last"],
)
def test_check_record_names_the_gap_with_a_stray_id_first_middle_or_last(
    gap: int, appended: list[int], expected: list[int]
) -> None:
    trajectory, prompt, completion = laid_out(GENERATED, stray={gap: [9]})
    assert len(completion) == len(COMPLETION) + 1
    check_record(row(), laid_out(GENERATED)[0], render, CHATML)  # the unaltered record passes
    closing = [EOT] if gap == 2 else []
    message = (
        f"trajectory 'a': after turn {gap}'s action the rollout appended {appended}, a continuation would append "
        f"{expected} (close_action {closing} + render_observation)"
    )
    with pytest.raises(TokenRecordError, match=re.escape(message)):
        check_record(TokenSequence.of(prompt, completion), trajectory, render, CHATML)


def test_the_default_rule_fails_only_at_the_last_gap_where_the_template_closed_a_cut_action() -> None:
    """Turns 0 and 1 stopped on EOT, so without a closing rule their gaps still match; turn 2 was cut and the
    template closed it, which only the last gap shows."""
    trajectory, _, _ = laid_out(GENERATED)
    with pytest.raises(TokenRecordError, match=re.escape("after turn 2's action the rollout appended [7, 131], a ")):
        check_record(row(), trajectory, render)
    check_record(row(), trajectory, render, CHATML)


def test_nothing_after_the_last_action_is_checked_and_a_span_one_past_the_end_is_refused() -> None:
    """The last action ends at the record's last position (12 of 12). A cut final action closed by the template
    puts an EOT after it (13 ids): no continuation's context reaches past the last action, so both records pass.
    One id short (11), the last span ends one past the record: refused when stored, with the documented error."""
    trajectory, _, _ = laid_out(GENERATED)
    store = TokenStore()
    store.add(trajectory, PROMPT, COMPLETION)
    check_record(store.get("a"), trajectory, render, CHATML)
    store.add(trajectory, PROMPT, [*COMPLETION, EOT])
    check_record(store.get("a"), trajectory, render, CHATML)
    assert store.get("a").completion_ids[-2:] == (EOT, EOT)
    past = "turn 3 of trajectory 'a' spans (10, 12), past the 11 recorded completion tokens"
    with pytest.raises(TokenRecordError, match=re.escape(past)):
        store.add(trajectory, PROMPT, COMPLETION[:-1])


@given(
    st.lists(st.tuples(st.sampled_from([50, 51]), st.booleans()), min_size=2, max_size=6),
    st.data(),
)
def test_a_stray_id_is_found_in_whichever_gap_it_is_in(actions: list[tuple[int, bool]], data: Any) -> None:
    """Any number of turns, each action stopped on EOT or cut (then closed by the template): the ChatML record
    passes, and one stray id in gap ``t`` (the last one included) fails the check at turn ``t``."""
    generated = [[first, EOT] if stopped else [first, first] for first, stopped in actions]
    gap = data.draw(st.integers(0, len(generated) - 2), label="gap")
    trajectory, prompt, completion = laid_out(generated)
    check_record(TokenSequence.of(prompt, completion), trajectory, render, CHATML)
    strayed, prompt, completion = laid_out(generated, stray={gap: [9]})
    with pytest.raises(TokenRecordError, match=f"after turn {gap}'s action the rollout appended "):
        check_record(TokenSequence.of(prompt, completion), strayed, render, CHATML)


# -- a continuation from the last boundary (EnginePolicy) ---------------------------------------------


class StopsOnEnd:
    """``wait`` then EOT, whatever the context."""

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        return Generation((50, EOT))


def policy_of(**kw: Any) -> EnginePolicy:
    trajectory, prompt, completion = laid_out(GENERATED)
    store = store_of([(trajectory, prompt, completion)])
    return EnginePolicy(StopsOnEnd(), store, render_observation=render, parse_action=parse, **kw)


def from_last_boundary(history: Sequence[Turn], observation: Any, replayed: int = 0) -> PolicyContext:
    trajectory, _, _ = laid_out(GENERATED)
    return PolicyContext(trajectory, tuple(history), observation, {}, 3, policy_rng(3), 3, replayed)


def test_a_continuation_from_the_last_boundary_starts_after_the_last_gap_and_checks_it() -> None:
    """Boundary 3 (the last turn): action 0's context is the record up to a_3 = 10. In an episode that outlasts the
    recorded one, action 1's context is that, the generated ``[50, EOT]`` (stopped: nothing added) and the next
    observation ``(4, True)`` = 141. Without the rollout's rule, the check before action 1 finds the EOT the template
    put in the last gap, and refuses."""
    trajectory, _, _ = laid_out(GENERATED)
    first = from_last_boundary(trajectory.turns[:3], (3, True))
    second = from_last_boundary([*trajectory.turns[:3], Turn(observation=(3, True), action="wait")], (4, True))
    chat = policy_of(close_action=CHATML)
    assert chat.context_ids(first) == (("a", 3, 3), 0, LAST_CONTEXT)
    assert asyncio.run(chat.act(first)) == "wait"
    assert chat.context_ids(second) == (("a", 3, 3), 1, [*LAST_CONTEXT, 50, EOT, 141])
    plain = policy_of()
    assert plain.context_ids(first)[2] == LAST_CONTEXT  # action 0 sends the recorded context unchecked
    asyncio.run(plain.act(first))
    with pytest.raises(TokenRecordError, match=re.escape("after turn 2's action the rollout appended [7, 131], a ")):
        plain.context_ids(second)


def test_off_its_recorded_path_at_the_last_boundary_only_the_last_observation_is_replaced() -> None:
    """Replayed choices (``delta_of="choices"``) that reach the last boundary on another observation, ``(3, False)``
    instead of the recorded ``(3, True)``: the context's last id, 131, becomes 130; on the recorded path it stays."""
    trajectory, _, _ = laid_out(GENERATED)
    policy = policy_of(close_action=CHATML)
    off = from_last_boundary(trajectory.turns[:3], (3, False), replayed=1)
    assert policy.context_ids(off)[2] == [*LAST_CONTEXT[:-1], 130]
    on = from_last_boundary(trajectory.turns[:3], (3, True), replayed=1)
    assert policy.context_ids(on)[2] == LAST_CONTEXT
