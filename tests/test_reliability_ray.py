"""Setup errors on the Ray executor are raised typed, not counted as a skip per group (issue 13).
A real local Ray with 2 CPUs; one light worker per test. Skipped without Ray (extra ``prover-core[ray]``)."""

from __future__ import annotations

from typing import Any

import pytest

from prover_core import DivergenceJudge, compute_bonus
from prover_core.demo import MDPEnv, VaultMDP, vault_policy
from prover_core.errors import ProtocolError, ResourceError
from prover_core.executors import RayExecutor
from tests.conftest import importorskip
from tests.verify_support import BATCH
from tests.verify_support import make_restorable_env as make_env

ray = importorskip("ray")


def plain_env() -> MDPEnv:
    return MDPEnv(VaultMDP())  # reset/step only: not a RestorableEnv


def function_policy() -> Any:
    return lambda context: "wait"  # no act()


@pytest.mark.parametrize(
    "make_env_, make_policy, text",
    [(plain_env, vault_policy, "ReplayEnv"), (make_env, function_policy, "act")],
)
def test_ray_worker_built_from_wrong_factories_raises(
    ray_cluster: None, make_env_: Any, make_policy: Any, text: str
) -> None:
    executor = RayExecutor(make_env_, make_policy, num_workers=1)
    try:
        with pytest.raises(ProtocolError, match=text):
            executor.ready()
        with pytest.raises(ProtocolError, match=text):
            compute_bonus(BATCH, judge=DivergenceJudge(), executor=executor)
    finally:
        executor.shutdown()


def test_more_ray_workers_than_cpus_is_refused(ray_cluster: None) -> None:
    cpus = ray.cluster_resources()["CPU"]
    with pytest.raises(ResourceError, match="CPUs"):
        RayExecutor(make_env, vault_policy, num_workers=int(cpus) + 1)
    with pytest.raises(ProtocolError, match="make_restorable_env"):
        RayExecutor("not a factory", vault_policy)  # type: ignore[arg-type]
