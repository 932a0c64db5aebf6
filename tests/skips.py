"""The skipped tests of a run, against the allow-list ``tests/expected-skips.txt`` (issue 47: no silent skip).

``scripts/test`` runs ``python -m tests.skips REPORTS-DIR tests/expected-skips.txt`` after the test runs: it prints
every skipped test with its reason (from the junit reports, one per environment, named ``<env>.xml``) and exits 1
when a skip is not on the allow-list. An allow-listed test that ran is only noted (``PROVER_LLAMA_URL`` set, say).

The allow-list has one entry a line, ``<env> <test id>``; in the test id ``*`` stands for any text
(``tests/test_doc_commands.py::test_the_block_runs_as_written[*]``), and a whole module (``tests/test_x.py``, for a
module that skips at import) matches its tests too. ``#`` starts a comment. Test ids are relative to the working
directory (the repository root, where scripts/test runs).
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def node_id(classname: str, name: str, root: Path = ROOT) -> str:
    """pytest's node id from a junit ``classname`` and ``name``: ``tests.test_x`` + ``test_y[1]`` is
    ``tests/test_x.py::test_y[1]``; a module skipped at import has an empty classname and its dotted name."""
    if not classname:
        return name.replace(".", "/") + ".py" if (root / (name.replace(".", "/") + ".py")).exists() else name
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (root / path).exists():
            return "::".join([path, *parts[cut:], name])
    return f"{classname}::{name}"


def skipped(report: Path, root: Path = ROOT) -> list[tuple[str, str]]:
    """``(test id, reason)`` of every skipped test case of a junit report."""
    out = []
    for case in ET.parse(report).getroot().iter("testcase"):
        skip = case.find("skipped")
        if skip is not None:
            reason = skip.get("message", "")
            found = re.search(r"'Skipped: (.*)'\)$", skip.text or "")  # a module skipped at import: the reason
            if reason == "collection skipped" and found:
                reason = found.group(1)
            out.append((node_id(case.get("classname", ""), case.get("name", ""), root), reason))
    return out


def allow_list(path: Path) -> list[tuple[str, str]]:
    """``(env, test id pattern)`` entries of the allow-list."""
    entries = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"{path}:{number}: expected '<env> <test id>', got {raw!r}")
        entries.append((fields[0], fields[1]))
    return entries


def matches(test: str, pattern: str) -> bool:
    """``test`` is ``pattern`` (``*``: any text) or one of its tests."""
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, test) is not None or test.startswith(pattern + "::")


def allowed(env: str, test: str, entries: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The allow-list entry that covers ``test`` skipped in ``env``, or ``None``."""
    for entry_env, pattern in entries:
        if entry_env == env and matches(test, pattern):
            return entry_env, pattern
    return None


def check(reports: Path, expected: Path, root: Path = ROOT) -> int:
    """Print the skips of every ``<env>.xml`` under ``reports``; 1 if one is not allow-listed, else 0."""
    entries = allow_list(expected)
    used: set[tuple[str, str]] = set()
    unexpected = []
    for report in sorted(reports.glob("*.xml")):
        env = report.stem
        for test, reason in skipped(report, root):
            entry = allowed(env, test, entries)
            print(f"skipped ({env}): {test}: {reason}{'' if entry else '  <- NOT on the allow-list'}")
            if entry is None:
                unexpected.append((env, test))
            else:
                used.add(entry)
    ran = {report.stem for report in reports.glob("*.xml")}
    for entry in entries:
        if entry not in used and entry[0] in ran:
            print(f"note: allow-listed but not skipped ({entry[0]}): {entry[1]}")
    if unexpected:
        print(f"{len(unexpected)} unexpected skip(s): fix them, or add them to {expected} with the reason")
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m tests.skips REPORTS-DIR ALLOW-LIST")
    sys.exit(check(Path(sys.argv[1]), Path(sys.argv[2]), Path.cwd()))
