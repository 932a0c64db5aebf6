"""The token record of each training row, and the exact token context before a turn.

Conventions: a row is ``prompt_ids + completion_ids``; turn ``t``'s ``token_span`` ``[a, b)`` indexes
``completion_ids`` (as everywhere in prover-core, spans are positions in the response). The context
before turn ``t`` is therefore ``prompt_ids + completion_ids[:a_t]``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prover_core.data import Trajectory
from prover_engine.errors import TokenRecordError

__all__ = ["TokenSequence", "TokenStore"]


@dataclass(frozen=True)
class TokenSequence:
    """A training row's token ids: the prompt and the completion (actions and rendered observations)."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]

    @classmethod
    def of(cls, prompt_ids: Iterable[int], completion_ids: Iterable[int]) -> TokenSequence:
        return cls(tuple(int(i) for i in prompt_ids), tuple(int(i) for i in completion_ids))

    def context_before(self, trajectory: Trajectory, turn: int) -> list[int]:
        """``prompt_ids + completion_ids[:a_turn]``: the tokens the agent saw before acting at ``turn``."""
        span = trajectory.turns[turn].token_span
        if span is None:
            raise TokenRecordError(f"turn {turn} of trajectory {trajectory.id!r} has no token span")
        return [*self.prompt_ids, *self.completion_ids[: span[0]]]

    def check(self, trajectory: Trajectory) -> None:
        """Raise :class:`TokenRecordError` unless every turn's span lies inside ``completion_ids``."""
        n = len(self.completion_ids)
        for t, turn in enumerate(trajectory.turns):
            if turn.token_span is None:
                raise TokenRecordError(f"turn {t} of trajectory {trajectory.id!r} has no token span")
            if turn.token_span[1] > n:
                raise TokenRecordError(
                    f"turn {t} of trajectory {trajectory.id!r} spans {turn.token_span}, past the "
                    f"{n} recorded completion tokens"
                )

    def digest(self) -> str:
        """A content key: equal sequences, equal digests (used to refuse stale records)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(repr((self.prompt_ids, self.completion_ids)).encode())
        return h.hexdigest()


class TokenStore:
    """``trajectory id -> TokenSequence`` for one training step; :meth:`clear` it every step.

    Records are checked against the trajectory when added (every span inside the completion), so a
    continuation can never start from another episode's tokens.
    """

    def __init__(self) -> None:
        self._rows: dict[str, TokenSequence] = {}

    def add(self, trajectory: Trajectory, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> None:
        record = TokenSequence.of(prompt_ids, completion_ids)
        record.check(trajectory)
        self._rows[trajectory.id] = record

    def get(self, trajectory_id: str) -> TokenSequence:
        try:
            return self._rows[trajectory_id]
        except KeyError:
            raise TokenRecordError(f"no recorded tokens for trajectory {trajectory_id!r}") from None

    def __contains__(self, trajectory_id: object) -> bool:
        return trajectory_id in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        self._rows.clear()
