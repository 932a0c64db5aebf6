"""The agentic judge's two tools, run locally over the group's trajectories.

* ``search_trajectory(query, k)``: the ``k`` turns of the other runs that share the most words with
  ``query`` (score = number of distinct lower-case word tokens of the query found in the turn's
  observation and action; ties: run order, then turn order; turns scoring 0 are not returned). The other
  runs are the compared ones (the failed runs; the successful ones when ``compute_bonus`` swaps the roles
  for negative credit), then those with the examined run's outcome (``alike``); each hit names its outcome.
* ``get_segment(trajectory_id, start_turn, end_turn)``: turns ``start..end`` (inclusive) of any run
  of the group, at most ``max_segment_read`` of them, fields clipped to ``max_field_chars``.

A call with bad arguments returns an ``error: ...`` text the model can act on; a call to an unknown
tool is a protocol violation the caller handles (see :class:`prover_core.errors._ToolError`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from prover_core.data import Trajectory
from prover_core.errors import _ToolError
from prover_core.judges.llm.config import LLMJudgeConfig
from prover_core.judges.llm.prompt import ActionCheck, as_text, clip

__all__ = ["TOOL_SPECS", "Toolbox"]

TOOL_SPECS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search_trajectory",
            "description": "Find the turns of the other runs (not the examined one) most related to a query.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "words to look for"},
                    "k": {"type": "integer", "description": "how many turns to return", "minimum": 1},
                },
                "required": ["query", "k"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_segment",
            "description": "Read turns start_turn..end_turn (inclusive) of any run, in full.",
            "parameters": {
                "type": "object",
                "properties": {
                    "trajectory_id": {"type": "string"},
                    "start_turn": {"type": "integer", "minimum": 0},
                    "end_turn": {"type": "integer", "minimum": 0},
                },
                "required": ["trajectory_id", "start_turn", "end_turn"],
            },
        },
    },
]
"""The two tools' OpenAI function specs, sent with each request of the agentic mode while tool rounds remain."""

_TOOL_NAMES = frozenset(spec["function"]["name"] for spec in TOOL_SPECS)

_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _int(args: dict[str, Any], name: str) -> int:
    value = args.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return value


class Toolbox:
    """Runs tool calls over one group's runs: the examined one, the compared ones and ``alike`` (same outcome)."""

    def __init__(
        self,
        success: Trajectory,
        failures: Sequence[Trajectory],
        config: LLMJudgeConfig,
        check: ActionCheck,
        alike: Sequence[Trajectory] = (),
    ) -> None:
        self.runs = {t.id: t for t in (success, *failures, *alike)}
        self.others = [*failures, *alike]
        self.config = config
        self.check = check

    def run(self, name: str, arguments: str) -> str:
        """The tool's text result; ``error: ...`` on bad arguments. Raises :class:`~prover_core.errors._ToolError`."""
        if name not in _TOOL_NAMES:
            raise _ToolError(f"unknown tool {name!r}; the tools are {sorted(_TOOL_NAMES)}")
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            raise _ToolError(f"the arguments of {name} are not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise _ToolError(f"the arguments of {name} nest JSON too deeply") from None
        except ValueError:  # an integer past Python's digit limit (4,300 digits)
            raise _ToolError(f"the arguments of {name} hold a number too long to read") from None
        if not isinstance(args, dict):
            raise _ToolError(f"the arguments of {name} must be a JSON object")
        try:
            if name == "search_trajectory":
                return self.search(str(args.get("query", "")), _int(args, "k"))
            return self.get_segment(
                str(args.get("trajectory_id", "")), _int(args, "start_turn"), _int(args, "end_turn")
            )
        except ValueError as exc:
            return f"error: {exc}"

    def search(self, query: str, k: int) -> str:
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        k = min(k, self.config.max_search_results)
        words = _words(query)
        if not words:
            raise ValueError("query has no words")
        hits: list[tuple[int, int, int, str]] = []  # (-score, run index, turn, text)
        for r, run in enumerate(self.others):
            for t, turn in enumerate(run.turns):
                text = f"{as_text(turn.observation)}\n{as_text(turn.action)}"
                score = len(words & _words(text))
                if score:
                    hits.append((-score, r, t, run.id))
        hits.sort()
        if not hits:
            return "no matching turns in the other runs"
        field = self.config.preview_field_chars
        out = []
        for neg, r, t, run_id in hits[:k]:
            run = self.others[r]
            turn = run.turns[t]
            outcome = "succeeded" if run.success else "failed"
            out.append(
                f"run {run_id!r} turn {t} (score {-neg}, {outcome}): "
                f"observation: {clip(as_text(turn.observation), field)} | action: {clip(as_text(turn.action), field)}"
            )
        return "\n".join(out)

    def get_segment(self, trajectory_id: str, start: int, end: int) -> str:
        run = self.runs.get(trajectory_id)
        if run is None:
            raise ValueError(f"unknown trajectory_id {trajectory_id!r}; the runs are {sorted(self.runs)}")
        n = run.num_turns
        if not 0 <= start <= end < n:
            raise ValueError(f"turns {start}..{end} are out of range: run {trajectory_id!r} has turns 0..{n - 1}")
        end = min(end, start + self.config.max_segment_read - 1)
        lines = [f"run {trajectory_id!r} ({'succeeded' if run.success else 'failed'}), turns {start}..{end}:"]
        limit = self.config.max_field_chars
        for t in range(start, end + 1):
            turn = run.turns[t]
            lines.append(f"--- turn {t} ---")
            lines.append(f"observation: {clip(as_text(turn.observation), limit)}")
            lines.append(f"action: {clip(as_text(turn.action), limit)}")
            error = self.check(turn)
            if error is not None:
                lines.append(f"!! INVALID ACTION: {clip(error, limit)}")
        return "\n".join(lines)
