"""Observations as chat turns, rendered with the tokenizer's own chat template, token-exactly.

For a conversation ``m_0 .. m_k`` (the prompt's messages and the first observation) followed by
assistant actions ``a_t`` and observation messages ``o_t``, the template renders

    template(m_0 .. m_k, add_generation_prompt=True) + a_0 + suffix(o_1) + a_1 + suffix(o_2) + ...

where ``suffix(o)`` is what the template appends after a finished assistant turn for the message
``o`` up to and including the next generation prompt. It is computed the way TRL renders tool
results (``GRPOTrainer._get_tool_suffix_ids``): render a dummy conversation ending with an assistant
turn, with and without ``o``; the difference after the assistant turn's end-of-turn token (the
tokenizer's EOS; a trailing newline after it, as in ChatML/Qwen templates, belongs to the suffix).
When every action ends with the end-of-turn token, the concatenation equals the template applied to
the whole conversation (tested). Hand :meth:`ChatRenderer.prompt` and :meth:`ChatRenderer.observation`
to :func:`~prover_trl.rollout.make_rollout_func` (``render_prompt``, ``render_observation``) and the same
``observation`` to the policy (``ProverSetup(policy_options={"render_observation": ...})``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prover_trl.errors import ProverTRLError

Message = Mapping[str, Any]


class ChatRenderer:
    """Renders prompts and observations with ``tokenizer.apply_chat_template``.

    ``role`` is the role of observation messages (``"user"``, or ``"tool"`` for templates that accept
    it with a plain ``content``); ``content(observation) -> str`` formats one observation (default ``str``);
    ``chat_template`` and ``template_kwargs`` are passed to ``apply_chat_template`` as TRL does.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        role: str = "user",
        content: Callable[[Any], str] = str,
        chat_template: str | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        self.role = role
        self.content = content
        self.chat_template = chat_template
        self.template_kwargs = dict(template_kwargs or {})
        if self.tokenizer.eos_token_id is None:
            raise ProverTRLError("ChatRenderer needs a tokenizer with an EOS (end-of-turn) token")

    def _render(self, messages: Sequence[Message], generation_prompt: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            list(messages),
            add_generation_prompt=generation_prompt,
            tokenize=True,
            return_dict=False,
            chat_template=self.chat_template,
            **self.template_kwargs,
        )
        return [int(i) for i in ids]

    def message(self, observation: Any) -> dict[str, Any]:
        return {"role": self.role, "content": self.content(observation)}

    def prompt(self, prompt: str | Sequence[Message], observation: Any) -> list[int]:
        """The prompt's messages (a string is one user message) and the first observation, then the
        generation prompt. ``observation=None`` adds no message."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
        if observation is not None:
            messages.append(self.message(observation))
        return self._render(messages, generation_prompt=True)

    def observation(self, observation: Any) -> list[int]:
        """The tokens that follow a finished assistant turn: the observation's message and the generation prompt."""
        dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "dummy"}]
        prefix = self._render(dummy, generation_prompt=False)
        full = self._render([*dummy, self.message(observation)], generation_prompt=True)
        eos = self.tokenizer.eos_token_id
        ends = [i for i, t in enumerate(prefix) if t == eos]
        if ends:
            prefix = prefix[: ends[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise ProverTRLError("the chat template does not render the conversation append-only (prefix mismatch)")
        return full[len(prefix) :]
