"""The cost of one training step: TRL's ``GRPOTrainer`` against ``ProverGRPOTrainer``, each arm in its own process.

    python benchmarks/trl_step.py                       # CPU, the tiny model: every arm, a table (about 1 minute)
    python benchmarks/trl_step.py --size small          # CPU, an 8M-parameter model (a few minutes)
    python benchmarks/trl_step.py --size 135m,1.5b --device cuda --out DIR   # a GPU machine (<= 8 minutes)

The game (:class:`MenuGame`): 8 rooms, one numbered menu of 3 options each; the action is 3 generated tokens,
of which the first picks the option. Room 2 and room 5 have one right option each (set by the task), room 4 has
a trap that ends the episode at once; the rest do not matter. A uniformly random policy succeeds with
probability 1/3 * 2/3 * 1/3 = 2/27, so most groups of 8 hold 1-3 successes and are eligible. Every arm gets the
same tasks, the same model initialisation and seed, 8 groups x 8 rows per step (64 rows), and the rollout of
``prover_trl.make_rollout_func`` through TRL's own generation (transformers ``generate``, bf16 on a GPU).

Arms: ``grpo`` (stock ``GRPOTrainer``), ``prover`` (the library's defaults: ``ChoiceJudge``, K = 4,
curtailment that cancels the second boundary, one round), ``prover-wait`` (curtailment that waits for the
first boundary: the default before 0.2, two rounds), ``prover-full`` (``curtail=False``: every continuation).
Per step it records the wall time split into rollout (TRL's ``_generate``: the multi-turn rollout), verification
(``ProverGRPOTrainer._prover_bonus``) and the rest (scoring, loss, backward, optimizer); the ``generate`` calls of
each phase, one after another, with their rows and generated tokens; ProVer's own report
(``prover/verify_policy_rounds`` next to ``prover/rollout_policy_rounds``); and the peak memory. The first step
warms up and is left out. It prints each arm's step time as a ratio to ``grpo`` measured in the same run.

Model shapes are random initialisations from a config (nothing is downloaded): ``tiny`` (a 2-layer toy, CPU
smoke test), ``small`` (8M), ``135m`` (SmolLM2-135M's shape) and ``1.5b`` (a 1.5B Llama shape: Qwen2.5-1.5B's
widths). The word-level tokenizer is built in the script; its vocabulary is padded to the model's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# transformers 5 deprecates names that TRL itself calls: nothing to act on here, so not shown
warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("grpo", "prover", "prover-wait", "prover-full")
TURNS, OPTIONS, ACTION_TOKENS = 8, 3, 3
ROOMS = ("hall", "door", "key", "knock", "north", "south", "east", "west")
WORDS = (*ROOMS, "enter", "walk", "wait", "push", "pull", "look", "left", "right", "go", "open", "shut", "end")
TASKS = 9  # a task fixes the right option in room 2 (task % 3) and in room 5 (task // 3)
PIVOTS, TRAP = (2, 5), (4, 2)  # rooms with a right option; (room, option) that ends the episode


@dataclass(frozen=True)
class Size:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int | None  # None: the word tokenizer's own size


SIZES = {
    "tiny": Size(32, 2, 2, 2, 64, None),
    "small": Size(256, 6, 4, 4, 1024, 4096),
    "135m": Size(576, 30, 9, 3, 1536, 49152),  # SmolLM2-135M
    "1.5b": Size(1536, 28, 12, 2, 8960, 151936),  # Qwen2.5-1.5B's widths, as a Llama
}


class MenuGame:
    """8 rooms with a menu of 3; right options in rooms 2 and 5, a trap in room 4 (see the module docstring)."""

    def __init__(self) -> None:
        self.room, self.task, self.right = 0, 0, True

    def reset(self, spec: Mapping[str, Any]) -> Any:
        from prover_core import Step

        self.room, self.task, self.right = 0, WORDS.index(str(spec["prompt"]).split()[-1]) % TASKS, True
        return Step(observation=self._observation())

    def reseed(self, seed: int) -> None:
        """Deterministic transitions: nothing to draw."""

    def _observation(self) -> str:
        return f"{ROOMS[self.room]} left right go"

    def step(self, choice: Any) -> Any:
        from prover_core import Step

        choice = int(choice)
        if self.room in PIVOTS:
            wanted = self.task % OPTIONS if self.room == PIVOTS[0] else self.task // OPTIONS
            self.right = self.right and choice == wanted
        if (self.room, choice) == TRAP:
            return Step(observation="end", done=True, success=False)
        self.room += 1
        if self.room == TURNS:
            return Step(observation="end", done=True, success=self.right)
        return Step(observation=self._observation())


def parse_choice(ids: Sequence[int]) -> int:
    """The option an action picks: its first token id, modulo 3."""
    return int(ids[0]) % OPTIONS


def word_tokenizer(vocab: int | None) -> Any:
    """A word-level tokenizer of the game's words, padded with ``w<i>`` words to ``vocab`` entries."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[PAD]", "[EOS]", "[UNK]", *WORDS]
    words += [f"w{i}" for i in range(max(0, (vocab or 0) - len(words)))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]", padding_side="left"
    )


