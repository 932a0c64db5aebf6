"""Judges that nominate a segment (stage 2).

``RandomJudge`` is the paper's ablation; ``AnchorJudge`` (rate jumps at anchor states), ``ChoiceJudge``
(choices compared from the same anchor state) and ``DivergenceJudge`` are rules that need no model;
``FirstOf`` combines judges (the first proposal wins);
``LLMJudge`` speaks the OpenAI chat-completions protocol (docs/judges.md; imported on first use,
so that code without an LLM judge does not pay for httpx and tenacity at import time).
:func:`default_judge` is the library's default, the one every adapter uses when given none.
The judges without a model register by name here (:mod:`prover_core.judges.registry`): a new judge is
its module and one ``register_judge`` line below.
"""

from typing import TYPE_CHECKING, Any

from prover_core.judges.anchor import AnchorJudge
from prover_core.judges.choice import ChoiceJudge
from prover_core.judges.combine import FirstOf
from prover_core.judges.divergence import DivergenceJudge
from prover_core.judges.random_segment import RandomJudge
from prover_core.judges.registry import judge_names, make_judge, register_judge, registered_judges

if TYPE_CHECKING:
    from prover_core.judges.llm import LLMJudge
    from prover_core.judges.llm.config import LLMJudgeConfig

__all__ = [
    "AnchorJudge",
    "ChoiceJudge",
    "DivergenceJudge",
    "FirstOf",
    "LLMJudge",
    "LLMJudgeConfig",
    "RandomJudge",
    "default_judge",
    "judge_names",
    "make_judge",
    "register_judge",
    "registered_judges",
]

register_judge("choice", lambda seed: ChoiceJudge())
register_judge("anchor", lambda seed: AnchorJudge())
register_judge("divergence", lambda seed: DivergenceJudge())
register_judge("random", RandomJudge)


def default_judge() -> ChoiceJudge:
    """The library's default judge, a :class:`ChoiceJudge` (docs/judges.md says why): what every adapter uses
    when given no judge, and what every doc snippet and example uses unless it says why not."""
    return ChoiceJudge()


def __getattr__(name: str) -> Any:
    if name == "LLMJudge":
        from prover_core.judges.llm import LLMJudge

        return LLMJudge
    if name == "LLMJudgeConfig":
        from prover_core.judges.llm.config import LLMJudgeConfig

        return LLMJudgeConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
