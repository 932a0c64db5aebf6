"""``python -m prover_openrlhf.launch [--prover.setup pkg.mod:factory] <openrlhf.cli.train_ppo_ray args>``.

Runs OpenRLHF's own PPO entry point (``openrlhf.cli.train_ppo_ray``) after

1. starting Ray (or connecting to ``RAY_ADDRESS``) with ``worker_process_setup_hook`` =
   :data:`~prover_openrlhf.install.WORKER_SETUP_HOOK`, so every worker, the trainer actor's
   included, builds :class:`~prover_openrlhf.ProverExperienceMaker`; OpenRLHF's ``train`` skips its
   own ``ray.init`` when Ray is already up, so it keeps these settings;
2. passing ``PROVER_OPENRLHF_SETUP`` (the factory of the :class:`~prover_openrlhf.ProverSetup`) and
   OpenRLHF's default environment variables to every worker;
3. creating the job-wide record store the recording executor writes to, and the registry of the vLLM
   engine handles (:mod:`prover_openrlhf.engine`);
4. wrapping OpenRLHF's ``create_vllm_engines`` so that the engines it creates are published to that
   registry, where the experience maker (in the trainer actor) finds them.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prover_openrlhf.engine import publish_on_create, registry
from prover_openrlhf.install import WORKER_SETUP_HOOK
from prover_openrlhf.prover_setup import SETUP_ENV
from prover_openrlhf.records import RayRecordStore

OPENRLHF_ENTRY = "openrlhf.cli.train_ppo_ray"
SETUP_FLAG = "--prover.setup"


def split_args(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """``(setup path or None, the remaining arguments for OpenRLHF)``."""
    rest: list[str] = []
    setup: str | None = None
    it = iter(argv)
    for arg in it:
        if arg == SETUP_FLAG:
            setup = next(it, None)
            if setup is None:
                raise SystemExit(f"{SETUP_FLAG} needs a value: package.module:factory")
        elif arg.startswith(SETUP_FLAG + "="):
            setup = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return setup, rest


def runtime_env(
    setup: str | None, hook: str = WORKER_SETUP_HOOK, env_vars: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The Ray runtime env: the worker setup hook, OpenRLHF's default env vars, the setup path, ``env_vars``."""
    merged = {
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
        "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
        "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"),
    }
    setup = setup or os.environ.get(SETUP_ENV)
    if setup:
        merged[SETUP_ENV] = setup
    merged.update(env_vars or {})
    return {"worker_process_setup_hook": hook, "env_vars": merged}


def run_hook(hook: str) -> None:
    """Call the function at the dotted path ``hook`` (the form Ray's ``worker_process_setup_hook`` takes)."""
    module_name, _, func = hook.rpartition(".")
    getattr(importlib.import_module(module_name), func)()


def start_ray(
    setup: str | None,
    hook: str = WORKER_SETUP_HOOK,
    env_vars: Mapping[str, str] | None = None,
    **init_kwargs: Any,
) -> RayRecordStore:
    """Install in this process, start Ray with :func:`runtime_env`, create the record store and engine registry."""
    import ray

    if ray.is_initialized():
        raise RuntimeError("Ray is already initialised in this process; the launcher must start it")
    setup = setup or os.environ.get(SETUP_ENV)
    if setup:
        os.environ[SETUP_ENV] = setup
    run_hook(hook)  # the driver too: a trainer built in this process gets the subclass as well
    ray.init(runtime_env=runtime_env(setup, hook, env_vars), **init_kwargs)
    store = RayRecordStore()
    _ = store.actor  # created by the driver, so it lives as long as the job
    registry(create=True)  # likewise
    return store


def main(argv: Sequence[str] | None = None, run: Callable[[list[str]], Any] | None = None) -> Any:
    """Start Ray for ProVer, then run OpenRLHF's trainer with the remaining arguments."""
    setup, rest = split_args(sys.argv[1:] if argv is None else argv)
    if not (setup or os.environ.get(SETUP_ENV)):
        raise SystemExit(f"give {SETUP_FLAG} package.module:factory (or set {SETUP_ENV})")
    start_ray(setup)
    publish_on_create()
    if run is not None:
        return run(rest)
    sys.argv = [OPENRLHF_ENTRY, *rest]
    return runpy.run_module(OPENRLHF_ENTRY, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
