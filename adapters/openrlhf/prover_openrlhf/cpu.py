"""Importing OpenRLHF's experience code on a machine without a GPU (for tests and CPU-only tools).

OpenRLHF 0.11.2 cannot be imported whole without CUDA:

* ``openrlhf/trainer/ray/__init__.py`` imports ``vllm_engine``, which imports vLLM (a CUDA build;
  not installable against the CPU build of torch);
* ``flash_attn/__init__.py`` imports the compiled ``flash_attn_2_cuda`` kernels (absent when
  flash-attn is installed with ``FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE``), and OpenRLHF's
  ``models/ring_attn_utils.py`` imports ``flash_attn.bert_padding`` through it.

:func:`import_openrlhf_on_cpu` registers those two *packages* without running their ``__init__``
files (the package objects point at the installed directories), so that their real submodules load
from the installed files: ``openrlhf.trainer.ray.launcher``, ``flash_attn.bert_padding``,
``flash_attn.utils.distributed``. Nothing is stubbed: a module that needs vLLM or the CUDA kernels
(``vllm_engine``, ``samples_generator``, ``ppo_trainer``) still fails to import. Never call this where
vLLM and flash-attn work (a GPU training job): there the packages must initialise normally.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types

SHELL_PACKAGES = ("flash_attn", "openrlhf.trainer.ray")


def _shell_package(name: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not an installed package")
    locations = list(spec.submodule_search_locations)
    module = types.ModuleType(name)
    module.__path__ = locations
    module.__package__ = name
    module.__file__ = spec.origin
    shell_spec = importlib.machinery.ModuleSpec(name, None, origin=spec.origin, is_package=True)
    shell_spec.submodule_search_locations = locations
    module.__spec__ = shell_spec
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(importlib.import_module(parent), child, module)


def import_openrlhf_on_cpu() -> types.ModuleType:
    """Import ``openrlhf.trainer.ppo_utils.experience_maker`` without vLLM or flash-attn's CUDA kernels."""
    for name in SHELL_PACKAGES:
        _shell_package(name)
    return importlib.import_module("openrlhf.trainer.ppo_utils.experience_maker")


def cpu_worker_setup() -> None:
    """A Ray ``worker_process_setup_hook`` for CPU-only tests: the CPU import, then :func:`install`."""
    import_openrlhf_on_cpu()
    from prover_openrlhf.install import install

    install()
