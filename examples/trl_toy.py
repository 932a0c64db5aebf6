"""Offline toys for tests and examples: a tiny random causal LM, a word-level tokenizer built from
local text, and a three-turn text environment whose verification outcome is known in advance.

transformers and tokenizers are imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prover_core import Decline, Proposal, Segment, SegmentRules, Step, Trajectory

WORDS = "hall door open shut end enter walk wait push pull look left right go key knock north south east west"
CORPUS = [WORDS, "enter hall walk door wait push open go end", "look left right key knock north south east west"]


def word_tokenizer(corpus: Sequence[str] = CORPUS) -> Any:
    """A word-level ``PreTrainedTokenizerFast`` trained on ``corpus`` (``[PAD]`` 0, ``[EOS]`` 1, ``[UNK]`` 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[EOS]", "[UNK]"]))
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]", padding_side="left"
    )


def tiny_causal_lm(tokenizer: Any, seed: int = 0, hidden: int = 32, layers: int = 2) -> Any:
    """A randomly initialised ``LlamaForCausalLM`` with a few thousand parameters, float32."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


class LuckyDoor:
    """Three turns: in the hall, at the door, then through it. Success iff the door is open at the end.

    The door opens during turn 1 iff the episode is lucky. Luck is the environment's randomness, drawn
    at reset (``spec["member"] == 0`` is lucky); ``reseed`` draws fresh randomness, in which the door
    never opens. Actions do not matter, so for the lucky run and segment ``(1, 1)`` every
    continuation from before turn 1 fails and every one from after it succeeds: ``Delta = 1``.
    """

    def __init__(self) -> None:
        self.t = 0
        self.lucky = False
        self.open = False

    def reset(self, spec: Mapping[str, Any]) -> Step:
        self.t, self.open, self.lucky = 0, False, spec.get("member") == 0
        return Step(observation="hall")

    def step(self, action: Any) -> Step:
        self.t += 1
        if self.t == 1:
            return Step(observation="door")
        if self.t == 2:
            self.open = self.lucky
            return Step(observation="open" if self.open else "shut")
        return Step(observation="end", done=True, success=self.open)

    def reseed(self, seed: int) -> None:
        self.lucky = False


class PushDoor:
    """Three turns: in the hall, at the door, then through it. Success iff the action at the door (turn 1) says
    ``push``: the one decision that matters, learnable (a random tiny model says it about one time in eight in a
    three-word action). Deterministic: no luck to reseed."""

    def __init__(self) -> None:
        self.t, self.open = 0, False

    def reset(self, spec: Mapping[str, Any]) -> Step:
        self.t, self.open = 0, False
        return Step(observation="hall")

    def step(self, action: Any) -> Step:
        self.t += 1
        if self.t == 1:
            return Step(observation="door")
        if self.t == 2:
            self.open = "push" in str(action).split()
            return Step(observation="open" if self.open else "shut")
        return Step(observation="end", done=True, success=self.open)

    def reseed(self, seed: int) -> None:
        """Nothing to reseed: the environment draws no randomness."""


class FixedJudge:
    """Always proposes turns ``start..end`` of the successful run (the library re-checks the rules)."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end

    def propose(self, success: Trajectory, failures: Sequence[Trajectory], rules: SegmentRules) -> Proposal | Decline:
        return Proposal(segment=Segment(trajectory_id=success.id, start=self.start, end=self.end))
