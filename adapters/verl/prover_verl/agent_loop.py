"""A verl agent loop that plays a :class:`~prover_verl.spec.ProverSpec` environment and records the trajectory.

Registered in verl's agent-loop registry as ``prover_env`` (select it with
``actor_rollout_ref.rollout.agent.default_agent_loop=prover_env`` or a dataset ``agent_name`` column).
One session is one episode, one :class:`AgentLoopOutput`:

    prompt_ids    = spec.prompt_ids(sample, o_0)
    response_ids  = g_0 + r(o_1) + g_1 + ... + g_{n-1}      r = spec.render_observation
    response_mask = 1 on every g_t, 0 on every r(o_t)

where ``g_t`` are the token ids the server generated for action ``t`` (never re-tokenised), each
generated from exactly ``prompt_ids + response_ids`` so far. ``extra_fields["prover_trajectory"]`` is
the :class:`~prover_core.Trajectory` (id ``{uid}_{session_id}``, group ``uid``, the reset spec, each
turn's observation, action and ``token_span`` of ``g_t`` in the response), which verl stores in
TransferQueue with the row and ProVer's trainer reads back. ``reward_score`` is the episode's success
(0 or 1). An episode that runs out of ``max_turns`` or of ``rollout.response_length`` tokens ends
unsuccessful; ``extra_fields["prover_truncated"]`` says so. The server's own fields (the weights versions
``min_global_steps`` / ``max_global_steps`` verl's TQ worker puts into the row's tags) are kept: the
first turn's, with the last turn's ``max_global_steps``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from prover_core.hosts import Trajectory, Turn
from prover_verl.spec import ProverSpec, load_spec

AGENT_NAME = "prover_env"
TRAJECTORY_FIELD = "prover_trajectory"


def merge_server_fields(fields: dict[str, Any], turn: Mapping[str, Any] | None) -> None:
    """Fold one turn's ``TokenOutput.extra_fields`` into the episode's, as verl's ``ToolAgentLoop`` does.

    The first turn's fields are kept (``global_steps``, ``min_global_steps``: the weights version the
    episode started on); later turns only move ``max_global_steps`` on. verl's TQ worker writes
    ``min/max_global_steps`` into each row's tags and ``_compute_metrics`` reads them as ints: an
    episode without them crashes the step (``int(None)``).
    """
    turn = turn or {}
    if not fields:
        fields.update(turn)
    elif turn.get("max_global_steps") is not None:
        fields["max_global_steps"] = turn["max_global_steps"]


@register(AGENT_NAME)
class ProverEnvAgentLoop(AgentLoopBase):
    """Multi-turn rollout against the spec's environment, recording token-exact turn spans."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec: ProverSpec = load_spec(self.config, self.tokenizer)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        spec = self.spec
        reset = spec.reset_spec(kwargs)
        env = spec.make_env()
        step = env.reset(reset)
        observation = step.observation
        prompt_ids = list(spec.prompt_ids(kwargs, observation))
        response_ids: list[int] = []
        mask: list[int] = []
        turns: list[Turn] = []
        request_id = f"{kwargs.get('uid', 'prover')}_{kwargs.get('session_id', 0)}"
        server_fields: dict[str, Any] = {}
        truncated = True
        for _ in range(spec.max_turns):
            budget = self.response_length - len(response_ids)
            if budget < 1:
                break
            params = {**sampling_params, "max_tokens": budget}
            output = await self.server_manager.generate(
                request_id, prompt_ids=prompt_ids + response_ids, sampling_params=params
            )
            merge_server_fields(server_fields, output.extra_fields)
            generated = [int(i) for i in output.token_ids][:budget]
            start = len(response_ids)
            response_ids += generated
            mask += [1] * len(generated)
            action = spec.parse_action(self.tokenizer.decode(generated, skip_special_tokens=True))
            turns.append(Turn(observation=observation, action=action, token_span=(start, len(response_ids))))
            step = env.step(action)
            if step.done:
                truncated = False
                break
            observation = step.observation
            rendered = list(spec.render_observation(observation))
            if len(response_ids) + len(rendered) >= self.response_length:
                break
            response_ids += rendered
            mask += [0] * len(rendered)
        success = bool(step.done and step.success)
        trajectory = Trajectory(
            id=f"{kwargs.get('uid')}_{kwargs.get('session_id', 0)}",
            group_id=str(kwargs.get("uid")),
            reset=reset,
            turns=tuple(turns),
            success=success,
        )
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=mask,
            reward_score=float(success),
            num_turns=2 * len(turns),
            metrics=AgentLoopMetrics(),
            extra_fields={
                **server_fields,
                TRAJECTORY_FIELD: trajectory.model_dump(mode="json"),
                "prover_truncated": truncated,
                "reward_extra_info": {"prover_success": float(success)},
            },
        )
