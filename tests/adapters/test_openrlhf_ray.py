"""Installing ProverExperienceMaker where OpenRLHF's trainer builds it: inside a Ray worker.

A real local Ray cluster is started the way ``python -m prover_openrlhf.launch`` starts it
(``launch.start_ray``: worker setup hook, ``PROVER_OPENRLHF_SETUP`` passed to every worker, job-wide
record store). On CPU the hook is ``prover_openrlhf.cpu.cpu_worker_setup`` (the CPU import of
OpenRLHF, then the same ``install()``); a GPU job uses ``prover_openrlhf.install.install``. A task in
a fresh worker then does what ``openrlhf/trainer/ppo_trainer.py`` does (``from ...experience_maker
import RemoteExperienceMaker`` at import, then ``RemoteExperienceMaker(actor, critic, reward, ref,
kl_ctl, strategy, tokenizer)`` in ``BasePPOTrainer.__init__``) and runs the advantage step; the trainer
module itself needs vLLM and cannot be imported on CPU.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.conftest import skip
from tests.hosts import require_host

require_host("openrlhf")
ray = require_host("ray")

import prover_engine  # noqa: E402
from prover_openrlhf import launch  # noqa: E402
from prover_openrlhf.install import WORKER_SETUP_HOOK, installed, uninstall  # noqa: E402
from prover_openrlhf.prover_setup import SETUP_ENV, ProverSetup  # noqa: E402
from prover_openrlhf.records import STORE_ACTOR_NAME, RayRecordStore, record_key  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADAPTER_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(launch.__file__)))  # where prover_openrlhf lives
ENGINE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(prover_engine.__file__)))  # where prover_engine lives


def test_split_args_takes_the_setup_flag_and_keeps_openrlhf_args() -> None:
    argv = ["--actor.model_name_or_path", "m", "--prover.setup", "pkg.mod:make", "--rollout.n_samples_per_prompt", "8"]
    assert launch.split_args(argv) == (
        "pkg.mod:make",
        ["--actor.model_name_or_path", "m", "--rollout.n_samples_per_prompt", "8"],
    )
    assert launch.split_args(["--prover.setup=a.b:c", "--x"]) == ("a.b:c", ["--x"])
    with pytest.raises(SystemExit):
        launch.split_args(["--prover.setup"])


def test_runtime_env_names_the_hook_and_the_setup() -> None:
    env = launch.runtime_env("pkg.mod:make")
    assert env["worker_process_setup_hook"] == WORKER_SETUP_HOOK == "prover_openrlhf.install.install"
    assert env["env_vars"][SETUP_ENV] == "pkg.mod:make"
    assert env["env_vars"]["RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"] in ("0", "1")  # OpenRLHF's own defaults kept


def make_setup(maker: Any) -> ProverSetup:
    """The factory named by PROVER_OPENRLHF_SETUP in the workers (see tests/adapters/test_openrlhf.py)."""
    from tests.adapters import test_openrlhf as t

    return ProverSetup(
        judge=t.FixedJudge(),
        continue_from=t.CountingContinuations({0: t.PRE_SUCCESSES, 2: t.POST_SUCCESSES}),
        config=t.ProverConfig(k=8, lam=t.LAM),
    )  # store: the default RayRecordStore, shared with the driver


def trainer_side(estimator: str) -> dict[str, Any]:
    """In a fresh worker: what BasePPOTrainer does, then one advantage step."""
    import torch
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker  # ppo_trainer.py line 14

    from tests.adapters import test_openrlhf as t

    maker = RemoteExperienceMaker(*t.maker_args(estimator))  # BasePPOTrainer.__init__'s call
    experiences = maker.compute_advantages_and_returns(t.prepared(maker, t.rollout_samples()))
    adv = t.by_sample(experiences)[t.SUCCESS]
    inside = t.segment_positions(t.SUCCESS)
    hand = t.hand_stock(estimator, len(adv), t.SUCCESS)
    return {
        "class": type(maker).__name__,
        "mro": [c.__name__ for c in type(maker).__mro__],
        "setup_env": os.environ.get(SETUP_ENV),
        "statuses": {g.group_id: g.status for g in maker.last_report.groups},
        "bonus_inside": float((adv[inside] - torch.tensor(hand)[inside]).mean()),
        "pid": os.getpid(),
    }


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    if ray.is_initialized():
        skip("Ray is already running in this process")
    store = launch.start_ray(
        f"{__name__}:make_setup",
        hook="prover_openrlhf.cpu.cpu_worker_setup",
        env_vars={"PYTHONPATH": os.pathsep.join([REPO, ENGINE_ROOT, ADAPTER_ROOT])},
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
    )
    yield store
    ray.shutdown()
    os.environ.pop(SETUP_ENV, None)
    uninstall()  # start_ray ran the hook in this process too


def test_the_hook_also_ran_in_the_driver(ray_cluster: RayRecordStore) -> None:
    from openrlhf.trainer.ppo_utils import experience_maker

    assert installed() and experience_maker.RemoteExperienceMaker.__name__ == "ProverExperienceMaker"


def test_trainer_actor_builds_the_prover_maker_and_credits(ray_cluster: RayRecordStore) -> None:
    from tests.adapters import test_openrlhf as t

    # The rollout side (here the driver) writes the records to the job-wide store.
    for i, layout in enumerate(t.LAYOUTS):
        ray.get(ray_cluster.put(record_key(t.sample_tokens(layout)[0]), t.record_of(i).model_dump()))

    result = ray.get(ray.remote(num_cpus=1)(trainer_side).remote("group_norm"), timeout=300)
    assert result["pid"] != os.getpid()
    assert result["class"] == "ProverExperienceMaker"
    assert result["mro"][:2] == ["ProverExperienceMaker", "RemoteExperienceMaker"]
    assert result["setup_env"] == f"{__name__}:make_setup"
    assert result["statuses"] == {"0": "accepted", "1": "not_eligible"}
    assert result["bonus_inside"] == pytest.approx(t.BONUS, abs=1e-6)
    # The worker took every record out of the named store.
    assert ray.get(ray.get_actor(STORE_ACTOR_NAME).take.remote(["x"])) == [None]
    assert ray.get(ray.get_actor(STORE_ACTOR_NAME).__len__.remote()) == 0


def test_launcher_refuses_to_start_without_a_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SETUP_ENV, raising=False)
    with pytest.raises(SystemExit, match=r"--prover\.setup"):
        launch.main(["--actor.model_name_or_path", "m"], run=lambda rest: rest)
