"""PrefixGate: calls that share a prefix key reach the engine together (order worked by hand)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Hashable, Sequence
from typing import Any

import pytest

from prover_core import ProverConfig
from prover_engine import EnginePolicy, Generation, SamplingParams
from prover_engine.schedule import PrefixGate
from tests.engine_support import key_group, parse, render, store_of, verify_key_group


async def admissions(gate: PrefixGate, arrivals: Sequence[Hashable]) -> list[str]:
    """Each call holds its slot for two loop turns; returns the order in which calls got their slots."""
    order: list[str] = []
    counts: dict[Hashable, int] = {}

    async def call(key: Hashable) -> None:
        counts[key] = counts.get(key, 0) + 1
        name = f"{key}{counts[key]}"
        async with gate.slot(key):
            order.append(name)
            assert gate.in_flight <= gate.limit
            await asyncio.sleep(0)
            await asyncio.sleep(0)

    await asyncio.gather(*(call(key) for key in arrivals))
    return order


def test_a_freed_slot_goes_to_a_key_in_flight_then_to_the_oldest_waiting_key() -> None:
    """Limit 2, arrivals A B C A B C A B C. A1 and B1 take the slots; A1's slot goes to B2 (B is in flight,
    A no longer is), B1's to B3; once B is done, C (oldest waiting) runs to the end, then A."""
    order = asyncio.run(admissions(PrefixGate(2), "ABCABCABC"))
    assert order == ["A1", "B1", "B2", "B3", "C1", "C2", "C3", "A2", "A3"]


def test_distinct_keys_are_first_come_first_served_and_cancelled_waiters_leave() -> None:
    assert asyncio.run(admissions(PrefixGate(2), ["a", "b", "c", "d"])) == ["a1", "b1", "c1", "d1"]
    # one slot: nothing is in flight when it frees; the key admitted last goes on (A2 before B1)
    assert asyncio.run(admissions(PrefixGate(1), "ABAB")) == ["A1", "A2", "B1", "B2"]

    async def cancel_a_waiter() -> tuple[int, int]:
        gate = PrefixGate(1)
        release = asyncio.Event()

        async def hold() -> None:
            async with gate.slot("x"):
                await release.wait()

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0)
        waiter = asyncio.create_task(hold())
        await asyncio.sleep(0)
        waiter.cancel()
        release.set()
        await holder
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return gate.in_flight, len(gate._waiting)

    assert asyncio.run(cancel_a_waiter()) == (0, 0)
    with pytest.raises(ValueError, match="limit"):
        PrefixGate(0)


class OrderEngine:
    """An async engine that records which group each call continues (the first prompt id: 1 or 9)."""

    def __init__(self) -> None:
        self.groups: list[int] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        self.groups.append(prompt_ids[0])
        await asyncio.sleep(0)
        return Generation((50 + int(params.seed or 0) % 2,))


def switches(groups: list[int]) -> int:
    return sum(a != b for a, b in itertools.pairwise(groups))


def run(group_prefixes: bool) -> tuple[list[int], Any]:
    """Two eligible groups whose rows differ in their first prompt id (g: 1, h: 9); K=4, one slot."""
    rows = key_group("g", successes=2) + [(t, [9, *p], c) for t, p, c in key_group("h", successes=2)]
    engine = OrderEngine()
    policy = EnginePolicy(
        engine, store_of(rows), render_observation=render, parse_action=parse, sampling=SamplingParams(max_tokens=1),
        max_concurrency=1, group_prefixes=group_prefixes,
    )  # fmt: skip
    result = verify_key_group(rows, policy, ProverConfig(k=4, seed=1, curtail=False))  # one round
    return engine.groups, result


def test_continuations_of_one_trajectory_reach_the_engine_together_and_results_do_not_change() -> None:
    grouped, with_gate = run(True)
    fifo, without = run(False)
    assert sorted(grouped) == sorted(fifo) and len(grouped) == 2 * (4 * 3 + 4 * 2)
    assert switches(grouped) == 1  # all of one group's 20 calls, then all of the other's
    assert switches(fifo) > 1
    assert with_gate.advantages == without.advantages
    assert {k: v.tolist() for k, v in with_gate.turn_bonus.items()} == {
        k: v.tolist() for k, v in without.turn_bonus.items()
    }
