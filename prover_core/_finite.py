"""Finite numbers only: one pydantic rule for every float a user configures.

NaN and infinity pass every ``gt``/``ge`` bound check (``nan > 0`` is false, but so is ``nan <= 0``)
and then do harm far from where they were set: ``lam=inf`` makes an infinite bonus, ``std_eps=inf``
zeroes every advantage, an engine's ``backoff_s=nan`` sleeps forever. pydantic refuses them with
``allow_inf_nan=False``: models set :data:`FINITE` in their ``model_config``, plain constructors
validate their arguments with :func:`finite_arguments` (or some of them with :func:`check_finite`).
The error is pydantic's ``ValidationError`` (a ``ValueError``) naming the field: "Input should be a
finite number".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ConfigDict, validate_call

F = TypeVar("F", bound=Callable[..., Any])

FINITE = ConfigDict(allow_inf_nan=False)
"""pydantic model config: no NaN or infinity in any float field."""


def finite_arguments(fn: F) -> F:
    """``fn`` with its annotated arguments validated by pydantic, floats finite (objects checked by ``isinstance``)."""
    return validate_call(config=ConfigDict(allow_inf_nan=False, arbitrary_types_allowed=True))(fn)


@validate_call(config=FINITE)
def check_finite(**values: float | None) -> None:
    """Raise pydantic's ``ValidationError`` naming each of ``values`` that is NaN or infinite (``None`` passes)."""
