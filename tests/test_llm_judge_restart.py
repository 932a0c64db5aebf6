"""The LLM judge's llama-server killed in the middle of a step and restarted (not part of the default run).

``scripts/test-llm-judge`` passes the binary and the model (``LLAMA_SERVER``, ``LLAMA_MODEL``); this test
starts its own ``llama-server`` on a free loopback port so that it can kill it (SIGKILL, as a crash or an
OOM kill would) while groups are being judged, then start it again on the same port. What must hold:
every group the kill hit is a recorded skip whose reason names the failure, the step returns within
the judge's limit, and the next step's groups are judged normally (no connection failure, circuit closed).
Without the two variables it skips; ``PROVER_REQUIRE_LLM=1`` turns the skip into a failure.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from prover_core import ProverConfig, compute_bonus
from prover_core.judges.llm import LLMJudge
from tests.conftest import skip
from tests.test_llm_judge import make_group

pytestmark = pytest.mark.real_llm

BIN = os.environ.get("LLAMA_SERVER", "")
MODEL = os.environ.get("LLAMA_MODEL", "")
if not (BIN and Path(BIN).is_file() and MODEL and Path(MODEL).is_file()):
    if os.environ.get("PROVER_REQUIRE_LLM") == "1":
        raise RuntimeError("PROVER_REQUIRE_LLM=1 but LLAMA_SERVER / LLAMA_MODEL do not name files")
    skip("no llama-server binary and model (LLAMA_SERVER, LLAMA_MODEL)", allow_module_level=True)

JUDGE_LIMIT_S = 120.0
SERVER_ARGS = ("-t", "1", "-c", "8192", "-np", "4", "--jinja")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """One ``llama-server`` process on ``port`` (4 slots, 1 thread: the box is small)."""

    def __init__(self, port: int, log: Path) -> None:
        self.port, self.log = port, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [BIN, "-m", MODEL, "--host", "127.0.0.1", "--port", str(self.port), *SERVER_ARGS],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"llama-server exited: {self.log.read_text()[-2000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError("llama-server did not become healthy within 180 s")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture
def server(tmp_path: Path) -> Any:
    s = LlamaServer(free_port(), tmp_path / "llama-server.log")
    s.start()
    yield s
    s.kill()


def connection_failure(reason: str) -> bool:
    return any(text in reason for text in ("connection error", "circuit open", "timed out", "JudgeTimeoutError"))


def test_the_judge_server_killed_mid_step_and_restarted(server: LlamaServer) -> None:
    batch = [t for i in range(4) for t in make_group(f"g{i}")]
    config = ProverConfig(k=2, judge_timeout_s=JUDGE_LIMIT_S)
    hook = lambda t, turn, seed: turn >= 2  # noqa: E731
    judge = LLMJudge.from_url(
        f"http://127.0.0.1:{server.port}/v1",
        "smollm2",
        max_tokens=128,
        timeout_s=60.0,
        max_attempts=2,
        backoff_initial_s=0.2,
        backoff_jitter_s=0.0,
        max_repairs=1,
        max_concurrency=4,
    )
    box: dict[str, Any] = {}

    def step() -> None:
        box["result"] = compute_bonus(batch, judge=judge, continue_from=hook, config=config)

    started = time.monotonic()
    runner = threading.Thread(target=step, daemon=True)
    runner.start()
    while judge.stats()["calls"] < 1 and runner.is_alive():  # requests are in flight: kill the server now
        time.sleep(0.05)
    server.kill()
    runner.join(JUDGE_LIMIT_S + 30)
    assert not runner.is_alive(), "the step outlived the judge's limit"
    elapsed = time.monotonic() - started
    groups = box["result"].report.groups
    hit = [g for g in groups if g.status == "skipped"]
    assert hit, "the kill reached no group"
    assert all(g.stage == "propose" and "JudgeError" in g.reason and connection_failure(g.reason) for g in hit), [
        g.reason for g in hit
    ]
    assert elapsed < JUDGE_LIMIT_S + 30

    server.start()  # same port
    after = compute_bonus(batch, judge=judge, continue_from=hook, config=config).report.groups
    assert len(after) == 4 and not [g.reason for g in after if connection_failure(g.reason)]
    assert judge.stats()["circuit_open"] == 0 and judge.stats()["calls"] >= 4
    print(
        f"killed after {elapsed:.1f} s: {len(hit)}/4 groups skipped ({hit[0].reason[:120]}); "
        f"after the restart: {[g.status for g in after]}"
    )
