"""The vault: a corridor of rooms, a key in one of them, and a vault door at the end.

The pivotal decision is ``take key`` in the key room: the vault opens only with the key, and the
corridor is one-way. Everything else (``wait``, ``look around``, slipping on the wet floor while
going east) matters only through the turn limit. Success probabilities are exact (see
:mod:`prover_core.demo._finite_mdp`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prover_core.demo._finite_mdp import TabularPolicy, Transition, log_weights
from prover_core.protocols import PolicyContext

__all__ = ["State", "VAULT_WEIGHTS", "VaultBatchPolicy", "VaultMDP", "vault_policy"]

State = tuple[int, bool]  # (room, has_key)
"""A vault state: ``(room, has_key)``."""


@dataclass(frozen=True)
class VaultMDP:
    """Rooms ``0..rooms-1``; the key lies in ``key_room``; the vault is in the last room."""

    rooms: int = 7
    key_room: int = 2
    slip: float = 0.2
    horizon: int = 20

    def initial(self, spec: Mapping[str, Any]) -> Hashable:
        return (0, False)

    def observe(self, state: Hashable) -> str:
        room, key = _unpack(state)
        parts = [f"Room {room + 1} of {self.rooms}."]
        if room == self.key_room and not key:
            parts.append("A brass key glints on the floor.")
        if room == self.rooms - 1:
            parts.append("A steel vault door blocks the way.")
        parts.append("You carry a brass key." if key else "You carry nothing.")
        return " ".join(parts)

    def actions(self, state: Hashable) -> tuple[str, ...]:
        room, key = _unpack(state)
        if room == self.rooms - 1:
            return ("open vault", "wait")
        if room == self.key_room and not key:
            return ("go east", "wait", "look around", "take key")
        return ("go east", "wait", "look around")

    def transitions(self, state: Hashable, action: str) -> Sequence[Transition]:
        room, key = _unpack(state)
        if action == "go east":
            return [(1.0 - self.slip, (room + 1, key), False, False), (self.slip, (room, key), False, False)]
        if action == "take key":
            return [(1.0, (room, True), False, False)]
        if action == "open vault":
            return [(1.0, (room, key), True, key)]
        return [(1.0, (room, key), False, False)]


def _unpack(state: Hashable) -> State:
    assert isinstance(state, tuple) and len(state) == 2, f"not a vault state: {state!r}"
    return int(state[0]), bool(state[1])


VAULT_WEIGHTS: Mapping[str, float] = {
    "go east": 4.0,
    "wait": 1.0,
    "look around": 1.0,
    "take key": 1.2,
    "open vault": 4.0,
}
"""The vault policy's unnormalised action weights (``pi(a | o)`` proportional to the weight)."""


def vault_policy(weights: Mapping[str, float] = VAULT_WEIGHTS) -> TabularPolicy:
    """The demo's current policy: ``pi(a | o) ∝ weights[a]`` over the admissible actions."""
    return TabularPolicy(log_weights(weights))


class VaultBatchPolicy:
    """The vault policy as a model serves one: ``act_batch(contexts)`` answers many contexts in one call (a
    :class:`~prover_core.protocols.BatchPolicy`), each sampled from its own ``context.rng`` as :func:`vault_policy`
    samples it, so verification costs one round of policy calls per turn of its longest continuation."""

    def __init__(self, weights: Mapping[str, float] = VAULT_WEIGHTS) -> None:
        self.policy = vault_policy(weights)

    def act_batch(self, contexts: Sequence[PolicyContext]) -> list[str]:
        return [self.policy.act(context) for context in contexts]
