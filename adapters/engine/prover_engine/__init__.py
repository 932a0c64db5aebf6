"""Continuations on an inference engine: the current policy continues a recorded trajectory token-exactly.

A host's engine (vLLM, SGLang, TRT-LLM behind verl, OpenRLHF or TRL; or any OpenAI-compatible server)
implements :class:`TokenEngine`; :class:`EnginePolicy` turns it into a :class:`~prover_core.Policy`.
The context of a continuation from state ``s_b`` is exactly the token ids the agent saw before acting
at turn ``b`` (prompt ids + completion ids up to turn ``b``'s action span), then, for every new turn, the
generated action ids and the rendered observation ids: text is never re-tokenised.
:class:`OpenAICompletionsEngine` speaks to a ``/v1/completions`` server that takes token ids and returns
them (vLLM); :class:`SGLangEngine` to SGLang's native ``/generate`` (SGLang 0.5.12's ``/v1/completions``
returns no ids; docs/engines.md); :class:`LlamaServerEngine` to llama.cpp's ``llama-server``. They are
imported on first use, so that code without them does not pay for httpx and tenacity at import time.
:class:`ParityMonitor` compares the engine's logprobs of sampled tokens with the trainer's. The engines' errors
(:mod:`prover_engine.errors`) are exported here; their base, ``EngineError``, is the core's.
"""

from typing import TYPE_CHECKING, Any

from prover_engine.errors import (
    ContextLengthError,
    EngineAnswerTooLargeError,
    EngineHTTPError,
    EngineResponseError,
    EngineTimeoutError,
    TokenRecordError,
)
from prover_engine.layout import check_record, close_turn
from prover_engine.parity import ParityMonitor
from prover_engine.policy import EnginePolicy, action_seed
from prover_engine.protocol import Generation, SamplingParams, TokenEngine
from prover_engine.tokens import TokenSequence, TokenStore

if TYPE_CHECKING:
    from prover_engine.llama import LlamaServerEngine
    from prover_engine.openai import OpenAICompletionsEngine
    from prover_engine.sglang import SGLangEngine

__version__ = "0.1.0"

__all__ = [
    "ContextLengthError",
    "EngineAnswerTooLargeError",
    "EngineHTTPError",
    "EnginePolicy",
    "EngineResponseError",
    "EngineTimeoutError",
    "TokenRecordError",
    "Generation",
    "LlamaServerEngine",
    "OpenAICompletionsEngine",
    "SGLangEngine",
    "ParityMonitor",
    "SamplingParams",
    "TokenEngine",
    "TokenSequence",
    "TokenStore",
    "action_seed",
    "check_record",
    "close_turn",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAICompletionsEngine":
        from prover_engine.openai import OpenAICompletionsEngine

        return OpenAICompletionsEngine
    if name == "SGLangEngine":
        from prover_engine.sglang import SGLangEngine

        return SGLangEngine
    if name == "LlamaServerEngine":
        from prover_engine.llama import LlamaServerEngine

        return LlamaServerEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
