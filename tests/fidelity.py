"""Which commit the real-model and real-judge runs last passed on (issue 47: fidelity runs tied to commits).

The doubles of llama-server and of an LLM judge (tests/llama_server.py, tests/chat_server.py) are checked against
the real thing only by ``scripts/test-real-model`` and ``scripts/test-llm-judge``, which CI cannot run. When one
passes it calls ``python -m tests.fidelity record NAME``: ``tests/real-runs/NAME.json`` then holds the commit,
whether the tree had uncommitted changes, and a digest of the code that run exercises (:data:`RUNS`). Commit that
file with the change. ``tests/test_fidelity.py`` compares the digests with the code as it is now and says, as a
visible skip, when the code changed after the last pass (or no pass was ever recorded). Standard library only:
the scripts run it in the TRL environment or the core one.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAMPS = "tests/real-runs"
"""Where the stamps live, relative to the repository root."""
RUNS: dict[str, tuple[str, ...]] = {
    "real-model": ("adapters/engine/prover_engine",),
    "llm-judge": ("prover_core/judges/llm",),
}
"""Each real run, by the name of its script (``scripts/test-NAME``), and the code whose fidelity it checks."""


def tree_digest(folder: Path) -> str:
    """SHA-256 over the relative paths and contents of the files under ``folder`` (caches left out), in path order."""
    digest = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def digests(name: str, root: Path = ROOT) -> dict[str, str]:
    return {folder: tree_digest(root / folder) for folder in RUNS[name]}


def _git(*args: str, root: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def record(name: str, root: Path = ROOT) -> Path:
    """Write ``tests/real-runs/NAME.json`` for a run that just passed on the code under ``root``."""
    status = _git("status", "--porcelain", "--", *RUNS[name], root=root)
    stamp = {
        "run": f"scripts/test-{name}",
        "commit": _git("rev-parse", "HEAD", root=root) or "unknown",
        "uncommitted_changes": bool(status),
        "passed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "digests": digests(name, root),
    }
    path = root / STAMPS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stamp, indent=2) + "\n")
    return path


def staleness(name: str, root: Path = ROOT) -> str | None:
    """Why the last recorded pass of run ``name`` does not cover the code as it is now, or ``None`` when it does."""
    path = root / STAMPS / f"{name}.json"
    if not path.exists():
        return f"no recorded pass of scripts/test-{name} ({path.relative_to(root)} is missing)"
    stamp = json.loads(path.read_text())
    recorded = stamp.get("digests", {})
    changed = [folder for folder, digest in digests(name, root).items() if recorded.get(folder) != digest]
    if not changed:
        return None
    return (
        f"{', '.join(changed)} changed after scripts/test-{name} last passed "
        f"(commit {str(stamp.get('commit'))[:12]}, {stamp.get('passed_at')}): run it again"
    )


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record" or sys.argv[2] not in RUNS:
        sys.exit(f"usage: python -m tests.fidelity record {{{','.join(RUNS)}}}")
    print(f"recorded {record(sys.argv[2]).relative_to(ROOT)}")
