"""Progress bars (tqdm, imported lazily; silent without it) and confidence intervals over seeds."""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

# two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def progress(items: Iterable[T], total: int | None = None, desc: str = "", enabled: bool = True) -> Iterator[T]:
    """``items`` with a tqdm bar on stderr when tqdm is installed and ``enabled``."""
    if enabled:
        try:
            tqdm = importlib.import_module("tqdm").tqdm
        except ImportError:
            pass
        else:
            yield from tqdm(items, total=total, desc=desc, leave=False, dynamic_ncols=True)
            return
    yield from items


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, half-width)`` of the 95% Student-t interval: ``t_{0.975, n-1} * s / sqrt(n)`` (0 for ``n < 2``)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    return mean, t * sd / math.sqrt(n)
