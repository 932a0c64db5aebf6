"""Turn token spans of a TRL completion.

TRL marks the trainable tokens of a multi-turn completion with ``completion_mask * tool_mask``
(``tool_mask``, or a rollout's ``env_mask``, is 0 on tool/environment tokens). Every maximal run of
1s is one agent turn: run ``t`` is the half-open span ``[start_t, end_t)`` of turn ``t``'s action
tokens in the completion.
"""

from __future__ import annotations

from collections.abc import Sequence

from prover_trl.errors import ProverTRLError


def check_spans(spans: Sequence[Sequence[int]], length: int) -> list[tuple[int, int]]:
    """Validate explicit spans (``prover_turn_spans``): ordered, non-overlapping, non-empty, within ``length``.

    Raises :class:`ProverTRLError` on the first violation.
    """
    out: list[tuple[int, int]] = []
    last_end = 0
    for t, span in enumerate(spans):
        if len(span) != 2:
            raise ProverTRLError(f"turn span {t} must be a (start, end) pair, got {span!r}")
        start, end = int(span[0]), int(span[1])
        if not last_end <= start < end <= length:
            raise ProverTRLError(
                f"turn span {t} = [{start}, {end}) must be non-empty, start at or after the previous span's end "
                f"({last_end}) and end within the completion ({length} tokens)"
            )
        out.append((start, end))
        last_end = end
    return out
