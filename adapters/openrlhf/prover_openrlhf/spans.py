"""Turn token spans of an OpenRLHF experience row.

OpenRLHF's ``Experience.action_mask`` (shape ``(B, A)``) is 1 on the tokens the policy generated and
0 on prompt, environment-feedback and padding tokens. In agent mode every maximal run of 1s is one
agent turn: run ``t`` is the half-open span ``[start_t, end_t)`` of turn ``t``'s action tokens in the
row's action positions (the same positions as ``Experience.advantages``).

OpenRLHF builds the mask from the executor's ``action_ranges`` (positions in the full token sequence)
and drops the first position (``action_mask = mask[1:]``), so range ``[s, e)`` becomes ``[s-1, e-1)``.
"""

from __future__ import annotations

from collections.abc import Sequence


def ranges_to_mask_spans(action_ranges: Sequence[Sequence[int]], length: int) -> list[tuple[int, int]]:
    """The executor's ``action_ranges`` in action-mask positions: ``[s-1, e-1)`` clipped to ``length``.

    Empty spans (a turn that generated no token, or one cut off by truncation) are kept as ``(x, x)``
    so that the result has one span per recorded turn.
    """
    out: list[tuple[int, int]] = []
    for start, end in action_ranges:
        a = min(max(int(start) - 1, 0), length)
        b = min(max(int(end) - 1, a), length)
        out.append((a, b))
    return out
