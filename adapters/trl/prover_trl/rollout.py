"""A multi-turn ``rollout_func`` for a plain text environment, recording what ProVer needs.

Each row's completion is ``a_0 o_1 a_1 o_2 ... a_{T-1}``: generated action tokens (``env_mask`` 1)
and rendered observations (``env_mask`` 0); the prompt is ``render_prompt(prompt, o_0)`` (default:
the prompt text followed by the rendered first observation). The rollout returns

* ``logprobs``: the sampled tokens' log-probabilities from the generation backend (vLLM reports them;
  TRL's importance-sampling correction needs them), ``0.0`` on observation tokens (masked out by
  ``env_mask``, as TRL's own tool loop does), or ``None`` when the backend reports none
  (transformers generation, where TRL recomputes them itself);
* ``prover_turn_spans``: the exact ``[start, end)`` of every action in the completion, so an
  observation that renders to zero tokens cannot merge two actions into one turn;
* ``prover_turns``, ``prover_reset``, ``prover_success``: the exact objects ProVer needs to rebuild
  and restore every trajectory (a :class:`~prover_core.ReplayEnv` over the same ``make_env``).

Under collective generation (vLLM server mode on several processes, colocate with tensor parallelism,
ZeRO-3, FSDP) every process calls the backend the same number of times with the same number of
contexts: the turn loop runs until no process has a live episode, and a process with fewer live
episodes pads its call with copies of a context whose output it discards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prover_core.hosts import Env
from prover_trl.backend import collective_generation
from prover_trl.batch import RESET_KEY, SPANS_KEY, SUCCESS_KEY, TURNS_KEY
from prover_trl.errors import ProverTRLError
from prover_trl.policy import generate_with_logprobs

RolloutFunc = Callable[[list[Any], Any], dict[str, Any]]


def member_reset(prompt: Any, row: int, num_generations: int) -> dict[str, Any]:
    """The default reset spec: the prompt, and the row's index inside its group (``row % G``)."""
    return {"prompt": prompt, "member": row % num_generations}


def _everyone(trainer: Any, value: int) -> list[int]:
    """``value`` of every process (a collective call)."""
    from accelerate.utils import gather_object

    return [int(v) for v in gather_object([value])]


