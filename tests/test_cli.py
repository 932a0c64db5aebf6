"""The ``prover`` command: argument validation (exit 2 with a message, no traceback), ``--version``,
and the demo's LLM-judge flags against a slow scripted server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import prover_core
from prover_core.cli import main
from tests.chat_server import ChatServer, Reply, answer

ROOT = Path(__file__).resolve().parents[1]
JUDGE = ["--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "m"]


def fails_with_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``prover argv``; assert argparse's exit status 2; return stderr."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: prover") and "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--groups", "0"], "argument --groups: must be at least 1, got 0"),
        (["-k", "0"], "argument -k: must be at least 1, got 0"),
        (["-k", "-3"], "argument -k: must be at least 1, got -3"),
        (["--group-size", "0"], "argument --group-size: must be at least 1, got 0"),
        (["--groups", "two"], "argument --groups: expected an integer, got 'two'"),
        ([*JUDGE, "--judge-timeout", "0"], "argument --judge-timeout: must be a positive number, got 0"),
        ([*JUDGE, "--judge-timeout", "nan"], "argument --judge-timeout: must be a positive number, got nan"),
        ([*JUDGE, "--judge-concurrency", "0"], "argument --judge-concurrency: must be at least 1, got 0"),
    ],
    ids=["groups-0", "k-0", "k-negative", "group-size-0", "groups-word", "timeout-0", "timeout-nan", "concurrency-0"],
)
def test_bad_numbers_are_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in fails_with_usage(["demo", *argv], capsys)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--judge-model", "m"], "--judge-model need(s) --judge-url"),
        (["--judge-mode", "agentic", "--judge-timeout", "5"], "--judge-mode, --judge-timeout need(s) --judge-url"),
        (["--judge-url", "http://127.0.0.1:9/v1"], "--judge-url needs --judge-model"),
        (["--judge-url", "ftp://host/v1", "--judge-model", "m"], "base_url must start with http:// or https://"),
        (
            ["--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "m", "--judge-api-key-env", "PROVER_UNSET_KEY"],
            "environment variable 'PROVER_UNSET_KEY' (the judge's API key) is not set",
        ),
    ],
    ids=["model-without-url", "options-without-url", "url-without-model", "bad-url", "unset-key-variable"],
)
def test_llm_judge_options_are_checked(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    os.environ.pop("PROVER_UNSET_KEY", None)
    assert message in fails_with_usage(["demo", *argv], capsys)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"prover {prover_core.__version__}\n"


def test_the_command_line_exits_2_without_a_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "prover_core.cli", "demo", "--groups", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2 and "must be at least 1, got 0" in done.stderr and "Traceback" not in done.stderr


def test_a_judge_too_slow_for_its_timeout_is_explained_and_fails_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    with ChatServer([answer(1, 1, delay_s=0.6)]) as server:
        argv = ["demo", "--groups", "6", "--judge-url", server.url, "--judge-model", "m"]
        code = main([*argv, "--judge-timeout", "0.1", "--judge-attempts", "1"])
    out, err = capsys.readouterr()
    skipped = int(re.search(r"(\d+) skipped", out).group(1))  # type: ignore[union-attr]
    assert code == 1 and skipped >= 1 and len(server.requests) == skipped  # one attempt per group
    assert f"Skipped groups, by reason (each keeps its GRPO credit): {skipped}" in out
    timed_out = (
        r"failed after 1 attempt\(s\): timed out \(AnswerTimeout: the whole answer took longer than timeout_s; "
        r"timeout_s=0.1, connect_timeout_s=10\)"
    )
    assert max(len(line) for line in out.splitlines()) <= 100  # long reasons are wrapped, not cut
    flat = re.sub(r"\n +", " ", out)
    assert re.search(rf"credit\): {skipped} {skipped} x propose: JudgeError: chat server \S+ {timed_out}", flat)
    assert f"all {skipped} eligible groups were skipped" in err


def test_json_output_stays_json_and_the_reasons_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with ChatServer([Reply(status=500, body={"error": {"message": "tools param requires --jinja flag"}})]) as server:
        code = main(["demo", "--groups", "4", "--json", "--judge-url", server.url, "--judge-model", "m"])
    out, err = capsys.readouterr()
    metrics = json.loads(out)
    assert code == 1 and metrics["prover/judge/retries"] == 0
    reason = "propose: JudgeUnsupportedError: chat server"
    flat = re.sub(r"\n +", " ", err)
    assert f"{metrics['prover/groups_skipped']:.0f} x {reason}" in flat and "start llama-server with --jinja" in flat


def test_judge_concurrency_caps_requests_in_flight(capsys: pytest.CaptureFixture[str]) -> None:
    in_flight, peak = [0], [0]
    lock = threading.Lock()

    def slow(body: dict[str, Any], index: int) -> Reply:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.15)
        with lock:
            in_flight[0] -= 1
        return answer(None, None, failure_mode="no idea")

    with ChatServer(slow) as server:
        argv = ["demo", "--groups", "8", "--judge-url", server.url, "--judge-model", "m", "--judge-concurrency", "2"]
        assert main(argv) == 0
    assert len(server.requests) >= 3 and peak[0] == 2
    assert f"{len(server.requests)} declined" in capsys.readouterr().out


def test_the_demo_reports_progress_on_a_long_run_only() -> None:
    """``prover demo``'s progress on stderr (``cli.DemoProgress``): nothing in the first 2 s of the call (the default
    demo takes a fraction of a second and prints none), then a line at most every 2 s of the call's own clock."""
    import io

    from prover_core.cli import DemoProgress
    from prover_core.progress import Progress

    out = io.StringIO()
    progress = DemoProgress(out)
    for seconds in (0.1, 1.9, 2.0, 2.5, 3.9, 4.0, 7.5):
        progress(Progress(3, 40, None, seconds, "round", continuations=10, rounds=4))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # at 2.0, 4.0 and 7.5 s
    assert all(line.startswith("prover demo: verifying: round 4 of policy calls") for line in lines)
    assert "3/40 eligible groups done, 7.5 s" in lines[-1]
