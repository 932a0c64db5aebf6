"""ProverGRPOTrainer end to end on CPU: a tiny random Llama, a word-level tokenizer built from local
text, the three-turn LuckyDoor environment, TRL's real GRPOTrainer loop.

LuckyDoor makes the verification outcome certain (see ``examples/trl_toy.py``): in every group
of 4 exactly member 0 succeeds, and for segment (1, 1) of its run every continuation of the real
policy from before turn 1 fails and every one from after it succeeds, so ``Delta = 1``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.hosts import require_host

trl = require_host("trl")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402

from examples.trl_toy import FixedJudge, LuckyDoor, tiny_causal_lm, word_tokenizer  # noqa: E402
from prover_core import ProverConfig, RandomJudge, ReplayEnv  # noqa: E402
from prover_core.chance import Lift  # noqa: E402
from prover_trl import (  # noqa: E402
    ProverGRPOTrainer,
    ProverSetup,
    ProverTRLError,
    make_rollout_func,
    rollout_policy_options,
    success_reward,
)

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
G = 4
K = 2


def _args(tmp_path: Path) -> Any:
    return trl.GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=G,
        num_generations=G,
        max_steps=2,
        max_completion_length=3,  # at most 3 tokens per action
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )


def _recording(base: type) -> type:
    """``base`` recording the inputs that reach ``_compute_loss`` (and, in ProVer, the generation calls)."""

    class Recording(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.loss_inputs: list[dict[str, Any]] = []
            self.results: list[Any] = []
            self.continuation_contexts: list[list[list[int]]] = []
            self.rollout_sequences: list[dict[str, tuple[list[int], list[int]]]] = []
            self._in_prover = False

        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            self.loss_inputs.append({k: v.clone() if torch.is_tensor(v) else v for k, v in inputs.items()})
            return super()._compute_loss(model, inputs)

        def _generate_single_turn(self, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
            if self._in_prover:
                self.continuation_contexts.append([list(p) for p in prompt_ids])
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)

        def _prover_bonus(self, output: dict[str, Any], resets: Any) -> Any:
            prompt_ids, completion_ids = self._prover_generated[0], self._prover_generated[1]
            self.rollout_sequences.append(
                {str(i): (list(p), list(c)) for i, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True))}
            )
            self._in_prover = True
            try:
                return super()._prover_bonus(output, resets)
            finally:
                self._in_prover = False
                self.results.append(self.prover_last_result)

    return Recording


def _build(tmp_path: Path, trainer_class: type, rollout_func: Any, **kwargs: Any) -> Any:
    """The recording trainer on LuckyDoor with ``rollout_func``, not trained yet."""
    tokenizer = word_tokenizer()
    return _recording(trainer_class)(
        model=tiny_causal_lm(tokenizer, seed=0),
        reward_funcs=success_reward,
        args=_args(tmp_path),
        train_dataset=Dataset.from_dict({"prompt": ["enter"] * 8}),
        processing_class=tokenizer,
        rollout_func=rollout_func,
        **kwargs,
    )


def _train(tmp_path: Path, trainer_class: type, render_observation: Any = None, **kwargs: Any) -> Any:
    rollout = make_rollout_func(LuckyDoor, max_turns=5, render_observation=render_observation)
    trainer = _build(tmp_path, trainer_class, rollout, **kwargs)
    trainer.train()
    return trainer


def test_bonus_reaches_compute_loss_on_the_accepted_segment_tokens(tmp_path: Path) -> None:
    prover = ProverSetup(judge=FixedJudge(1, 1), env=ReplayEnv(LuckyDoor), config=ProverConfig(k=K))
    trainer = _train(tmp_path, ProverGRPOTrainer, prover=prover)

    assert trainer.state.global_step == 2  # two optimizer steps
    assert len(trainer.results) == 2 and len(trainer.loss_inputs) == 2  # one generation per step
    # curtailment's overlap schedule (the default): post and pre at once, then pre's second turn: 2 batches a step
    assert len(trainer.continuation_contexts) == 4
    shares: list[float] = []
    for step, (result, inputs) in enumerate(zip(trainer.results, trainer.loss_inputs, strict=True)):
        # Verification with the trainer's own generation from the restored states: Delta = 2/2 - 0/2.
        (record,) = result.report.groups
        assert record.status == "accepted" and record.proposal.segment.start == record.proposal.segment.end == 1
        v = record.verification
        assert (v.pre_successes, v.pre_count, v.post_successes, v.post_count) == (0, K, K, K)
        lucky = result.trajectories[record.trajectory_id]
        assert lucky.reset == {"prompt": "enter", "member": 0} and lucky.success

        # The bonus reaches _compute_loss as a (B, T) advantage (rows were shuffled: prover_row says which).
        advantages, completion_ids = inputs["advantages"], inputs["completion_ids"]
        assert advantages.dim() == 2 and advantages.shape == completion_ids.shape
        trainable = inputs["completion_mask"] * inputs["tool_mask"]
        length = advantages.shape[1]
        expected = torch.zeros_like(advantages)
        _, lucky_row = lucky.id.split(":")
        for b, row in enumerate(inputs["prover_row"].tolist()):
            if row == int(lucky_row):
                start, end = lucky.turns[1].token_span
                expected[b, start:end] = 1.0  # lam * Delta = 1 on turn 1's action tokens
                # Independently of the adapter: the spans are exactly the trainable runs, and turn 1's span
                # holds the tokens of the action the rollout sent to the environment.
                runs = torch.zeros(length, dtype=torch.long)
                for turn in lucky.turns:
                    runs[turn.token_span[0] : turn.token_span[1]] = 1
                assert torch.equal(runs, trainable[b].long())
                text = trainer.processing_class.decode(completion_ids[b, start:end], skip_special_tokens=True)
                assert text.strip() == lucky.turns[1].action
        assert expected.sum() >= 1
        assert torch.equal(inputs["prover_bonus"], expected)
        assert torch.equal((expected != 0), (expected != 0) & (trainable == 1))  # only trainable tokens
        # Everything else keeps the stock GRPO advantage of its row (constant along the row).
        base = advantages[:, :1].expand(-1, length)  # column 0 is turn 0 of every row, never in the segment
        assert torch.equal(advantages, base + expected)
        stock = torch.tensor([1.0, 0.0, 0.0, 0.0])  # member 0 succeeds; TRL: (r - mean) / (std + 1e-4)
        stock = (stock - stock.mean()) / (stock.std() + 1e-4)
        rows = inputs["prover_row"].tolist()
        assert torch.allclose(advantages[:, 0], stock[rows])
        # the credit share against TRL's own advantage (std-scaled, not the core's mean-centred one), by hand
        shares.append(float(expected.abs().sum() / (stock[rows][:, None].abs() * trainable).sum()))

        # The continuations saw exactly the recorded agent context: prompt + completion before turn l / r + 1.
        prompt, completion = trainer.rollout_sequences[step][lucky_row]
        pre = prompt + completion[: lucky.turns[1].token_span[0]]  # s_1: before turn 1's action
        post = prompt + completion[: lucky.turns[2].token_span[0]]  # s_2: after turn 1, before turn 2's action
        # the post boundary (1 turn) and the pre boundary (2 turns) start together: 2 batches per step
        both, pre_again = trainer.continuation_contexts[2 * step : 2 * step + 2]
        assert [tuple(c) for c in both] == [tuple(post)] * K + [tuple(pre)] * K
        assert len(pre_again) == K  # only the pre continuations act again
    logged = [log for log in trainer.state.log_history if "prover/groups_accepted" in log]
    assert [log["prover/groups_accepted"] for log in logged] == [1.0, 1.0]
    assert all(log["prover/bonus_tokens"] >= 1 and log["prover/continuation_tokens"] > 0 for log in logged)
    assert [log["prover/continuation_share"] for log in logged] == [2 * K / G] * 2  # 2K continuations / G episodes
    assert [log["prover/credit_share"] for log in logged] == pytest.approx(shares, rel=1e-6)
    assert all(0 < s < 1 for s in shares) and [log["prover/trigger_share"] for log in logged] == [1.0, 1.0]
    # latency: 2 rounds of policy calls (the pre boundary's 2 turns) against the rollout's 3, each one generate call
    for log in logged:
        assert (log["prover/verify_policy_rounds"], log["prover/rollout_policy_rounds"]) == (2, 3)
        assert (log["prover/policy_calls"], log["prover/policy_batch_mean"]) == (2, 3 * K / 2)
    # per-stage wall times (prover_core.progress): verification ran, and no stage outlasts the whole call
    assert all(0 < log["prover/time/verify"] <= log["prover/time/total"] for log in logged)
    for stage in ("propose", "outside"):
        assert all(0 <= log[f"prover/time/{stage}"] <= log["prover/time/total"] for log in logged)


def test_lift_throttle_acts_in_the_trainer_through_its_run(tmp_path: Path) -> None:
    """``lift_throttle`` with a random judge: the trainer's one :class:`~prover_core.ProverRun` keeps the window
    across steps and the pipeline reads it, so with a window that has not shown the judge above chance (as after
    earlier steps with these counts) the judge's groups are verified only at the controls' rate (here
    0.05 / 0.95): groups are recorded ``unverified`` by the throttle. Before ProverRun, TRL never passed a window
    and the flag did nothing."""
    config = ProverConfig(k=K, control_share=0.05, lift_throttle=True)
    prover = ProverSetup(judge=RandomJudge(0), env=ReplayEnv(LuckyDoor), config=config)
    trainer = _build(tmp_path, ProverGRPOTrainer, make_rollout_func(LuckyDoor, max_turns=5), prover=prover)
    assert trainer.prover_run.window is not None
    trainer.prover_run.window.add(Lift(5, 10, 5, 10))  # lift 0, its interval holds 0: not shown
    trainer.train()
    throttled = [
        g for result in trainer.results for g in result.report.groups
        if g.status == "unverified" and "lift_throttle" in g.reason
    ]  # fmt: skip
    assert throttled and trainer.prover_run.steps == 2
    logged = [log for log in trainer.state.log_history if "prover/groups_unverified" in log]
    assert sum(log["prover/groups_unverified"] for log in logged) == len(throttled)


@pytest.fixture(scope="module")
def stock(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _train(tmp_path_factory.mktemp("stock"), trl.GRPOTrainer)


@pytest.mark.parametrize("mode", ["disabled", "lam0"])
def test_without_bonus_the_advantages_equal_stock_grpo(tmp_path: Path, stock: Any, mode: str) -> None:
    config = ProverConfig(k=K, lam=0.0)
    prover = ProverSetup(
        judge=FixedJudge(1, 1),
        env=ReplayEnv(LuckyDoor),
        config=config,
        enabled=mode == "lam0",
        policy_options={"batched": False},  # one seeded generation per continuation turn
    )
    ours = _train(tmp_path / "prover", ProverGRPOTrainer, prover=prover)
    assert len(stock.loss_inputs) == len(ours.loss_inputs) == 2
    for a, b in zip(stock.loss_inputs, ours.loss_inputs, strict=True):
        assert torch.equal(a["completion_ids"], b["completion_ids"])  # same rollouts: the RNG stream is untouched
        if mode == "disabled":
            assert torch.equal(a["advantages"], b["advantages"])
        else:  # full ProVer path (continuations ran, were accepted) with lam = 0: a zero bonus
            assert b["advantages"].dim() == 2
            assert torch.equal(a["advantages"].unsqueeze(1).expand_as(b["advantages"]), b["advantages"])
            assert not b["prover_bonus"].any()
    if mode == "lam0":
        assert all(r.report.count("accepted") == 1 for r in ours.results)
        # Unbatched: one generation call per continuation turn (per step: K pre x 2 turns + K post x 1 turn).
        assert [len(c) for c in ours.continuation_contexts] == [1] * (2 * 3 * K)


def test_spans_from_env_mask_and_continue_from_hook(tmp_path: Path) -> None:
    """No ``prover_*`` extras: turns are the runs of ``env_mask``, observations/actions decoded text."""
    full = make_rollout_func(LuckyDoor, max_turns=5)

    def bare_rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out = full(prompts, trainer)
        return {k: out[k] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "prover_success")}

    calls: list[tuple[int, int]] = []

    def continue_from(trajectory: Any, turn: int, seed: int) -> bool:
        calls.append((turn, seed))
        return turn >= 2  # a certain Delta = 1 for segment (1, 1)

    trainer = _build(
        tmp_path,
        ProverGRPOTrainer,
        bare_rollout,
        prover=ProverSetup(judge=FixedJudge(1, 1), continue_from=continue_from, config=ProverConfig(k=K)),
    )
    trainer.train()
    assert len(calls) == 2 * 2 * K
    for result, inputs in zip(trainer.results, trainer.loss_inputs, strict=True):
        (record,) = result.report.groups
        lucky = result.trajectories[record.trajectory_id]
        assert record.status == "accepted" and lucky.reset == {}
        assert [t.observation for t in lucky.turns] == ["enter hall", "door", "open"]
        bonus = inputs["prover_bonus"]
        (b,) = [i for i, r in enumerate(inputs["prover_row"].tolist()) if r == int(lucky.id.split(":")[1])]
        start, end = lucky.turns[1].token_span
        assert bonus[b, start:end].eq(1.0).all() and bonus.sum() == end - start


def test_the_judge_against_chance_is_logged_over_a_window_of_steps(tmp_path: Path) -> None:
    """``control_share=1``: each step's one eligible group verifies a random control turn (the judge nominates
    turn 1), and the trainer's window pools the steps: ``prover/control_verified`` logs 1, then 2."""
    full = make_rollout_func(LuckyDoor, max_turns=5)
    trainer = _build(
        tmp_path,
        ProverGRPOTrainer,
        full,
        prover=ProverSetup(
            judge=FixedJudge(1, 1),
            continue_from=lambda trajectory, turn, seed: turn >= 2,
            config=ProverConfig(k=K, control_share=1.0),
        ),
    )
    trainer.train()
    for result in trainer.results:
        (record,) = [g for g in result.report.groups if g.status != "not_eligible"]
        assert record.control and record.proposal is not None and record.proposal.segment.num_turns == 1
    logged = [log for log in trainer.state.log_history if "prover/control_verified" in log]
    assert [log["prover/control_verified"] for log in logged] == [1.0, 2.0]
    assert all(log["prover/judge_verified"] == 0.0 and log["prover/groups_control"] == 1.0 for log in logged)
    window = trainer.prover_run.window
    assert window is not None and window.total.control_verified == 2


