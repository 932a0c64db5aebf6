"""An on-disk cache of chat responses keyed by the SHA-256 of the request body.

The key covers everything sent (model, messages, tools, response format, sampling settings) but not
the server address or the API key, so a rerun of the same step against any server hosting the same
model costs nothing. With ``temperature > 0`` the cached answer is one sample, replayed.
Files are written atomically (temporary file, then ``os.replace``) with mode 0o600, in directories made with
mode 0o700. A directory given that is a link, another user's, or writable by others is refused
(:class:`ValueError`): whoever can write there chooses the judge's answers. An entry is read only if it is a
regular file (opened without following a link and without blocking, so a FIFO or a device at its path cannot
stall the event loop) of at most ``max_bytes``; anything else, and an unreadable entry, is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["ResponseCache", "request_key"]


def request_key(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``payload`` (sorted keys, no whitespace)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class ResponseCache:
    """``get``/``put`` of response bodies under ``directory/<key[:2]>/<key>.json``, entries of at most ``max_bytes``."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = _private_dir(Path(directory))
        self.max_bytes = max_bytes

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            text = self._read(self._path(key))
            value = json.loads(text) if text is not None else None
        except (OSError, ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    def _read(self, path: Path) -> str | None:
        """The entry's text if it is a regular file of at most ``max_bytes``; ``None`` otherwise."""
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > self.max_bytes:
                return None
            data = handle.read(self.max_bytes + 1)  # the file may have grown since fstat
        return data.decode("utf-8") if len(data) <= self.max_bytes else None

    def put(self, key: str, body: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")  # mode 0o600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(body, handle, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _private_dir(where: Path) -> Path:
    """``where``, made with mode 0o700 if missing; :class:`ValueError` unless it is a directory of this user that no
    one else may write to (not a link)."""
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = where.lstat()
    owner = getattr(os, "getuid", None)
    if not stat.S_ISDIR(info.st_mode) or (owner is not None and info.st_uid != owner()) or info.st_mode & 0o022:
        raise ValueError(
            f"cache_dir {str(where)!r} is not a private directory (a link, another user's, or writable by others): "
            "whoever can write there chooses the judge's answers; give a directory of your own"
        )
    return where
