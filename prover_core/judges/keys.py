"""Anchor keys: the part of an observation that repeats across the runs of a group.

Anchor statistics need the same state to give the same key in every run. Observations that carry a
nonce (a request id, a timestamp, a random reference) never repeat whole, so :func:`repeating_key`
keys a text observation on its *repeating tokens*: the whitespace-separated tokens that occur in at
least two observation occurrences (two turns, of one run or of two) of the group. A token seen once in
the whole group is volatile by this rule and is left out of the key; everything else is kept in order.
Non-text observations are keyed by their value (or ``repr`` when unhashable). A user's ``key=`` overrides
all of this.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from prover_core.data import Trajectory

__all__ = ["Key", "repeating_key", "value_key", "volatile_tokens"]

Key = Callable[[Any], Hashable]
"""Maps an observation or action to something hashable that identifies it."""


def value_key(value: Any) -> Hashable:
    """The value itself when hashable, else its ``repr``."""
    return value if isinstance(value, Hashable) else repr(value)


def volatile_tokens(texts: Iterable[str]) -> frozenset[str]:
    """Tokens that occur in exactly one of ``texts`` (each text one observation occurrence)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(set(text.split()))
    return frozenset(token for token, n in counts.items() if n == 1)


def repeating_key(runs: Sequence[Trajectory]) -> Key:
    """A key for the observations of ``runs``: text keeps its repeating tokens, anything else its value.

    Built per group (the judge calls it with the successful run and the failed runs).
    """
    texts = [turn.observation for run in runs for turn in run.turns if isinstance(turn.observation, str)]
    volatile = volatile_tokens(texts)
    if not volatile:
        return value_key

    def key(value: Any) -> Hashable:
        if isinstance(value, str):
            return " ".join(token for token in value.split() if token not in volatile)
        return value_key(value)

    return key