def test_env_or_continue_from_is_required(tmp_path: Path) -> None:
    tokenizer = word_tokenizer()
    with pytest.raises(ValueError, match="needs env"):
        ProverGRPOTrainer(
            model=tiny_causal_lm(tokenizer),
            reward_funcs=success_reward,
            args=_args(tmp_path),
            train_dataset=Dataset.from_dict({"prompt": ["enter"] * 8}),
            processing_class=tokenizer,
            rollout_func=make_rollout_func(LuckyDoor, max_turns=5),
            prover=ProverSetup(),
        )


def _silent_door_render(tokenizer: Any) -> Any:
    """The rollout's rendering, except that the "door" observation renders to zero tokens."""
    return lambda obs: [] if obs == "door" else tokenizer.encode(str(obs), add_special_tokens=False)


def test_an_observation_rendered_to_zero_tokens_keeps_exact_spans_with_make_rollout_func(tmp_path: Path) -> None:
    """``make_rollout_func`` returns the exact turn spans: turns 0 and 1 abut and are still two turns. The
    continuations render observations as the rollout did without being told again (no ``policy_options``)."""
    tokenizer = word_tokenizer()
    render = _silent_door_render(tokenizer)
    prover = ProverSetup(judge=FixedJudge(1, 1), env=ReplayEnv(LuckyDoor), config=ProverConfig(k=K))
    trainer = _train(tmp_path, ProverGRPOTrainer, prover=prover, render_observation=render)
    for result, inputs in zip(trainer.results, trainer.loss_inputs, strict=True):
        (record,) = result.report.groups
        assert record.status == "accepted"
        lucky = result.trajectories[record.trajectory_id]
        (first, second, third) = (t.token_span for t in lucky.turns)
        assert first[1] == second[0] and second[1] < third[0]  # no token between turns 0 and 1
        (b,) = [i for i, r in enumerate(inputs["prover_row"].tolist()) if r == int(lucky.id.split(":")[1])]
        assert inputs["prover_bonus"][b, second[0] : second[1]].eq(1.0).all()
        assert inputs["prover_bonus"].sum() == second[1] - second[0]
    assert trainer.prover_policy.render_observation is render  # taken from the rollout function


