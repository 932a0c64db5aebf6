"""The LLM judge (the paper's): a language model behind an OpenAI-compatible chat-completions API.

One module per concern: :mod:`~prover_core.judges.llm.judge` (``LLMJudge``: ``propose``), ``config``
(``LLMJudgeConfig``), ``prompt`` (what the model is shown), ``tools`` (the agentic mode's search and read),
``conversation`` (answers checked, repaired, tool rounds), ``answer`` (parsing the JSON answer), ``span`` (the
start-and-length answer form), ``client`` (HTTP: retries, deadline, budget, circuit breaker), ``cache`` (answers
kept on disk), ``stats`` (what it reports). httpx and tenacity load with it, on first use of ``LLMJudge``.
"""

from prover_core.judges.llm.config import LLMJudgeConfig
from prover_core.judges.llm.judge import LLMJudge

__all__ = ["LLMJudge", "LLMJudgeConfig"]
