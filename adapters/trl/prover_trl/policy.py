"""The default continuation policy: the trainer's own generation (same model, current weights).

A continuation from state ``s_b`` of a recorded trajectory sees exactly the tokens the agent saw
before acting at turn ``b``: ``prompt_ids + completion_ids[:start_b]`` (``start_b`` = first token of
turn ``b``'s action span). Each new turn then appends the generated action tokens and
``render_observation(next_observation)``, which must be the formatting the rollout used.
Generation goes through ``trainer._generate_single_turn`` (transformers, continuous batching or
vLLM, whichever the trainer uses). torch is only imported when a continuation runs.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from prover_core.hosts import Batcher, PolicyContext, Trajectory
from prover_trl.errors import ProverTRLError

TokenIds = list[int]


def generate_with_logprobs(
    trainer: Any, contexts: Sequence[Sequence[int]], max_new_tokens: int | None = None
) -> tuple[list[TokenIds], list[list[float | None]] | None]:
    """One sampled continuation of each token context with the trainer's generation backend, and the
    sampled tokens' log-probabilities where the backend reports them (vLLM), else ``None``.

    vLLM reports a log-probability it could not compute as ``None``; TRL's importance-sampling
    correction then leaves that token uncorrected.
    """
    out, logprobs = trainer._generate_single_turn([list(c) for c in contexts], None, {}, num_generations=1)
    ids = [list(map(int, o)) for o in out]
    lps = None if logprobs is None else [[None if x is None else float(x) for x in row] for row in logprobs]
    if lps is not None and [len(r) for r in lps] != [len(o) for o in ids]:
        raise ProverTRLError("the generation backend returned logprobs that do not match its tokens one to one")
    if max_new_tokens is not None:
        ids = [o[:max_new_tokens] for o in ids]
        lps = None if lps is None else [r[:max_new_tokens] for r in lps]
    return ids, lps


def generate(trainer: Any, contexts: Sequence[Sequence[int]], max_new_tokens: int | None = None) -> list[TokenIds]:
    """One sampled continuation of each token context with the trainer's generation backend."""
    return generate_with_logprobs(trainer, contexts, max_new_tokens)[0]


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Inside: torch's RNG seeded with ``seed``; on exit the previous RNG state is back (CPU and current CUDA)."""
    import torch

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if cuda else []):
        # not torch.manual_seed: without CUDA up it queues a lazy seeding call, with a formatted stack, for every
        # accelerator type on each call (a tenth of a CPU verification's time in benchmarks/trl_step.py --profile)
        torch.default_generator.manual_seed(seed)
        if cuda:
            torch.cuda.manual_seed(seed)
        yield


def _mix(*parts: object) -> int:
    """A stable 31-bit seed from ``parts`` (crc32 of their text)."""
    return zlib.crc32(",".join(map(str, parts)).encode()) & 0x7FFFFFFF


class TrainerPolicy:
    """:class:`~prover_core.Policy` that acts with the trainer's current model.

    ``render_observation(obs) -> token ids`` and ``parse_action(token ids) -> action`` must match the
    rollout (defaults: ``tokenizer.encode(str(obs))`` without special tokens, and the decoded text
    stripped). With ``batched=True`` the concurrent continuations' turns are generated in one batch
    (:class:`~prover_core.batching.Batcher`: one ``generate`` per round of continuations, seeded from their seeds
    as a set, leaving out those verification cancelled while they waited); ``batched=False`` generates each turn
    alone, seeded by its continuation seed, so paired pre/post continuations share random numbers exactly.

    ``report_stats()`` gives the step's ``policy_calls`` (``generate`` calls, one after another: verification's
    latency on this backend) and ``policy_rows`` (contexts in them; the trainer logs their mean batch).
    """

    def __init__(
        self,
        trainer: Any,
        *,
        render_observation: Callable[[Any], Sequence[int]] | None = None,
        parse_action: Callable[[Sequence[int]], Any] | None = None,
        max_action_tokens: int | None = None,
        batched: bool = True,
    ) -> None:
        tokenizer = trainer.processing_class
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        self.trainer = trainer
        self.render_observation = render_observation or (
            lambda obs: tokenizer.encode(str(obs), add_special_tokens=False)
        )
        self.parse_action = parse_action or (lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True).strip())
        self.max_action_tokens = max_action_tokens
        self.batched = batched
        self.sequences: dict[str, tuple[TokenIds, TokenIds]] = {}
        """``trajectory id -> (prompt_ids, completion_ids)``, filled by the trainer for its own rows."""
        self.generated_tokens = 0
        self._state: dict[tuple[str, int, int], TokenIds] = {}
        self._batcher: Batcher[tuple[TokenIds, int], TokenIds] = Batcher(self._generate_seeded)

    def clear(self) -> None:
        """Forget the recorded sequences, continuation states and call counts (called by the trainer every step)."""
        self.sequences.clear()
        self._state.clear()
        self._batcher.reset_counts()

    async def report_stats(self) -> dict[str, float]:
        """The step's ``generate`` calls and the contexts in them (``prover/policy_calls``, ``prover/policy_rows``)."""
        return {"policy_calls": self._batcher.calls, "policy_rows": self._batcher.rows}

    def _generate_seeded(self, requests: list[tuple[TokenIds, int]]) -> list[TokenIds]:
        """One ``generate`` of every request's context, seeded by the set of their seeds."""
        with seeded(_mix(*sorted(seed for _, seed in requests))):
            actions = generate(self.trainer, [ids for ids, _ in requests], self.max_action_tokens)
        self.generated_tokens += sum(map(len, actions))
        return actions

    def context_ids(self, context: PolicyContext) -> tuple[tuple[str, int, int], TokenIds]:
        """The continuation's key and the exact token context before its next action."""
        trajectory: Trajectory | None = context.trajectory
        if trajectory is None:
            raise ProverTRLError("TrainerPolicy only continues recorded trajectories (context.trajectory is None)")
        if trajectory.id not in self.sequences:
            raise ProverTRLError(f"no recorded tokens for trajectory {trajectory.id!r} on this process")
        prompt, completion = self.sequences[trajectory.id]
        history = context.history
        b = next((k for k, turn in enumerate(history) if turn.token_span is None), len(history))
        span = trajectory.turns[b].token_span
        if span is None:
            raise ProverTRLError(f"turn {b} of trajectory {trajectory.id!r} has no token span")
        key = (trajectory.id, b, context.seed)
        if len(history) == b:  # first action of this continuation
            self._state[key] = []
        else:
            self._state[key] = self._state[key] + list(self.render_observation(context.observation))
        return key, prompt + completion[: span[0]] + self._state[key]

    async def act(self, context: PolicyContext) -> Any:
        key, ids = self.context_ids(context)
        step = len(context.history) - key[1]  # the j-th new action of paired pre/post continuations: same seed
        request = (ids, _mix(context.seed, step))
        if self.batched:
            action = await self._batcher.submit(request)
        else:
            self._batcher.calls, self._batcher.rows = self._batcher.calls + 1, self._batcher.rows + 1
            (action,) = self._generate_seeded([request])
        self._state[key] = self._state[key] + action
        return self.parse_action(action)
