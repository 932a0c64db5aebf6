"""Observations as chat turns with the tokenizer's chat template (ChatML, Qwen-style: a newline after
each end-of-turn), token-exactly, and a ProverGRPOTrainer run with conversational prompts.

The tokenizer is a byte-level BPE trained on local text (no download).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.hosts import require_host

trl = require_host("trl")

from datasets import Dataset  # noqa: E402

from examples.trl_toy import FixedJudge, LuckyDoor, tiny_causal_lm  # noqa: E402
from prover_core import ProverConfig, ReplayEnv  # noqa: E402
from prover_trl import ProverGRPOTrainer, ProverSetup, ProverTRLError, make_rollout_func, success_reward  # noqa: E402
from prover_trl.chat import ChatRenderer  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chatml_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["user assistant system tool\n", "hall door open shut end enter walk wait push pull look\n"]
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|pad|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    out = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|im_end|>", padding_side="left"
    )
    out.chat_template = CHATML
    return out


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return chatml_tokenizer()


def test_prompt_actions_and_observation_suffixes_equal_the_template_of_the_whole_conversation(tokenizer: Any) -> None:
    chat = ChatRenderer(tokenizer)

    def action(text: str) -> list[int]:  # a finished assistant turn: its tokens and the end-of-turn token
        return [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]

    stream = chat.prompt("enter", "hall") + action("walk") + chat.observation("door") + action("push")
    stream += chat.observation("open")
    conversation = [
        {"role": "user", "content": "enter"},
        {"role": "user", "content": "hall"},
        {"role": "assistant", "content": "walk"},
        {"role": "user", "content": "door"},
        {"role": "assistant", "content": "push"},
        {"role": "user", "content": "open"},
    ]
    whole = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert stream == list(whole)
    # the suffix starts right after the end-of-turn token: the template's newline is the observation's
    assert tokenizer.decode(chat.observation("door")) == "\n<|im_start|>user\ndoor<|im_end|>\n<|im_start|>assistant\n"
    messages = [{"role": "system", "content": "look"}, {"role": "user", "content": "enter"}]
    assert chat.prompt(messages, None) == list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    )


def test_a_template_that_rewrites_history_is_refused(tokenizer: Any) -> None:
    rewriting = "{% for m in messages %}{{ m['role'] }}{{ messages | length }}<|im_end|>{% endfor %}"
    with pytest.raises(ProverTRLError, match="append-only"):
        ChatRenderer(tokenizer, chat_template=rewriting).observation("door")


def test_trainer_with_chat_prompts_continues_from_the_chat_rendered_context(tmp_path: Path, tokenizer: Any) -> None:
    chat = ChatRenderer(tokenizer)
    contexts: list[list[int]] = []

    rollouts: list[tuple[Any, Any]] = []

    class Recording(ProverGRPOTrainer):
        def _generate(self, prompts: list[Any]) -> Any:
            out = super()._generate(prompts)
            rollouts.append((out[0], out[1]))
            return out

        def _generate_single_turn(self, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
            contexts.extend(list(p) for p in prompt_ids)
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)

    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=1,
        max_completion_length=3,
        learning_rate=1e-2,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    trainer = Recording(
        model=tiny_causal_lm(tokenizer, seed=0),
        reward_funcs=success_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": "enter"}]] * 4}),
        processing_class=tokenizer,
        rollout_func=make_rollout_func(
            LuckyDoor, max_turns=5, render_prompt=chat.prompt, render_observation=chat.observation
        ),
        prover=ProverSetup(
            judge=FixedJudge(1, 1),
            env=ReplayEnv(LuckyDoor),
            config=ProverConfig(k=2),
            policy_options={"render_observation": chat.observation},
        ),
    )
    trainer.train()
    report = trainer.prover_last_report
    result = trainer.prover_last_result
    assert report is not None and result is not None
    (record,) = report.groups
    assert record.status == "accepted"
    lucky = result.trajectories[record.trajectory_id]
    row = int(lucky.id.split(":")[1])
    (prompt_ids, completion_ids) = rollouts[0]
    prompt, completion = list(prompt_ids[row]), list(completion_ids[row])
    assert prompt == chat.prompt([{"role": "user", "content": "enter"}], "hall")
    spans = [t.token_span for t in lucky.turns]
    assert completion[spans[0][1] : spans[1][0]] == chat.observation("door")  # exact chat turns between actions
    assert completion[spans[1][1] : spans[2][0]] == chat.observation("open")
    # The continuations started from exactly the recorded chat context: the rollout's own call plus K = 2
    # continuations from before turn 1, and the same after it.
    assert contexts.count(prompt + completion[: spans[1][0]]) >= 1 + 2
    assert contexts.count(prompt + completion[: spans[2][0]]) >= 1 + 2
