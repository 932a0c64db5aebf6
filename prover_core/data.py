"""The data model, validated at the boundary with pydantic.

Conventions (used everywhere in the library):

* Turns are numbered from 0. Turn ``t`` holds the observation the agent saw *before* acting and
  the action it took; ``s_t`` is the environment state before turn ``t``.
* A :class:`Segment` ``(start, end)`` is **inclusive** on both ends. Its pre boundary is ``s_start``
  (before turn ``start``), its post boundary is ``s_{end+1}`` (after turn ``end``).
* A token span ``(a, b)`` is **half-open**: positions ``a <= i < b`` of the training sequence hold the
  action tokens of that turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, computed_field, field_serializer, field_validator, model_validator
from pydantic_core import to_jsonable_python

from prover_core.errors import InvalidOutcomeError, InvalidSegmentError

__all__ = [
    "Decline",
    "Outcome",
    "Proposal",
    "Segment",
    "SegmentRules",
    "Trajectory",
    "Turn",
    "Verification",
    "as_binary",
    "json_plain",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


def as_binary(value: Any, what: str = "success") -> bool:
    """``value`` as a binary reward: ``0``/``1``, ``0.0``/``1.0``, ``False``/``True`` (numpy's too).

    Anything else (``2``, ``-1``, ``0.5``, NaN, ``None``, ``"False"``, ``b"1"``: strings and byte strings even
    where ``float`` reads them) raises ``ValueError``: a non-binary value must never count as a success.
    """
    problem = f"{what} must be a binary reward (0/1 or bool), got {value!r} ({type(value).__name__})"
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str | bytes | bytearray | memoryview) or value is None:
        raise ValueError(problem)
    try:
        number = float(value)  # ints, numpy and torch scalars
    except (TypeError, ValueError):
        raise ValueError(problem) from None
    if number not in (0.0, 1.0):  # NaN included
        raise ValueError(problem)
    return number == 1.0


def json_plain(value: Any) -> Any:
    """``value`` as JSON would carry it: tuples and arrays become lists, numpy scalars numbers,
    mapping keys strings. Two observations equal after this are the same observation on the wire."""
    return to_jsonable_python(value, fallback=_jsonable_fallback)


def _jsonable_fallback(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"cannot turn {type(value).__name__} into JSON")


class Turn(BaseModel):
    """One agent turn: the observation seen before acting, and the action taken."""

    model_config = _FROZEN

    observation: Any
    action: Any
    token_span: tuple[int, int] | None = None
    """Half-open ``[start, end)`` positions of this turn's action tokens in the training sequence."""
    info: dict[str, Any] = Field(default_factory=dict)

    @field_serializer("observation", "action", "info", when_used="json")
    def _plain(self, value: Any) -> Any:  # numpy arrays and scalars travel as lists and numbers
        return json_plain(value)

    @field_validator("token_span")
    @classmethod
    def _span_ordered(cls, span: tuple[int, int] | None) -> tuple[int, int] | None:
        if span is not None and not 0 <= span[0] <= span[1]:
            raise ValueError(f"token_span must satisfy 0 <= start <= end, got {span}")
        return span


class Trajectory(BaseModel):
    """One episode of a group: how to re-create it, what happened, and whether it succeeded."""

    model_config = _FROZEN

    id: str = Field(min_length=1)
    group_id: str = Field(min_length=1)
    reset: dict[str, Any] = Field(default_factory=dict)
    """Everything needed to re-create the episode from scratch (task id, seed, ...)."""
    turns: tuple[Turn, ...] = Field(min_length=1)
    success: bool
    """The binary terminal reward. Only 0/1 (or False/True) are accepted."""

    @field_validator("success", mode="before")
    @classmethod
    def _binary(cls, value: Any) -> bool:
        try:
            return as_binary(value)
        except ValueError as exc:
            raise ValueError(f"{exc}; ProVer needs binary terminal rewards") from None

    @model_validator(mode="after")
    def _spans_increasing(self) -> Trajectory:
        last_end = 0
        for t, turn in enumerate(self.turns):
            if turn.token_span is None:
                continue
            if turn.token_span[0] < last_end:
                raise ValueError(
                    f"token spans must be in turn order and not overlap: turn {t} starts at "
                    f"{turn.token_span[0]} before the previous span ends at {last_end}"
                )
            last_end = turn.token_span[1]
        return self

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def token_end(self) -> int:
        """Where the last token span ends (0 when no turn has one): the row length this trajectory needs."""
        return max((turn.token_span[1] for turn in self.turns if turn.token_span is not None), default=0)


class Segment(BaseModel):
    """Turns ``start..end`` (inclusive) of one trajectory."""

    model_config = _FROZEN

    trajectory_id: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Segment:
        if self.end < self.start:
            raise ValueError(f"segment end {self.end} is before its start {self.start}")
        return self

    @property
    def num_turns(self) -> int:
        return self.end - self.start + 1


@dataclass(frozen=True)
class SegmentRules:
    """What makes a segment admissible: at most ``max_turns`` turns, and (by default) a nonterminal end.

    A nonterminal end means ``end < T - 1`` for a trajectory of ``T`` turns, so that the post
    boundary ``s_{end+1}`` is a real state from which continuations can run.
    """

    max_turns: int = 4
    nonterminal_end: bool = True

    def last_end(self, num_turns: int) -> int:
        """The last turn an admissible segment of a ``num_turns``-turn trajectory may end on: ``T - 2`` under
        a nonterminal end, else ``T - 1``; negative when no segment is admissible."""
        return num_turns - (2 if self.nonterminal_end else 1)

    def no_segment(self, trajectory: Trajectory) -> Decline | None:
        """A :class:`Decline` when ``trajectory`` has no admissible segment (``last_end < 0``), else ``None``."""
        if self.last_end(trajectory.num_turns) < 0:
            return Decline(reason=f"trajectory has {trajectory.num_turns} turns: no admissible segment")
        return None

    def violation(self, segment: Segment, trajectory: Trajectory) -> str | None:
        """The reason ``segment`` is not admissible on ``trajectory``, or ``None`` when it is."""
        n = trajectory.num_turns
        if segment.trajectory_id != trajectory.id:
            return f"segment names trajectory {segment.trajectory_id!r}, expected {trajectory.id!r}"
        if segment.end >= n:
            return f"segment ({segment.start}, {segment.end}) is out of range: turns are 0..{n - 1}"
        if self.nonterminal_end and segment.end == n - 1:
            return f"segment ends on the terminal turn {n - 1}; it must end at turn {n - 2} or earlier"
        if segment.num_turns > self.max_turns:
            return f"segment has {segment.num_turns} turns; at most {self.max_turns} are allowed"
        return None

    def check(self, segment: Segment, trajectory: Trajectory) -> Segment:
        """Return ``segment`` if admissible, else raise :class:`InvalidSegmentError`."""
        reason = self.violation(segment, trajectory)
        if reason is not None:
            raise InvalidSegmentError(reason)
        return segment

    def candidates(self, trajectory: Trajectory) -> list[Segment]:
        """Every admissible segment of ``trajectory``, ordered by (start, end)."""
        last = self.last_end(trajectory.num_turns)
        return [
            Segment(trajectory_id=trajectory.id, start=s, end=e)
            for s in range(last + 1)
            for e in range(s, min(last, s + self.max_turns - 1) + 1)
        ]


class Proposal(BaseModel):
    """A judge's nomination: where the successful run did what the failed runs did not."""

    model_config = _FROZEN

    segment: Segment
    rationale: str = ""


class Decline(BaseModel):
    """A judge's explicit refusal to nominate a segment for this group."""

    model_config = _FROZEN

    reason: str


class Verification(BaseModel):
    """Monte Carlo verification of one segment.

    ``delta = post_successes / post_count - pre_successes / pre_count``: the success rate of
    continuations from after the segment minus the rate from before it.
    """

    model_config = _FROZEN

    pre_successes: int = Field(ge=0)
    pre_count: int = Field(ge=0)
    post_successes: int = Field(ge=0)
    post_count: int = Field(ge=0)
    accepted: bool
    reason: str
    incomplete: bool = False
    """True when too few continuations finished to decide; the group then keeps plain GRPO credit."""
    curtailed: bool = False
    """True when one boundary's continuations were not run because no outcome of theirs could lead to
    acceptance (``ProverConfig.curtail``): rejected, and ``delta`` is undefined (NaN)."""
    failed_continuations: int = 0
    policy_turns: int = 0

    @property
    def pre_rate(self) -> float:
        return self.pre_successes / self.pre_count if self.pre_count else float("nan")

    @property
    def post_rate(self) -> float:
        return self.post_successes / self.post_count if self.post_count else float("nan")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def delta(self) -> float:
        return self.post_rate - self.pre_rate

    @property
    def delta_text(self) -> str:
        """``Delta = +0.250``, or ``Delta not measured (curtailed)`` when a boundary was not run."""
        return "Delta not measured (curtailed)" if self.curtailed else f"Delta = {self.delta:+.3f}"


@dataclass(frozen=True)
class Outcome:
    """The result of one continuation: did it succeed, and how many policy turns did it take.

    Validated like the batch: ``success`` must be binary (see :func:`as_binary`) and ``turns`` a
    non-negative integer, else :class:`~prover_core.errors.InvalidOutcomeError`.
    """

    success: bool
    turns: int = 0

    def __post_init__(self) -> None:
        try:
            success = as_binary(self.success, "a continuation's success")
        except ValueError as exc:
            raise InvalidOutcomeError(f"invalid outcome: {exc}") from None
        turns = self.turns
        if isinstance(turns, bool) or not isinstance(turns, int | np.integer) or turns < 0:
            raise InvalidOutcomeError(f"invalid outcome: turns must be a non-negative int, got {turns!r}")
        object.__setattr__(self, "success", success)
        object.__setattr__(self, "turns", int(turns))
