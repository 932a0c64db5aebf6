"""An on-disk cache of chat responses keyed by the SHA-256 of the request body.

The key covers everything sent (model, messages, tools, response format, sampling settings) but not
the server address or the API key, so a rerun of the same step against any server hosting the same
model costs nothing. With ``temperature > 0`` the cached answer is one sample, replayed.
Files are written atomically (temporary file, then ``os.replace``); an unreadable entry is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["ResponseCache", "request_key"]


def request_key(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``payload`` (sorted keys, no whitespace)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class ResponseCache:
    """``get``/``put`` of response bodies under ``directory/<key[:2]>/<key>.json``."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            value = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, body: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(body, handle, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