def make_rollout_func(
    make_env: Callable[[], Env],
    *,
    max_turns: int,
    reset_spec: Callable[[Any, int, int], Mapping[str, Any]] = member_reset,
    render_observation: Callable[[Any], Sequence[int]] | None = None,
    parse_action: Callable[[Sequence[int]], Any] | None = None,
    render_prompt: Callable[[Any, Any], Sequence[int]] | None = None,
    max_action_tokens: int | None = None,
) -> RolloutFunc:
    """A TRL ``rollout_func`` that plays ``make_env()`` episodes with the trainer's model.

    ``reset_spec(prompt, global_row, num_generations)`` builds the dict handed to ``env.reset``.
    An episode still running after ``max_turns`` turns counts as a failure. ``render_observation``
    and ``parse_action`` default to the trainer tokenizer's encode/decode, as in
    :class:`~prover_trl.policy.TrainerPolicy`, which must use the same functions;
    ``render_prompt(prompt, first_observation)`` defaults to ``encode(prompt) + render_observation(obs)``
    for text prompts (give a :class:`~prover_trl.chat.ChatRenderer`'s ``prompt`` for chat prompts).
    ``ProverGRPOTrainer`` takes ``render_observation``, ``parse_action`` and ``max_action_tokens`` from the
    returned function (:func:`rollout_policy_options`), so they need not be given to ``ProverSetup`` again.
    """

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        with contextlib.suppress(AttributeError):  # for the trainer, even through a user's wrapper of this function
            setattr(trainer, RECORDED_OPTIONS, dict(rollout.policy_options))  # type: ignore[attr-defined]
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        render = render_observation or (lambda obs: tokenizer.encode(str(obs), add_special_tokens=False))
        parse = parse_action or (lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True).strip())

        def text_prompt(prompt: Any, observation: Any) -> list[int]:
            if not isinstance(prompt, str):
                raise ProverTRLError("make_rollout_func needs render_prompt= for non-text (e.g. chat) prompts")
            return list(tokenizer.encode(prompt, add_special_tokens=False)) + list(render(observation))

        first = render_prompt or text_prompt
        offset = trainer.accelerator.process_index * len(prompts)
        envs, steps, prompt_ids, specs = [], [], [], []
        for i, prompt in enumerate(prompts):
            spec = dict(reset_spec(prompt, offset + i, trainer.num_generations))
            env = make_env()
            step = env.reset(spec)
            envs.append(env)
            steps.append(step)
            specs.append(spec)
            prompt_ids.append([int(t) for t in first(prompt, step.observation)])
        completions: list[list[int]] = [[] for _ in prompts]
        masks: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float | None]] = [[] for _ in prompts]
        spans: list[list[tuple[int, int]]] = [[] for _ in prompts]
        turns: list[list[dict[str, Any]]] = [[] for _ in prompts]
        success = [False] * len(prompts)
        backend_logprobs = True
        collective = collective_generation(trainer)
        for _ in range(max_turns):
            active = [i for i, s in enumerate(steps) if not s.done]
            width = max(_everyone(trainer, len(active))) if collective else len(active)
            if width == 0:
                break
            contexts = [prompt_ids[i] + completions[i] for i in active]
            contexts += [prompt_ids[0]] * (width - len(active))  # padding for the collective call, discarded
            actions, action_logprobs = generate_with_logprobs(trainer, contexts, max_action_tokens)
            backend_logprobs = backend_logprobs and action_logprobs is not None
            for k, i in enumerate(active):
                ids = actions[k]
                if not ids:
                    raise ProverTRLError("the model generated an empty action")
                action = parse(ids)
                turns[i].append({"observation": steps[i].observation, "action": action})
                spans[i].append((len(completions[i]), len(completions[i]) + len(ids)))
                completions[i] += ids
                masks[i] += [1] * len(ids)
                logprobs[i] += action_logprobs[k] if action_logprobs is not None else [None] * len(ids)
                steps[i] = envs[i].step(action)
                if steps[i].done:
                    success[i] = bool(steps[i].success)
                else:
                    obs_ids = [int(t) for t in render(steps[i].observation)]
                    completions[i] += obs_ids
                    masks[i] += [0] * len(obs_ids)
                    logprobs[i] += [0.0] * len(obs_ids)
        for i, step in enumerate(steps):  # drop the trailing observation of an unfinished episode
            if not step.done and spans[i]:
                cut = spans[i][-1][1]
                completions[i], masks[i], logprobs[i] = completions[i][:cut], masks[i][:cut], logprobs[i][:cut]
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completions,
            "logprobs": logprobs if backend_logprobs else None,
            "env_mask": masks,
            SPANS_KEY: [[list(s) for s in row] for row in spans],
            TURNS_KEY: turns,
            RESET_KEY: specs,
            SUCCESS_KEY: success,
        }

    given = {
        "render_observation": render_observation,
        "parse_action": parse_action,
        "max_action_tokens": max_action_tokens,
    }
    rollout.policy_options = {k: v for k, v in given.items() if v is not None}  # type: ignore[attr-defined]
    return rollout


RECORDED_OPTIONS = "prover_rollout_options"
"""The trainer attribute where a :func:`make_rollout_func` rollout records its options each time it runs."""


def rollout_policy_options(rollout_func: Any, trainer: Any = None) -> dict[str, Any]:
    """What continuations must do as the rollout did (``render_observation``, ``parse_action``,
    ``max_action_tokens``), as given to :func:`make_rollout_func`: on the function, or on the one it wraps
    (``functools.wraps`` keeps ``__wrapped__``); for a wrapper that kept nothing, what the rollout recorded on
    ``trainer`` when it last ran; ``{}`` for any other rollout function."""
    seen: set[int] = set()
    while rollout_func is not None and id(rollout_func) not in seen:
        seen.add(id(rollout_func))
        options = getattr(rollout_func, "policy_options", None)
        if options is not None:
            return dict(options)
        rollout_func = getattr(rollout_func, "__wrapped__", None)
    return dict(getattr(trainer, RECORDED_OPTIONS, None) or {})


def success_reward(prompts: list[Any], completions: list[Any], prover_success: list[bool], **_: Any) -> list[float]:
    """A TRL reward function: the episode's binary outcome recorded by the rollout."""
    return [float(s) for s in prover_success]