def test_a_users_wrapper_without_functools_wraps_still_hands_the_rollouts_options_on(tmp_path: Path) -> None:
    """A rollout function wrapped to time or log it, without ``functools.wraps``, hides the options at ``__init__``;
    the rollout records them on the trainer when it runs, and the trainer's policy follows them from the first
    verification on."""
    render = _silent_door_render(word_tokenizer())
    inner = make_rollout_func(LuckyDoor, max_turns=5, render_observation=render)

    def timed(prompts: list[Any], trainer: Any) -> dict[str, Any]:  # no functools.wraps
        return inner(prompts, trainer)

    assert rollout_policy_options(timed) == {}  # nothing on the wrapper itself
    prover = ProverSetup(judge=FixedJudge(1, 1), env=ReplayEnv(LuckyDoor), config=ProverConfig(k=K))
    trainer = _build(tmp_path, ProverGRPOTrainer, timed, prover=prover)
    assert trainer.prover_policy.render_observation is not render  # not known before the rollout runs
    trainer.train()
    assert trainer.prover_policy.render_observation is render
    assert [g.status for r in trainer.results for g in r.report.groups] == ["accepted"] * len(trainer.results)


def test_inclusive_turn_spans_from_a_rollout_func_make_a_recorded_skip(tmp_path: Path) -> None:
    """Spans ending one token early (inclusive ends) leave each action's last token outside its turn: the
    trainable mask shows it, so the group is skipped with the reason, not credited one token short."""
    full = make_rollout_func(LuckyDoor, max_turns=5)

    def inclusive(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out = full(prompts, trainer)
        out["prover_turn_spans"] = [
            [[a, b - 1 if b - a > 1 else b] for a, b in row] for row in out["prover_turn_spans"]
        ]
        return out

    prover = ProverSetup(judge=FixedJudge(1, 1), env=ReplayEnv(LuckyDoor), config=ProverConfig(k=K))
    trainer = _build(tmp_path, ProverGRPOTrainer, inclusive, prover=prover)
    trainer.train()
    (record,) = trainer.prover_last_report.groups
    assert (record.status, record.stage) == ("skipped", "trigger")
    assert "prover_turn_spans disagree with the trainable mask" in record.reason
    assert "spans look inclusive (start, last)" in record.reason


def test_rows_that_cannot_be_rebuilt_make_a_recorded_skip_not_a_crash(tmp_path: Path, stock: Any) -> None:
    """Without explicit spans, the empty "door" observation merges turns 0 and 1 into one run of the
    env mask: 3 recorded turns, 2 runs. The group keeps plain GRPO credit and the report says why."""
    tokenizer = word_tokenizer()
    full = make_rollout_func(LuckyDoor, max_turns=5, render_observation=_silent_door_render(tokenizer))

    def no_spans(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out = full(prompts, trainer)
        del out["prover_turn_spans"]
        return out

    prover = ProverSetup(judge=FixedJudge(1, 1), env=ReplayEnv(LuckyDoor), config=ProverConfig(k=K))
    trainer = _build(tmp_path, ProverGRPOTrainer, no_spans, prover=prover)
    trainer.train()  # no crash
    assert trainer.state.global_step == 2
    assert trainer.results == [None, None]  # nothing was verified
    (record,) = trainer.prover_last_report.groups
    assert record.status == "skipped" and record.stage == "trigger"
    assert (record.size, record.successes) == (G, 1)
    assert "3 turns in prover_turns but 2 token spans" in record.reason
    for inputs in trainer.loss_inputs:
        assert not inputs["prover_bonus"].any()
        assert torch.equal(inputs["advantages"], inputs["advantages"][:, :1].expand_as(inputs["advantages"]))
    logged = [log for log in trainer.state.log_history if "prover/groups_skipped" in log]
    assert [log["prover/groups_skipped"] for log in logged] == [1.0, 1.0]
    assert [log["prover/continuation_share"] for log in logged] == [0.0, 0.0]

    strict = ProverSetup(judge=FixedJudge(1, 1), env=ReplayEnv(LuckyDoor), config=ProverConfig(k=K, strict=True))
    trainer = _build(tmp_path / "strict", ProverGRPOTrainer, no_spans, prover=strict)
    with pytest.raises(ProverTRLError, match="token spans"):
        trainer.train()
