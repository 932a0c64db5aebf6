"""A multi-turn ``rollout_func`` for a plain text environment, recording what ProVer needs.

Each row's completion is ``a_0 o_1 a_1 o_2 ... a_{T-1}``: generated action tokens (``env_mask`` 1)
and rendered observations (``env_mask`` 0); the prompt is the prompt text followed by the rendered
first observation. The rollout returns the ``prover_*`` extras (turns, reset spec, success) so the
trainer can rebuild every trajectory exactly, and a :class:`~prover_core.ReplayEnv` over the same
``make_env`` restores any turn. Generation is the trainer's own (see :func:`prover_trl.policy.generate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prover_core import Env
from prover_trl.batch import RESET_KEY, SUCCESS_KEY, TURNS_KEY
from prover_trl.errors import ProverTRLError
from prover_trl.policy import generate

RolloutFunc = Callable[[list[Any], Any], dict[str, Any]]


def member_reset(prompt: Any, row: int, num_generations: int) -> dict[str, Any]:
    """The default reset spec: the prompt, and the row's index inside its group (``row % G``)."""
    return {"prompt": prompt, "member": row % num_generations}


def make_rollout_func(
    make_env: Callable[[], Env],
    *,
    max_turns: int,
    reset_spec: Callable[[Any, int, int], Mapping[str, Any]] = member_reset,
    render_observation: Callable[[Any], Sequence[int]] | None = None,
    parse_action: Callable[[Sequence[int]], Any] | None = None,
    max_action_tokens: int | None = None,
) -> RolloutFunc:
    """A TRL ``rollout_func`` that plays ``make_env()`` episodes with the trainer's model.

    ``reset_spec(prompt, global_row, num_generations)`` builds the dict handed to ``env.reset``.
    An episode still running after ``max_turns`` turns counts as a failure. ``render_observation``
    and ``parse_action`` default to the trainer tokenizer's encode/decode, as in
    :class:`~prover_trl.policy.TrainerPolicy`, which must use the same functions.
    """

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        render = render_observation or (lambda obs: tokenizer.encode(str(obs), add_special_tokens=False))
        parse = parse_action or (lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True).strip())
        offset = trainer.accelerator.process_index * len(prompts)
        envs, steps, prompt_ids, specs = [], [], [], []
        for i, prompt in enumerate(prompts):
            if not isinstance(prompt, str):
                raise ProverTRLError("make_rollout_func expects plain-text prompts")
            spec = dict(reset_spec(prompt, offset + i, trainer.num_generations))
            env = make_env()
            step = env.reset(spec)
            envs.append(env)
            steps.append(step)
            specs.append(spec)
            prompt_ids.append(tokenizer.encode(prompt, add_special_tokens=False) + list(render(step.observation)))
        completions: list[list[int]] = [[] for _ in prompts]
        masks: list[list[int]] = [[] for _ in prompts]
        turns: list[list[dict[str, Any]]] = [[] for _ in prompts]
        success = [False] * len(prompts)
        for _ in range(max_turns):
            active = [i for i, s in enumerate(steps) if not s.done]
            if not active:
                break
            actions = generate(trainer, [prompt_ids[i] + completions[i] for i in active], max_action_tokens)
            for i, ids in zip(active, actions, strict=True):
                if not ids:
                    raise ProverTRLError("the model generated an empty action")
                action = parse(ids)
                turns[i].append({"observation": steps[i].observation, "action": action})
                completions[i] += ids
                masks[i] += [1] * len(ids)
                steps[i] = envs[i].step(action)
                if steps[i].done:
                    success[i] = bool(steps[i].success)
                else:
                    obs_ids = list(render(steps[i].observation))
                    completions[i] += obs_ids
                    masks[i] += [0] * len(obs_ids)
        for i, step in enumerate(steps):  # drop the trailing observation of an unfinished episode
            if not step.done:
                cut = len(masks[i]) - masks[i][::-1].index(1)
                completions[i], masks[i] = completions[i][:cut], masks[i][:cut]
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completions,
            "logprobs": None,
            "env_mask": masks,
            TURNS_KEY: turns,
            RESET_KEY: specs,
            SUCCESS_KEY: success,
        }

    return rollout


def success_reward(prompts: list[Any], completions: list[Any], prover_success: list[bool], **_: Any) -> list[float]:
    """A TRL reward function: the episode's binary outcome recorded by the rollout."""
    return [float(s) for s in prover_success]
