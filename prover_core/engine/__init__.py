"""Continuations on an inference engine: the current policy continues a recorded trajectory token-exactly.

A host's engine (vLLM, SGLang, TRT-LLM behind verl, OpenRLHF or TRL; or any OpenAI-compatible server)
implements :class:`TokenEngine`; :class:`EnginePolicy` turns it into a :class:`~prover_core.Policy`.
The context of a continuation from state ``s_b`` is exactly the token ids the agent saw before acting
at turn ``b`` (prompt ids + completion ids up to turn ``b``'s action span), then, for every new turn, the
generated action ids and the rendered observation ids: text is never re-tokenised.
"""

from prover_core.engine.openai import OpenAICompletionsEngine
from prover_core.engine.policy import EnginePolicy, action_seed
from prover_core.engine.protocol import Generation, SamplingParams, TokenEngine
from prover_core.engine.tokens import TokenSequence, TokenStore

__all__ = [
    "EnginePolicy",
    "Generation",
    "OpenAICompletionsEngine",
    "SamplingParams",
    "TokenEngine",
    "TokenSequence",
    "TokenStore",
    "action_seed",
]
