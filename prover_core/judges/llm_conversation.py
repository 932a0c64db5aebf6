"""One judge conversation as a state machine without I/O: ``request()`` gives the next request body,
``feed(response)`` takes the model's reply and returns the final answer or ``None`` (ask again).

Bounds: every reply either ends the conversation, uses one of ``max_tool_rounds`` tool rounds, or is a
violation that costs one of ``max_repairs`` repairs, so a conversation sends at most
``1 + max_tool_rounds + max_repairs`` requests. A violation is an answer that is not valid JSON, does
not match the schema, breaks the segment rules or picks an invalid action, a call to an unknown tool
or with arguments that are not a JSON object, or a tool call after the tool rounds are spent. The
model is told what was wrong; after ``max_repairs`` repairs the next violation raises
:class:`~prover_core.errors.JudgeError` (the group is then skipped and keeps GRPO credit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prover_core.data import Decline, Proposal, SegmentRules, Trajectory
from prover_core.errors import JudgeError
from prover_core.judges.llm_answer import ANSWER_SCHEMA, check_answer, parse_answer
from prover_core.judges.llm_client import ChatResponse
from prover_core.judges.llm_config import LLMJudgeConfig
from prover_core.judges.llm_prompt import ActionCheck, system_prompt, user_prompt
from prover_core.judges.llm_tools import TOOL_SPECS, Toolbox, ToolError

_ANSWER_NOW = "The tool rounds are used up. Answer now with the JSON object only."


class Conversation:
    """The messages of one group's judging, and its repair and tool-round counters."""

    def __init__(
        self,
        success: Trajectory,
        failures: Sequence[Trajectory],
        rules: SegmentRules,
        config: LLMJudgeConfig,
        check: ActionCheck,
    ) -> None:
        self.success = success
        self.rules = rules
        self.config = config
        self.check = check
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt(success, rules, config)},
            {"role": "user", "content": user_prompt(success, failures, rules, config, check)},
        ]
        self.toolbox = Toolbox(success, failures, config, check)
        self.tools_open = config.mode == "agentic" and config.max_tool_rounds > 0
        self.repairs = 0
        self.tool_rounds = 0
        self.tool_calls = 0

    def request(self) -> dict[str, Any]:
        """The next request body."""
        payload: dict[str, Any] = {
            **self.config.extra_body,
            "model": self.config.model,
            "messages": list(self.messages),
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if self.tools_open:
            payload["tools"] = TOOL_SPECS
            payload["tool_choice"] = "auto"
        elif self.config.response_format == "json_schema":
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "segment_proposal", "schema": ANSWER_SCHEMA, "strict": True},
            }
        elif self.config.response_format == "json_object":
            payload["response_format"] = {"type": "json_object"}
        return payload

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
            return None
        answer = parse_answer(message.content, truncated=choice.finish_reason == "length")
        result = (
            answer
            if isinstance(answer, str)
            else check_answer(answer, self.success, self.rules, self.check, self.config.allow_decline)
        )
        if not isinstance(result, str):
            return result
        self._violation(result)
        self.messages.append({"role": "assistant", "content": message.content or ""})
        self.messages.append(
            {
                "role": "user",
                "content": f"Your answer was rejected: {result}. Reply with the corrected JSON object only.",
            }
        )
        return None

    def _tools(self, content: str | None, calls: Sequence[Any]) -> None:
        round_no = self.tool_rounds
        ids = [call.id or f"call_{round_no}_{i}" for i, call in enumerate(calls)]
        self.messages.append(
            {
                "role": "assistant",
                "content": content,
                "tool_calls": [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for i, c in zip(ids, calls, strict=True)
                ],
            }
        )
        problems: list[str] = []
        for call_id, call in zip(ids, calls, strict=True):
            if not self.tools_open:
                result = "error: no more tool calls are allowed; answer with the JSON object"
                problems.append(f"tool call {call.function.name!r} after the tool rounds were used up")
            else:
                try:
                    result = self.toolbox.run(call.function.name, call.function.arguments)
                    self.tool_calls += 1
                except ToolError as exc:
                    result = f"error: {exc}"
                    problems.append(str(exc))
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        if self.tools_open:
            self.tool_rounds += 1
            if self.tool_rounds >= self.config.max_tool_rounds:
                self.tools_open = False
                self.messages.append({"role": "user", "content": _ANSWER_NOW})
        if problems:
            self._violation("; ".join(problems))
