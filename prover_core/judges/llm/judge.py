"""``LLMJudge``: the paper's judge, a language model behind an OpenAI-compatible chat-completions API.

It shows the model the successful run in full and previews of the failed runs
(:mod:`~prover_core.judges.llm.prompt`), asks for one shared failure mode and the shortest admissible
segment that solves or avoids it (:mod:`~prover_core.judges.llm.answer`), optionally lets it call
``search_trajectory`` and ``get_segment`` first (:mod:`~prover_core.judges.llm.tools`), repairs
invalid answers up to ``max_repairs`` times (:mod:`~prover_core.judges.llm.conversation`) and sends
requests with retries, budget, circuit breaker and cache (:mod:`~prover_core.judges.llm.client`).

``propose`` is ``async``: ``compute_bonus`` judges all eligible groups of a step concurrently (at most
``max_concurrency`` requests in flight), so 16 groups cost about one round trip. ``propose_sync`` is
the blocking form. When no valid answer comes, ``propose`` raises
:class:`~prover_core.errors.JudgeError` and ``compute_bonus`` records the group as skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType

from prover_core.data import Decline, Proposal, SegmentRules, Trajectory
from prover_core.errors import JudgeError
from prover_core.judges.llm.client import ChatClient
from prover_core.judges.llm.config import LLMJudgeConfig
from prover_core.judges.llm.conversation import Conversation
from prover_core.judges.llm.prompt import ActionCheck, default_action_error
from prover_core.judges.llm.stats import JudgeStats

__all__ = ["LLMJudge"]


class LLMJudge:
    """A :class:`~prover_core.protocols.Judge` that asks a chat model.

    ``action_error(turn)`` says why a turn's action is malformed or error-producing (``None``: valid);
    the default reads ``turn.info["valid"] is False`` or a truthy ``turn.info["error"]``.
    Call :meth:`new_step` at the start of each training step to reset the per-step budget, circuit
    and :meth:`stats`.
    """

    def __init__(self, config: LLMJudgeConfig, *, action_error: ActionCheck = default_action_error) -> None:
        self.config = config
        self.action_error = action_error
        self._stats = JudgeStats(config.max_calls_per_step, config.max_tokens_per_step, config.circuit_failures)
        self._client = ChatClient(config, self._stats)

    @classmethod
    def from_url(cls, base_url: str, model: str, **settings: object) -> LLMJudge:
        """Shorthand: ``LLMJudge.from_url("http://127.0.0.1:8000/v1", "Qwen/...", mode="agentic")``."""
        return cls(LLMJudgeConfig.model_validate({"base_url": base_url, "model": model, **settings}))

    def __repr__(self) -> str:
        c = self.config
        return f"LLMJudge(base_url={c.base_url!r}, model={c.model!r}, mode={c.mode!r}, api_key_env={c.api_key_env!r})"

    # -- the Judge protocol ----------------------------------------------------------------------

    async def propose(
        self,
        success: Trajectory,
        failures: Sequence[Trajectory],
        rules: SegmentRules,
        *,
        others: Sequence[Trajectory] = (),
    ) -> Proposal | Decline:
        """Ask the model (async). Raises :class:`JudgeError` when no valid answer comes. ``others``: the group's
        other runs with ``success``'s outcome (``compute_bonus`` passes them); only the evidence summary uses them."""
        if (nothing := self._no_candidate(success, rules)) is not None:
            return nothing
        conversation = Conversation(success, failures, rules, self.config, self.action_error, others)
        try:
            async with self._client.session():
                while True:
                    answer = conversation.feed(await self._client.achat(conversation.request()))
                    if answer is not None:
                        return self._done(answer)
        except JudgeError as exc:
            raise self._error(exc) from None
        finally:
            self._account(conversation)

    def propose_sync(
        self,
        success: Trajectory,
        failures: Sequence[Trajectory],
        rules: SegmentRules,
        *,
        others: Sequence[Trajectory] = (),
    ) -> Proposal | Decline:
        """Ask the model (blocking, one request at a time). Raises :class:`JudgeError`."""
        if (nothing := self._no_candidate(success, rules)) is not None:
            return nothing
        conversation = Conversation(success, failures, rules, self.config, self.action_error, others)
        try:
            while True:
                answer = conversation.feed(self._client.chat(conversation.request()))
                if answer is not None:
                    return self._done(answer)
        except JudgeError as exc:
            raise self._error(exc) from None
        finally:
            self._account(conversation)

    def _no_candidate(self, success: Trajectory, rules: SegmentRules) -> Decline | None:
        """A :class:`Decline` without asking when no admissible segment avoids every invalid action."""
        last = rules.last_end(success.num_turns)
        if any(self.action_error(success.turns[t]) is None for t in range(last + 1)):
            return None  # a one-turn segment on a valid turn is admissible
        self._stats.add(declines=1)
        return Decline(reason=f"no admissible segment: turns 0..{last} are none or all hold invalid actions")

    def _done(self, answer: Proposal | Decline) -> Proposal | Decline:
        self._stats.add(**({"proposals": 1} if isinstance(answer, Proposal) else {"declines": 1}))
        return answer

    def _error(self, exc: JudgeError) -> JudgeError:
        self._stats.add(errors=1)
        return type(exc)(self._client.redact(str(exc)))  # the same type (e.g. JudgeUnsupportedError), key scrubbed

    def _account(self, conversation: Conversation) -> None:
        self._stats.add(
            repairs=conversation.repairs, tool_calls=conversation.tool_calls, tool_rounds=conversation.tool_rounds
        )

    # -- accounting and lifecycle ----------------------------------------------------------------

    def stats(self) -> Mapping[str, float]:
        """This step's counters (see :mod:`~prover_core.judges.llm.stats`); ``compute_bonus`` reports them."""
        return self._stats.step()

    def total_stats(self) -> Mapping[str, float]:
        """Counters summed over all steps."""
        return self._stats.total()

    def new_step(self) -> None:
        """Start a new training step: reset the per-step counters, budget and circuit breaker."""
        self._stats.new_step()

    def close(self) -> None:
        """Kept for ``with LLMJudge(...)``: every request's connections are released when its event loop's client
        closes (nothing is held between calls)."""
        self._client.close()

    def __enter__(self) -> LLMJudge:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
