"""One step's verification on an inference engine: 16 groups x 2K continuations through EnginePolicy.

Starts the loopback completions server (``tests/completions_server.py``) in a process of its own (so
that its threads do not share the client's interpreter lock); it answers every request after
``--latency`` seconds in its own thread, as a batching engine serves concurrent requests together.
Each group (8 runs of ``tests/engine_support.KeyEnv``, 2 successes) is verified on turn 1 of its
successful run: K continuations from turn 1 (``horizon - 1`` engine calls each) and K from turn 2
(``horizon - 2`` calls), every call a real HTTP request carrying the token-exact context, through
``acompute_bonus`` with ``EnginePolicy`` over ``OpenAICompletionsEngine`` (connections held open for
the step with ``engine.session()``).

Prints, measured in the same run: the longest continuation run alone (the physical limit when
everything runs concurrently), the wall time of the whole step with every continuation in flight, and
the same step with ``max_concurrency=1`` (serial engine calls) on ``--serial-groups`` groups,
extrapolated linearly to all groups (serial time is linear in the number of calls); the same step with
an in-process engine that sleeps the same latency (no HTTP: the library's own share); the client's and
the server's CPU time per engine call, and the machine's load average, since on a busy machine the
loopback server and the client compete for the cores.

    python benchmarks/engine_verify.py                      # ~30 s (45 s on a loaded 2-core machine)
    python benchmarks/engine_verify.py --serial-groups 16   # the full serial baseline (~2.5 min)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Coroutine, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prover_core import ProverConfig, ReplayEnv, acompute_bonus
from prover_core.bonus import BonusResult
from prover_core.continuations import run_continuation
from prover_engine import EnginePolicy, Generation, OpenAICompletionsEngine, SamplingParams, TokenEngine
from tests.completions_server import CompletionsServer
from tests.engine_support import FixedJudge, KeyEnv, key_group, parse, render, seed_model, store_of


def serve(conn: Connection, latency: float) -> None:
    """Run the server until the parent says stop (or dies: ``recv`` then raises and the server stops)."""
    with CompletionsServer(seed_model, latency_s=latency) as server:
        conn.send(server.url)
        with contextlib.suppress(EOFError):
            conn.recv()


class SleepEngine:
    """The same model in-process, no HTTP: sleeps ``latency`` then answers (the library's own cost alone)."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        await asyncio.sleep(self.latency)
        return Generation(tuple(seed_model(list(prompt_ids), {"seed": params.seed})))


def timed(policy: EnginePolicy, work: Coroutine[Any, Any, Any]) -> tuple[float, float, Any]:
    """``(wall s, client CPU s, result)`` of ``work``, run inside one engine session."""

    async def go() -> Any:
        engine = policy.engine
        if not isinstance(engine, OpenAICompletionsEngine):
            return await work
        async with engine.session():
            return await work

    wall, cpu = time.perf_counter(), time.process_time()
    result = asyncio.run(go())
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--horizon", type=int, default=4, help="turns per episode (continuations: 3 and 2 calls)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the server takes per request")
    parser.add_argument("--repeats", type=int, default=3, help="times each measurement is taken (median)")
    parser.add_argument("--serial-groups", type=int, default=1, help="groups timed serially (then extrapolated)")
    args = parser.parse_args()

    rows = [row for g in range(args.groups) for row in key_group(f"g{g:02d}", horizon=args.horizon)]
    store = store_of(rows)
    batch = [t for t, _, _ in rows]
    width = 2 * args.k * args.groups
    config = ProverConfig(k=args.k, max_concurrency=width)
    env = ReplayEnv(lambda: KeyEnv(horizon=args.horizon))
    calls = args.groups * args.k * (2 * args.horizon - 3)

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=serve, args=(child, args.latency), daemon=True)
    process.start()
    url = parent.recv()
    stats_url = url.removesuffix("/v1") + "/stats"

    def policy(limit: int, engine: TokenEngine | None = None) -> EnginePolicy:
        engine = engine or OpenAICompletionsEngine(url, "bench-model", max_concurrency=limit, timeout_s=60.0)
        sampling = SamplingParams(max_tokens=1)
        return EnginePolicy(
            engine, store, render_observation=render, parse_action=parse, sampling=sampling, max_concurrency=limit
        )

    def step(groups: int, limit: int, engine: TokenEngine | None = None) -> tuple[float, float, BonusResult]:
        p = policy(limit, engine)
        return timed(p, acompute_bonus(batch[: 8 * groups], judge=FixedJudge(1, 1), env=env, policy=p, config=config))

    try:
        singles = []  # the physical limit: the longest continuation (from turn 1), alone
        for seed in range(args.repeats):
            p = policy(1)
            singles.append(timed(p, run_continuation(env, p, batch[0], 1, seed, args.horizon))[0])
        before = httpx.get(stats_url).json()
        steps = [step(args.groups, width) for _ in range(args.repeats)]
        after = httpx.get(stats_url).json()
        serial_wall, _, serial = step(args.serial_groups, 1)
        local = [step(args.groups, width, SleepEngine(args.latency)) for _ in range(args.repeats)]
    finally:
        parent.send("stop")
        process.join(timeout=10)

    single = statistics.median(singles)
    wall = statistics.median(w for w, _, _ in steps)
    cpu = statistics.median(c for _, c, _ in steps)
    local_wall = statistics.median(w for w, _, _ in local)
    local_cpu = statistics.median(c for _, c, _ in local)
    server_cpu = (after["cpu_s"] - before["cpu_s"]) / (after["requests"] - before["requests"])
    result = steps[0][2]
    serial_full = serial_wall * args.groups / args.serial_groups
    same = all(
        a.verification == b.verification
        for a, b in zip(serial.report.groups, result.report.groups[: args.serial_groups], strict=True)
    )
    print(
        f"{args.groups} groups x 2K={2 * args.k} continuations = {width} continuations, {calls} engine calls, "
        f"server latency {args.latency:.3f} s per call; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(f"groups: {dict(result.report.summary())}; serial and concurrent verifications identical: {same}")
    print(
        f"longest continuation, alone:      {single:7.3f} s  ({args.horizon - 1} calls: "
        f"{args.horizon - 1} x latency = {(args.horizon - 1) * args.latency:.3f} s)"
    )
    print(
        f"whole verification, concurrent:   {wall:7.3f} s  (median of {', '.join(f'{w:.3f}' for w, _, _ in steps)}; "
        f"most requests in flight at the server: {after['max_in_flight']})"
    )
    print(
        f"whole verification, serial:       {serial_full:7.3f} s  "
        f"({args.serial_groups} group(s) measured: {serial_wall:.3f} s, x {args.groups / args.serial_groups:g})"
    )
    print(
        f"same, in-process engine (no HTTP): {local_wall:7.3f} s  "
        f"(median of {', '.join(f'{w:.3f}' for w, _, _ in local)}: the library's own share)"
    )
    print(
        f"CPU per engine call: client {1000 * cpu / calls:.2f} ms (of which the library without HTTP "
        f"{1000 * local_cpu / calls:.2f} ms), loopback server {1000 * server_cpu:.2f} ms"
    )
    print(f"concurrent / longest continuation: {wall / single:6.2f}  (1 is the physical limit)")
    print(f"serial / concurrent:               {serial_full / wall:6.1f}")


if __name__ == "__main__":
    main()
