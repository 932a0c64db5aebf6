"""Which generation backend a ``GRPOTrainer`` uses, and whether generating needs every process at once.

TRL's generation is *collective* when every process must call it together: vLLM server mode
(``VLLMGeneration.generate`` gathers all prompts to the main process, which alone holds the
``VLLMClient``, and broadcasts the completions back), vLLM colocate mode with tensor parallelism
(the ranks of a TP group generate together), and transformers generation under DeepSpeed ZeRO-3 or
FSDP (the forward pass gathers sharded parameters). Colocate mode without tensor parallelism, and
plain DDP, generate on each process alone.
"""

from __future__ import annotations

from typing import Any, Literal

Backend = Literal["vllm_server", "vllm_colocate", "transformers"]


def backend(trainer: Any) -> Backend:
    """``vllm_server``, ``vllm_colocate`` or ``transformers`` (plain or continuous batching)."""
    if not getattr(trainer, "use_vllm", False):
        return "transformers"
    return "vllm_server" if getattr(trainer, "vllm_mode", "server") == "server" else "vllm_colocate"


def sharded(trainer: Any) -> bool:
    """True under DeepSpeed ZeRO-3 or FSDP (a forward pass gathers parameters from every process)."""
    zero3 = (
        bool(getattr(trainer, "is_deepspeed_enabled", False))
        and getattr(getattr(trainer.accelerator.state, "deepspeed_plugin", None), "zero_stage", 0) == 3
    )
    return zero3 or bool(getattr(trainer, "is_fsdp_enabled", False))


def collective_generation(trainer: Any) -> bool:
    """True when ``trainer._generate_single_turn`` must be called by every process together."""
    if trainer.accelerator.num_processes == 1:
        return False
    kind = backend(trainer)
    if kind == "vllm_server":
        return True
    if kind == "vllm_colocate":
        return int(getattr(trainer.args, "vllm_tensor_parallel_size", 1)) > 1 or sharded(trainer)
    return sharded(trainer)
