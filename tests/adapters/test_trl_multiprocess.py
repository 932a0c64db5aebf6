"""A GRPO group split across two CPU processes (gloo): it is gathered, credited once, by the process
holding its successful run, and every process logs the same merged figures.

The test launches this file with ``torch.distributed.run --nproc_per_node 2``; each rank trains two
steps (2 rows per process, groups of 4, so every group spans both processes) and writes what it saw.

Mode ``vllm``: TRL's vLLM server mode on both processes (``tests/adapters/vllm_loopback.py``, served
from a thread of process 0, the only one holding TRL's ``VLLMClient``). The rollout's generation is
collective (TRL gathers the prompts to process 0 and broadcasts the completions); the successful run
sits on process 1, yet the whole verification runs on process 0 through the engine, and the bonus
reaches process 1's row.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.hosts import require_host

if __name__ != "__main__":
    require_host("trl")


def _worker(out_dir: str, mode: str = "ok") -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from examples.trl_toy import tiny_causal_lm, word_tokenizer
    from tests.adapters.vllm_loopback import LoopbackVLLM, trl_server_mode

    tokenizer = word_tokenizer()
    if mode != "vllm":
        _train(out_dir, mode, tokenizer, None)
        return
    if os.environ["RANK"] != "0":  # only process 0 holds TRL's VLLMClient
        with trl_server_mode(None):
            _train(out_dir, mode, tokenizer, None)
        return
    server = LoopbackVLLM(tiny_causal_lm(tokenizer, seed=1), eos_token_id=tokenizer.eos_token_id, lifetime_s=200)
    with server, trl_server_mode(server):
        _train(out_dir, mode, tokenizer, server)


def _train(out_dir: str, mode: str, tokenizer: Any, server: Any) -> None:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from examples.trl_toy import FixedJudge, LuckyDoor, tiny_causal_lm
    from prover_core import ProverConfig, ReplayEnv
    from prover_trl import ProverGRPOTrainer, ProverSetup, make_rollout_func, member_reset, success_reward

    seen: list[dict[str, Any]] = []

    class Recording(ProverGRPOTrainer):
        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            mask = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
            ratio = inputs.get("importance_sampling_ratio")
            seen.append(
                {
                    "rows": inputs["prover_row"].tolist(),
                    "bonus": inputs["prover_bonus"].tolist(),
                    "adv_minus_bonus": (inputs["advantages"] - inputs["prover_bonus"]).tolist(),
                    "accepted": [g.trajectory_id for g in self.prover_last_report.groups if g.status == "accepted"],
                    "owned": self.prover_last_result is not None,
                    "ratio_dev": None if ratio is None else float((ratio[mask] - 1).abs().max()),
                    "policy": type(self.prover_policy).__name__,
                }
            )
            return super()._compute_loss(model, inputs)

    class BrokenJudge:  # mode "fail": the judge breaks, strict mode raises, on the owner (process 0) only
        def propose(self, success: Any, failures: Any, rules: Any) -> Any:
            raise ConnectionError("judge server unreachable")

    def lucky_on_process_1(prompt: Any, row: int, size: int) -> dict[str, Any]:
        return {"prompt": prompt, "member": (row + 2) % size}  # global row 2 (process 1) is member 0

    vllm = mode == "vllm"
    server_args: dict[str, Any] = {}
    if vllm:  # only process 0 builds a client; the others never connect
        url = server.url if server is not None else "http://127.0.0.1:9"
        server_args = {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": url}
        server_args["vllm_importance_sampling_mode"] = "token_truncate"  # a per-token ratio to check
    args = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=2,
        num_generations=4,
        max_steps=2,
        max_completion_length=3,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        **server_args,
    )
    trainer = Recording(
        model=tiny_causal_lm(tokenizer, seed=0),
        reward_funcs=success_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["enter"] * 8}),
        processing_class=tokenizer,
        rollout_func=make_rollout_func(LuckyDoor, max_turns=5, reset_spec=lucky_on_process_1 if vllm else member_reset),
        prover=ProverSetup(
            judge=BrokenJudge() if mode == "fail" else FixedJudge(1, 1),
            env=ReplayEnv(LuckyDoor),
            config=ProverConfig(k=2, strict=mode == "fail"),
        ),
    )
    trainer.train()
    rank = trainer.accelerator.process_index
    logs = [
        {k: v for k, v in log.items() if k.startswith("prover/")}
        for log in trainer.state.log_history
        if "prover/groups" in log
    ]
    summary: dict[str, Any] = {"rank": rank, "world": trainer.accelerator.num_processes, "steps": seen, "logs": logs}
    summary["verify_on"] = trainer.prover_verify_on
    if server is not None:
        summary["seeded_requests"] = sum("seed" in r for r in server.requests)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(summary))
    torch.distributed.barrier()


def _launch(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "adapters" / "engine"), str(root / "adapters" / "trl")]),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    return subprocess.run([*cmd, __file__, str(tmp_path), mode], env=env, capture_output=True, text=True, timeout=240)


def test_group_split_across_two_processes_is_gathered_and_credited_once(tmp_path: Path) -> None:
    proc = _launch(tmp_path, "ok")
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    for step in range(2):
        zero, one = ranks[0]["steps"][step], ranks[1]["steps"][step]
        assert sorted(zero["rows"] + one["rows"]) == [0, 1, 2, 3]  # one group of 4, two rows on each process
        assert zero["owned"] and not one["owned"]  # member 0 (row 0, process 0) succeeds: process 0 verifies
        (accepted,) = zero["accepted"]
        assert accepted == one["accepted"][0] and accepted.endswith(":0")  # merged report on both processes
        for rank in (zero, one):
            for row, bonus in zip(rank["rows"], rank["bonus"], strict=True):
                assert (sum(bonus) > 0) == (row == 0)  # the bonus lands only on the successful row
                assert set(bonus) <= {0.0, 1.0}
    assert ranks[0]["logs"] == ranks[1]["logs"]
    assert [log["prover/groups_accepted"] for log in ranks[0]["logs"]] == [1.0, 1.0]


def test_a_failure_on_one_process_raises_on_every_process_instead_of_hanging(tmp_path: Path) -> None:
    proc = _launch(tmp_path, "fail")  # the 240 s timeout would fire if process 0 waited at the gather
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    # process 0 (the owner of the group) raised; process 1 raised too instead of waiting at the gather
    assert out.count("ProVer failed on process 0: JudgeError") >= 2, out[-4000:]
    assert "judge server unreachable" in out
    assert not list(tmp_path.glob("rank*.json"))


def test_vllm_server_mode_on_two_processes_verifies_on_the_main_process(tmp_path: Path) -> None:
    proc = _launch(tmp_path, "vllm")
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["verify_on"] for r in ranks] == ["main", "main"]
    assert ranks[0]["seeded_requests"] > 0  # continuations went to the server, from process 0
    for step in range(2):
        zero, one = ranks[0]["steps"][step], ranks[1]["steps"][step]
        assert (zero["policy"], one["policy"]) == ("EnginePolicy", "NoneType")
        assert zero["owned"] and not one["owned"]  # process 0 verified, though the success is on process 1
        (accepted,) = zero["accepted"]
        assert accepted == one["accepted"][0] and accepted.endswith(":2")
        assert all(sum(b) == 0 for b in zero["bonus"])  # the bonus reached process 1's row 2 only
        for row, bonus in zip(one["rows"], one["bonus"], strict=True):
            assert (sum(bonus) > 0) == (row == 2) and set(bonus) <= {0.0, 1.0}
        assert zero["ratio_dev"] < 5e-3 and one["ratio_dev"] < 5e-3  # IS correction on the rollout's logprobs
    assert ranks[0]["logs"] == ranks[1]["logs"]
    assert [log["prover/groups_accepted"] for log in ranks[0]["logs"]] == [1.0, 1.0]
    assert [log["prover/continuation_share"] for log in ranks[0]["logs"]] == [1.0, 1.0]  # 2K = 4 over 4 episodes


if __name__ == "__main__":
    _worker(*sys.argv[1:])