def build_model(size: Size, tokenizer: Any, seed: int, device: str = "cpu") -> Any:
    """A random initialisation of ``size``, built on ``device`` (a 1.5B model is initialised on the GPU in seconds)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        return LlamaForCausalLM(config)


class Probe:
    """Where the step is (rollout, verify), and every ``generate`` call made there, timed."""

    def __init__(self, cuda: bool, profile: bool = False) -> None:
        import cProfile

        self.cuda, self.phase = cuda, "other"
        self.profiler = cProfile.Profile() if profile else None
        self.steps = 0
        """Optimizer steps begun."""
        self.calls: list[dict[str, Any]] = []
        self.spans: list[tuple[str, float]] = []

    def now(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()

    @contextlib.contextmanager
    def within(self, phase: str) -> Iterator[None]:
        before, started = self.phase, self.now()
        self.phase = phase
        try:
            yield
        finally:
            self.phase = before
            self.spans.append((phase, self.now() - started))


PROFILED = {  # part of a ProVer step -> (file suffix, function name) whose cumulative time it is
    "generate (the model)": ("grpo_trainer.py", "_generate_single_turn"),
    "restore by replay (ReplayEnv)": ("prover_core/restore.py", "restore"),
    "continuation env steps": ("prover_core/restore.py", "step"),
    "continuation seeds": ("prover_core/verify.py", "continuation_seeds"),
    "rows -> trajectories": ("prover_trl/trainer.py", "_build_rows"),
    "gathers across processes": ("prover_trl/trainer.py", "_gather_or_raise"),
    "bonus -> tokens": ("prover_core/credit.py", "spread_to_tokens"),
}


def profile_parts(profiler: Any, steps: int, judge_s: float) -> dict[str, float]:
    """Seconds per step in each part of ``PROFILED`` (cumulative: a part includes what it calls), the judge (its
    wall time, ``prover/time/propose``: it runs in worker threads, which cProfile does not see), the whole
    ``_prover_bonus``, and the rest of it (the library's own work)."""
    import pstats

    stats: Any = pstats.Stats(profiler).stats

    def cumulative(suffix: str, name: str) -> float:
        return sum(v[3] for (path, _, func), v in stats.items() if func == name and path.endswith(suffix))

    parts = {part: cumulative(*where) / steps for part, where in PROFILED.items()}
    parts["judge (wall time, in threads)"] = judge_s
    total = cumulative("prover_trl/trainer.py", "_prover_bonus") / steps
    nested = parts["continuation env steps"] + parts["restore by replay (ReplayEnv)"]  # neither inside generate
    parts["rest of the library"] = total - parts["generate (the model)"] - nested - sum(
        parts[p] for p in ("judge (wall time, in threads)", "continuation seeds", "rows -> trajectories",
                           "gathers across processes", "bonus -> tokens")
    )  # fmt: skip
    parts["verification step (_prover_bonus)"] = total
    return parts


def instrumented(base: type, probe: Probe) -> type:
    """``base`` (a ``GRPOTrainer`` class) recording its phases and ``generate`` calls in ``probe``."""

    class Timed(base):  # type: ignore[misc, valid-type]
        def _generate(self, prompts: list[Any]) -> Any:
            with probe.within("rollout"):
                return super()._generate(prompts)

        def _prover_bonus(self, output: Any, resets: Any) -> Any:
            with probe.within("verify"):
                if probe.profiler is None or probe.steps < 2:  # the first step (warm-up) is not profiled
                    return super()._prover_bonus(output, resets)
                probe.profiler.enable()
                try:
                    return super()._prover_bonus(output, resets)
                finally:
                    probe.profiler.disable()

        def _generate_single_turn(self, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
            started = probe.now()
            out = super()._generate_single_turn(prompt_ids, *args, **kwargs)
            probe.calls.append(
                {
                    "phase": probe.phase,
                    "rows": len(prompt_ids),
                    "tokens": sum(len(ids) for ids in out[0]),
                    "seconds": probe.now() - started,
                }
            )
            return out

    return Timed


def run_arm(
    arm: str, size_name: str, steps: int, device: str, seed: int, lr: float = 0.0, profile: bool = False
) -> dict[str, Any]:
    """Train ``steps`` steps of ``arm`` in this process; per-step figures (the first step is warm-up). With
    ``profile``, the verification of the measured steps runs under cProfile (slower) and its parts are returned."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from prover_core import ChoiceJudge, ProverConfig, ReplayEnv
    from prover_trl import ProverGRPOTrainer, ProverSetup, make_rollout_func, success_reward

    cuda = device == "cuda"
    if not cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    size = SIZES[size_name]
    tokenizer = word_tokenizer(size.vocab)

    def render(observation: Any) -> list[int]:
        return list(tokenizer.encode(str(observation), add_special_tokens=False))

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-step-"),
        per_device_train_batch_size=64,
        num_generations=8,
        max_completion_length=ACTION_TOKENS,
        max_steps=steps,
        learning_rate=lr,
        logging_steps=1,
        report_to="none",
        use_cpu=not cuda,
        bf16=cuda,
        save_strategy="no",
        disable_tqdm=True,
        seed=seed,
        data_seed=seed,
    )
    rollout = make_rollout_func(
        MenuGame,
        max_turns=TURNS,
        reset_spec=lambda prompt, row, size: {"prompt": prompt},
        render_observation=render,
        parse_action=parse_choice,
    )
    prompts = [f"enter {WORDS[i % len(WORDS)]}" for i in range(8 * (steps + 1))]
    probe = Probe(cuda, profile and arm != "grpo")
    kwargs: dict[str, Any] = dict(
        model=build_model(size, tokenizer, seed, device),
        reward_funcs=success_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    if arm == "grpo":
        trainer = instrumented(GRPOTrainer, probe)(**kwargs)
    else:
        config = ProverConfig(curtail=arm != "prover-full", curtail_mode="wait" if arm == "prover-wait" else "overlap")
        setup = ProverSetup(
            judge=ChoiceJudge(),
            env=ReplayEnv(MenuGame),
            config=config,
            policy_options={"render_observation": render, "parse_action": parse_choice},
        )
        trainer = instrumented(ProverGRPOTrainer, probe)(prover=setup, **kwargs)

    marks: list[tuple[float, float, int, int]] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            probe.steps += 1
            marks.append((probe.now(), 0.0, len(probe.calls), len(probe.spans)))

        def on_step_end(self, *_: Any, **__: Any) -> None:
            start, _, calls, spans = marks[-1]
            marks[-1] = (start, probe.now(), calls, spans)

    trainer.add_callback(Clock())
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log or "prover/groups" in log]
    out_steps = []
    bounds = [*[m[2] for m in marks], len(probe.calls)]
    span_bounds = [*[m[3] for m in marks], len(probe.spans)]
    for i, (start, end, _, _) in enumerate(marks):
        calls = probe.calls[bounds[i] : bounds[i + 1]]
        spans = probe.spans[span_bounds[i] : span_bounds[i + 1]]
        row: dict[str, Any] = {"step_s": end - start}
        for phase in ("rollout", "verify"):
            mine = [c for c in calls if c["phase"] == phase]
            row[f"{phase}_s"] = sum(s for p, s in spans if p == phase)
            row[f"{phase}_calls"] = len(mine)
            row[f"{phase}_rows"] = sum(c["rows"] for c in mine)
            row[f"{phase}_tokens"] = sum(c["tokens"] for c in mine)
            row[f"{phase}_generate_s"] = sum(c["seconds"] for c in mine)
        row["other_s"] = row["step_s"] - row["rollout_s"] - row["verify_s"]
        log = logs[i] if i < len(logs) else {}
        row.update({k: float(v) for k, v in log.items() if k.startswith("prover/")})
        out_steps.append(row)
    peak = (
        torch.cuda.max_memory_allocated() / 2**30
        if cuda
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    )
    params = sum(p.numel() for p in trainer.model.parameters())
    result = {"arm": arm, "size": size_name, "device": device, "params": params, "peak_gib": peak, "steps": out_steps}
    if probe.profiler is not None:
        judge_s = sum(s.get("prover/time/propose", 0.0) for s in out_steps[1:]) / max(1, len(out_steps) - 1)
        result["profile"] = profile_parts(probe.profiler, max(1, steps - 1), judge_s)
    return result


def summarise(result: Mapping[str, Any]) -> dict[str, float]:
    """Means over the measured steps (the first is warm-up, left out unless it is the only one)."""
    steps = result["steps"][1:] or result["steps"]
    keys = steps[0].keys()
    return {k: sum(s.get(k, 0.0) for s in steps) / len(steps) for k in keys}


def table(results: Sequence[Mapping[str, Any]]) -> str:
    """The step table, one row per arm; ratios against ``grpo`` of the same size."""
    head = (
        "| size | arm | step s | x GRPO | rollout s | verify s | other s | rollout calls (rows) | "
        "verify calls (rows) | rounds: verify / rollout | verify tokens / rollout | cancelled | peak GiB |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    base = {r["size"]: summarise(r)["step_s"] for r in results if r["arm"] == "grpo"}
    for r in results:
        m = summarise(r)
        ratio = m["step_s"] / base[r["size"]] if r["size"] in base else float("nan")

        def mean(n: str, d: str, m: dict[str, float] = m) -> float:
            return m[n] / m[d] if m[d] else 0.0

        lines.append(
            f"| {r['size']} ({r['params'] / 1e6:.1f}M) | {r['arm']} | {m['step_s']:.2f} | {ratio:.2f} | "
            f"{m['rollout_s']:.2f} | {m['verify_s']:.2f} | {m['other_s']:.2f} | "
            f"{m['rollout_calls']:.1f} ({mean('rollout_rows', 'rollout_calls'):.1f}) | "
            f"{m['verify_calls']:.1f} ({mean('verify_rows', 'verify_calls'):.1f}) | "
            f"{m.get('prover/verify_policy_rounds', 0):.1f} / {m.get('prover/rollout_policy_rounds', 0):.1f} | "
            f"{mean('verify_tokens', 'rollout_tokens'):.1%} | {m.get('prover/continuations_cancelled', 0):.1f} | "
            f"{r['peak_gib']:.2f} |"
        )
    return "\n".join(lines)


def verdicts(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The issue's checks, per size: verification's rounds against the rollout's (every measured step), the default's
    continuation tokens against the waiting schedule's, and the step time against GRPO's."""
    lines = []
    by = {(r["size"], r["arm"]): r for r in results}
    for size in dict.fromkeys(r["size"] for r in results):
        prover, wait, grpo = by.get((size, "prover")), by.get((size, "prover-wait")), by.get((size, "grpo"))
        if prover is None:
            continue
        steps = prover["steps"][1:] or prover["steps"]
        worst = max(s["verify_calls"] - s["rollout_calls"] for s in steps)
        lines.append(
            f"{size}: verification's generate calls - the rollout's, worst step: {worst:+.0f} "
            f"({'within' if worst <= 1 else 'over'} the rollout's + 1)"
        )
        if wait is not None:
            ours, theirs = summarise(prover)["verify_tokens"], summarise(wait)["verify_tokens"]
            lines.append(
                f"{size}: continuation tokens, default / curtail_mode='wait': {ours / theirs:.2f} "
                f"({'within' if ours <= 1.1 * theirs else 'over'} +10%)"
            )
        if grpo is not None:
            ratio = summarise(prover)["step_s"] / summarise(grpo)["step_s"]
            goal = {"135m": 1.5, "1.5b": 1.3}.get(size)
            aim = f" (the goal on a GPU: <= {goal}x)" if goal and prover["device"] == "cuda" else ""
            lines.append(f"{size}: ProVer step / GRPO step: {ratio:.2f}x{aim}")
    return lines


def profile_table(results: Sequence[Mapping[str, Any]]) -> str:
    """Where a ProVer step's verification time goes (the profiled run's seconds per step, and shares)."""
    lines = ["| size | part of the verification step | s per step | share |", "|---|---|---|---|"]
    for r in results:
        parts = r.get("profile")
        if not parts:
            continue
        total = parts["verification step (_prover_bonus)"]
        for part, seconds in parts.items():
            lines.append(f"| {r['size']} | {part} | {seconds:.4f} | {seconds / total:.1%} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="tiny", help=f"comma-separated: {', '.join(SIZES)}")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--steps", type=int, default=4, help="steps per arm, the first one warm-up (default 4)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--seed", type=int, default=0)
    same = "0 (default): the weights stay put, so every arm plays the same rollouts and verifies the same groups"
    parser.add_argument("--lr", type=float, default=0.0, help=same + " (a paired comparison of cost)")
    parser.add_argument("--profile", action="store_true", help="also run the default arm once more under cProfile")
    parser.add_argument("--budget", type=float, help="seconds: start no further arm after this (what ran is reported)")
    parser.add_argument("--out", help="folder for results.json and table.md")
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # one arm in this process (the driver's child)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.arm:
        result = run_arm(opts.arm, opts.size, opts.steps, opts.device, opts.seed, opts.lr, opts.profile)
        Path(opts.json).write_text(json.dumps(result))
        return 0
    results, profiled = [], []
    runs = [(size, arm, False) for size in opts.size.split(",") for arm in opts.arms.split(",")]
    runs += [(size, "prover", True) for size in opts.size.split(",") if opts.profile]
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        for i, (size, arm, profile) in enumerate(runs):
            if opts.budget is not None and time.perf_counter() - began > opts.budget:
                print(f"budget of {opts.budget:.0f} s spent: {size} {arm} not run", file=sys.stderr)
                continue
            name = f"{size} {arm}{' (profiled)' * profile}"
            print(f"[{i + 1}/{len(runs)}] {name}: {opts.steps} steps ...", file=sys.stderr, flush=True)
            path = Path(scratch) / f"{size}-{arm}-{profile}.json"
            command = [sys.executable, __file__, "--arm", arm, "--size", size, "--steps", str(opts.steps)]
            command += ["--device", opts.device, "--seed", str(opts.seed), "--lr", str(opts.lr), "--json", str(path)]
            started = time.perf_counter()
            # the child's own output (TRL's per-step log dicts, transformers' warnings) is shown only if it fails
            child = subprocess.run(command + ["--profile"] * profile, cwd=ROOT, capture_output=True, text=True)
            if child.returncode != 0:
                print(child.stdout[-5000:], child.stderr[-5000:], sep="\n", file=sys.stderr)
                raise subprocess.CalledProcessError(child.returncode, command)
            (profiled if profile else results).append(json.loads(path.read_text()))
            print(f"[{i + 1}/{len(runs)}] {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    text = "\n".join([table(results), "", *verdicts(results)])
    if profiled:
        text += "\n\n" + profile_table(profiled)
    print(text)
    if opts.out:
        out = Path(opts.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results + profiled, indent=1))
        (out / "table.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
