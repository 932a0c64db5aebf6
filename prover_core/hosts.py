"""Checking that an adapter's host library is installed, with an install hint instead of a bare ImportError."""

from __future__ import annotations

import importlib.util

from prover_core.errors import HostImportError


def require_hosts(*modules: str, adapter: str, hint: str) -> None:
    """Raise :class:`HostImportError` (naming ``adapter``, with ``hint``) unless all ``modules`` are installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise HostImportError(f"{adapter} needs {', '.join(missing)}, which is not installed. {hint}")
