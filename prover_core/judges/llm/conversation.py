"""One judge conversation as a state machine without I/O: ``request()`` gives the next request body,
``feed(response)`` takes the model's reply and returns the final answer or ``None`` (ask again).

Bounds: every reply either ends the conversation, uses one of ``max_tool_rounds`` tool rounds, or is a
violation that costs one of ``max_repairs`` repairs, so a conversation sends at most
``1 + max_tool_rounds + max_repairs`` requests. A violation is an answer that is not valid JSON, does
not match the schema, breaks the segment rules or picks an invalid action, a call to an unknown tool
or with arguments that are not a JSON object, or a tool call after the tool rounds are spent. The
model is told what was wrong and which segments are admissible (all of them listed when at most 40);
an answer it already gave is called out as a repeat. Repair requests sample at
``max(temperature, repair_temperature)`` with ``seed = (seed or 0) + repair number``, so a temperature-0
model does not repeat itself. After ``max_repairs`` repairs the next violation raises
:class:`~prover_core.errors.JudgeError` (the group is then skipped and keeps GRPO credit).

Constrained decoding: ``response_format`` (with :func:`~prover_core.judges.llm.answer.answer_schema`)
is sent whenever tools are not offered: always in structured mode; in agentic mode once the tools are
withdrawn, i.e. after ``max_tool_rounds`` rounds or after the model's first answer without a tool call
(so every repair of an answer is constrained). With ``response_format_with_tools`` it is sent with the
tools too.

History bound: the messages after the prompt (tool calls and results, rejected answers, repair notes)
are kept under ``max_history_chars`` characters of JSON, trimmed before each request in this order:
(1) tool results of earlier rounds are replaced by a one-line ``[older tool result omitted ...]`` note,
oldest first; (2) rejected answers with their repair notes are dropped, oldest first; (3) earlier tool
rounds (the call and its results together, so every call keeps its answer) are dropped, oldest first.
The latest tool round, the latest repair exchange and the "answer now" note are always kept; a rejected
answer is stored clipped to ``max_field_chars`` and a tool result to ``max_history_chars // 4``, so the
history sent never exceeds ``max(max_history_chars, what is always kept)``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from prover_core.data import Decline, Proposal, SegmentRules, Trajectory
from prover_core.errors import JudgeError, _ToolError
from prover_core.judges.llm.answer import answer_schema, check_answer, describe_admissible, parse_answer
from prover_core.judges.llm.client import ChatResponse
from prover_core.judges.llm.config import LLMJudgeConfig
from prover_core.judges.llm.prompt import ActionCheck, clip, system_prompt, user_prompt
from prover_core.judges.llm.span import span_schema, span_to_segment_text
from prover_core.judges.llm.tools import TOOL_SPECS, Toolbox

__all__ = ["Conversation"]

_ANSWER_NOW = "The tool rounds are used up. Answer now with the JSON object only."
_PROMPT = 2  # the system and user messages, never trimmed


def _size(message: dict[str, Any]) -> int:
    return len(json.dumps(message, ensure_ascii=False))


class Conversation:
    """The messages of one group's judging, and its repair and tool-round counters."""

    def __init__(
        self,
        success: Trajectory,
        failures: Sequence[Trajectory],
        rules: SegmentRules,
        config: LLMJudgeConfig,
        check: ActionCheck,
        alike: Sequence[Trajectory] = (),
    ) -> None:
        self.success = success
        self.rules = rules
        self.config = config
        self.check = check
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt(success, rules, config)},
            {"role": "user", "content": user_prompt(success, failures, rules, config, check, alike)},
        ]
        self._tags: list[tuple[str, int]] = [("prompt", 0), ("prompt", 0)]  # (kind, tool batch) per message
        self.schema = (
            span_schema(success, rules, check, config.allow_decline)
            if config.answer_form == "span"
            else answer_schema(success, rules, check, config.allow_decline)
        )
        self.toolbox = Toolbox(success, failures, config, check, alike)
        self.tools_open = config.mode == "agentic" and config.max_tool_rounds > 0
        self.repairs = 0
        self.tool_rounds = 0
        self.tool_calls = 0
        self._batches = 0
        self._rejected: set[tuple[int | None, int | None]] = set()

    def request(self) -> dict[str, Any]:
        """The next request body."""
        c = self.config
        payload: dict[str, Any] = {
            **c.extra_body,
            "model": c.model,
            "messages": list(self.messages),
            "temperature": c.temperature,
            c.max_tokens_field: c.max_tokens,
        }
        if self.repairs:
            payload["temperature"] = max(c.temperature, c.repair_temperature)
            payload["seed"] = (c.seed or 0) + self.repairs
        elif c.seed is not None:
            payload["seed"] = c.seed
        if self.tools_open:
            payload["tools"] = TOOL_SPECS
            payload["tool_choice"] = "auto"
        if not self.tools_open or c.response_format_with_tools:
            if c.response_format == "json_schema":
                payload["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "segment_proposal", "schema": self.schema, "strict": True},
                }
            elif c.response_format == "json_object":
                payload["response_format"] = {"type": "json_object"}
        return payload

    def _append(self, message: dict[str, Any], kind: str, batch: int = 0) -> None:
        self.messages.append(message)
        self._tags.append((kind, batch))

    def _violation(self, reason: str) -> None:
        if self.repairs >= self.config.max_repairs:
            raise JudgeError(f"no valid judge answer after {self.repairs} repair(s); last problem: {reason}")
        self.repairs += 1

    def feed(self, response: ChatResponse) -> Proposal | Decline | None:
        """Take the model's reply: the final answer, or ``None`` when another request is needed."""
        choice = response.choices[0]
        message = choice.message
        if message.tool_calls:
            self._tools(message.content, message.tool_calls)
            self._trim()
            return None
        content = message.content
        if self.config.answer_form == "span":
            content = span_to_segment_text(content, self.success, self.rules, self.check)
        answer = parse_answer(content, truncated=choice.finish_reason == "length")
        result = (
            answer
            if isinstance(answer, str)
            else check_answer(answer, self.success, self.rules, self.check, self.config.allow_decline)
        )
        if not isinstance(result, str):
            return result
        self._violation(result)
        self.tools_open = False  # the model chose to answer: repairs are constrained by response_format
        if not isinstance(answer, str):
            turns = (answer.start_turn, answer.end_turn)
            if turns in self._rejected:
                result += f" (you gave start_turn={turns[0]}, end_turn={turns[1]} before; choose another)"
            self._rejected.add(turns)
        admissible = describe_admissible(self.success, self.rules, self.check)
        self._append(
            {"role": "assistant", "content": clip(message.content or "", self.config.max_field_chars)}, "rejected"
        )
        note = f"Your answer was rejected: {result}. {admissible} Reply with the corrected JSON object only."
        self._append({"role": "user", "content": note}, "feedback")
        self._trim()
        return None

    def _tools(self, content: str | None, calls: Sequence[Any]) -> None:
        round_no = self.tool_rounds
        self._batches += 1
        batch = self._batches
        problems: list[str] = []
        cap, limit = self.config.max_tool_calls_per_reply, self.config.max_field_chars
        dropped = ""
        if len(calls) > cap:
            dropped = f"{len(calls)} tool calls in one reply; at most {cap} are run, the rest were dropped"
            problems.append(dropped)
            calls = calls[:cap]
        ids = [call.id if call.id and len(call.id) <= 64 else f"call_{round_no}_{i}" for i, call in enumerate(calls)]
        self._append(
            {
                "role": "assistant",
                "content": clip(content, limit) if content is not None else None,
                "tool_calls": [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": clip(c.function.name, 64), "arguments": clip(c.function.arguments, limit)},
                    }
                    for i, c in zip(ids, calls, strict=True)
                ],
            },
            "tool_call",
            batch,
        )
        for call_id, call in zip(ids, calls, strict=True):
            if not self.tools_open:
                result = "error: no more tool calls are allowed; answer with the JSON object"
                problems.append(f"tool call {call.function.name!r} after the tool rounds were used up")
            else:
                try:
                    result = self.toolbox.run(call.function.name, call.function.arguments)
                    self.tool_calls += 1
                except _ToolError as exc:
                    result = f"error: {exc}"
                    problems.append(str(exc))
            result = clip(result, self.config.max_history_chars // 4)
            self._append({"role": "tool", "tool_call_id": call_id, "content": result}, "tool", batch)
        if dropped:
            self._append({"role": "user", "content": f"{dropped}. Call at most {cap} tools in one reply."}, "note")
        if self.tools_open:
            self.tool_rounds += 1
            if self.tool_rounds >= self.config.max_tool_rounds:
                self.tools_open = False
                self._append({"role": "user", "content": _ANSWER_NOW}, "note")
        if problems:
            self._violation("; ".join(problems))

    def history_chars(self) -> int:
        """Characters of JSON of the messages after the prompt (what ``max_history_chars`` bounds)."""
        return sum(_size(m) for m in self.messages[_PROMPT:])

    def _trim(self) -> None:
        """Keep the history under ``max_history_chars`` (the rule is in the module docstring)."""
        budget = self.config.max_history_chars
        total = self.history_chars()
        for i, (kind, batch) in enumerate(self._tags):
            if total <= budget:
                return
            message = self.messages[i]
            if kind == "tool" and batch < self._batches and not message["content"].startswith("[older tool"):
                before = _size(message)
                note = f"[older tool result omitted to bound the context: {len(message['content'])} chars]"
                self.messages[i] = {**message, "content": note}
                total += _size(self.messages[i]) - before
        while total > budget:
            rejected = [i for i, (kind, _) in enumerate(self._tags) if kind == "rejected"]
            if len(rejected) <= 1:
                break
            total -= self._drop([rejected[0], rejected[0] + 1])  # the rejected answer and its repair note
        while total > budget:
            old = sorted({batch for kind, batch in self._tags if kind == "tool_call" and batch < self._batches})
            if not old:
                return
            total -= self._drop([i for i, (kind, b) in enumerate(self._tags) if b == old[0] and kind != "prompt"])

    def _drop(self, indices: list[int]) -> int:
        """Remove the messages at ``indices``; their size."""
        size = sum(_size(self.messages[i]) for i in indices)
        for i in sorted(indices, reverse=True):
            del self.messages[i]
            del self._tags[i]
        return size
