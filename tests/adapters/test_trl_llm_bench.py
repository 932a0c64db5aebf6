"""The LLM-shaped benchmark's torch parts (``prover bench --only llm``): transformer cache, loss, BC start.

In tests/adapters/ under a ``test_trl_`` name so that ``./scripts/test`` runs it in the TRL environment,
which has CPU torch; elsewhere it is skipped (``tests.conftest.importorskip``: a failure under
``PROVER_REQUIRE_HOSTS=1``). The torch-free parts are in tests/test_bench_llm.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import importorskip

torch = importorskip("torch")

from prover_bench.llm import engine as E  # noqa: E402
from prover_bench.llm import model as M  # noqa: E402
from prover_bench.llm import tasks as T  # noqa: E402
from prover_bench.llm import train as TR  # noqa: E402
from prover_bench.llm.loss import aggregate, clipped_token_loss, policy_loss  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    E.threads()


def test_cached_sampling_computes_the_same_function_as_the_full_forward() -> None:
    p = M.init_params(1)
    with torch.no_grad():
        for v in p.values():
            v.mul_(4)  # sharper logits: differences show
    recs = [T.simulate(T.make_task(i), "expert", np.random.default_rng(i)) for i in range(3)]
    full = [M.forward(p, torch.tensor([r.tokens]))[0].detach().double().numpy() for r in recs]
    eng = E.Engine(p, slots=6)
    eng.acquire()  # a busy slot below: rows between the active ones compute garbage that must not leak
    slots = [eng.acquire() for _ in recs]
    errors = []
    for s, r, f in zip(slots, recs, full, strict=True):
        n = r.obs_start[1]
        errors.append(np.abs(eng.prefill(s, r.tokens[: n + 3]) - f[n + 2]).max())

    async def walk(s: int, r: T.Record, f: np.ndarray) -> None:
        for t in range(1, r.turns - 1):
            a, b = r.spans[t]
            for j in range(a, b - 1):  # action tokens one at a time
                errors.append(np.abs(await eng.feed(s, [r.tokens[j]]) - f[j]).max())
            nxt = r.obs_start[t + 1]  # the last action token and the next observation at once
            errors.append(np.abs(await eng.feed(s, r.tokens[b - 1 : nxt + 3]) - f[nxt + 2]).max())

    import asyncio

    async def all_walks() -> None:
        await asyncio.gather(*(walk(s, r, f) for s, r, f in zip(slots, recs, full, strict=True)))

    E.run(all_walks())
    scale = max(np.abs(f).max() for f in full)
    assert max(errors) < 1e-5 * scale
    assert eng.forwards < sum(len(r.tokens) for r in recs)  # requests were batched


def test_an_episode_depends_only_on_the_weights_and_its_seed() -> None:
    p = M.init_params(2)
    task = T.make_task(5)
    alone = E.run(E.episodes(E.Engine(p, 4), [task], [[7, 1]]))
    crowd = E.run(
        E.episodes(E.Engine(p, 16), [T.make_task(i) for i in range(6)] + [task], [[i, 0] for i in range(6)] + [[7, 1]])
    )
    assert alone[0].tokens == crowd[-1].tokens and alone[0].final == crowd[-1].final  # type: ignore[index]


def test_loss_aggregation_against_hand_worked_numbers() -> None:
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 5.0], [-2.0, 7.0, 7.0]])  # values off the mask must not count
    # on-policy (ratio 1): per-token loss -A: [[-1, -1, .], [2, ., .]]
    token_mean = policy_loss(logp, adv, mask, "token-mean")
    assert float(token_mean.detach()) == pytest.approx((-1 - 1 + 2) / 3)  # 0
    token_mean.backward()
    np.testing.assert_allclose(logp.grad.numpy(), [[-1 / 3, -1 / 3, 0], [2 / 3, 0, 0]], rtol=1e-6)
    logp.grad = None
    seq_mean = policy_loss(logp, adv, mask, "seq-mean")
    assert float(seq_mean.detach()) == pytest.approx(((-1 - 1) / 2 + 2 / 1) / 2)  # 0.5
    seq_mean.backward()
    np.testing.assert_allclose(logp.grad.numpy(), [[-1 / 4, -1 / 4, 0], [1.0, 0, 0]], rtol=1e-6)
    # the clip, off-policy: ratio 1.5, A = +1 -> clipped at 1.2; A = -1 -> min(-1.5, -1.2) = -1.5
    lp, old = torch.log(torch.tensor([1.5, 1.5, 0.5])), torch.zeros(3)
    got = clipped_token_loss(lp, old, torch.tensor([1.0, -1.0, 1.0]), eps=0.2)
    np.testing.assert_allclose(got.numpy(), [-1.2, 1.5, -0.5], rtol=1e-6)
    assert float(aggregate(torch.ones(1, 2), torch.zeros(1, 2), "token-mean")) == 0.0
    with pytest.raises(ValueError):
        aggregate(torch.ones(1, 2), torch.ones(1, 2), "sum")  # type: ignore[arg-type]


def test_turn_advantages_land_on_the_action_tokens() -> None:
    recs = [T.simulate(T.make_task(i), "expert", np.random.default_rng(i)) for i in range(2)]
    tokens, mask = TR.token_rows(recs)
    per_turn = [np.arange(r.turns, dtype=float) + 1 for r in recs]
    adv = TR.turn_advantages_to_tokens(recs, per_turn, tokens.shape[1])
    for i, r in enumerate(recs):
        for t, (a, b) in enumerate(r.spans):
            assert (adv[i, a:b] == t + 1).all() and (mask[i, a:b] == 1).all()
        assert int(mask[i].sum()) == r.action_tokens
        assert (adv[i][mask[i] == 0] == 0).all()
    lp = TR.token_logp(M.init_params(0), tokens).detach()  # log-probs of the realised tokens: <= 0, position 0 unused
    assert lp.shape == tokens.shape and float(lp[:, 0].abs().sum()) == 0.0 and float(lp.max()) <= 0.0


def test_continuations_join_the_loss_as_rows_of_their_own_actions() -> None:
    """Group rows first (padded), then one row per continuation: its history is context (mask 0), only its own
    action tokens are trained, with ``R_c`` minus the leave-one-out mean of its boundary's continuations."""
    rng = np.random.default_rng(3)
    records = [T.simulate(T.make_task(i), "expert", rng) for i in range(2)]
    conts = []
    for _ in range(3):
        c = T.restored(records[0], 4)
        while not c.final.done:
            T.play(c, T.action_tokens(T.expert(c.task, c.final, rng)), float(rng.random()))
        conts.append((("t", 4), c))
    tokens0, _ = TR.token_rows(records)
    adv0 = torch.full(tokens0.shape, 0.5)
    tokens, mask, adv = TR.with_continuations(records, adv0, conts)
    assert tokens.shape[0] == adv.shape[0] == mask.shape[0] == 5
    assert (tokens[:2, : tokens0.shape[1]] == tokens0).all() and (adv[:2, : tokens0.shape[1]] == 0.5).all()
    wins = [float(c.success) for _, c in conts]
    for i, (_, c) in enumerate(conts):
        row = 2 + i
        history = records[0].obs_start[4]
        assert tokens[row, :history].tolist() == records[0].tokens[:history]
        assert float(mask[row, :history].sum()) == 0.0 and int(mask[row].sum()) == c.action_tokens
        expected = wins[i] - (sum(wins) - wins[i]) / 2
        assert torch.allclose(adv[row][mask[row] == 1], torch.tensor(expected))
        assert float(adv[row][mask[row] == 0].abs().sum()) == 0.0


@pytest.fixture(scope="module")
def start() -> M.Params:
    """The seed-0 behaviour-cloned start of the benchmark (200 BC steps)."""
    E.threads()
    return TR.behaviour_clone(0, steps=200)


def test_the_behaviour_cloned_start_is_in_the_target_band(start: M.Params) -> None:
    """Design: 10-30% held-out success at the start (seed 0, 200 BC steps, 32 held-out tasks x 4)."""
    success = TR.evaluate(start, tasks=32, samples=4, seed=0)
    assert 0.10 <= success <= 0.30, success


@pytest.mark.parametrize(
    "arm",
    [
        "ProVer, anchor judge, adaptive",
        "ProVer, anchor judge, continuations as data",
        "ProVer, library default (choice judge, K=4)",
    ],
)
def test_a_job_gives_the_same_run_in_a_spawned_worker_process(start: M.Params, arm: str) -> None:
    """``Settings.workers`` only changes where a job runs: a job rebuilt by name in a spawned process (the judge
    included) trains, verifies and evaluates exactly as in this one; the SGD size's arms all use plain SGD.
    With continuations as data, every continuation (2 boundaries x K = 8 per verified group) is trained on."""
    import dataclasses
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from prover_bench.llm.run import SGD, Job, _run_job, arms

    assert {a.optimizer for a in arms(SGD)} == {"sgd"}
    assert {a.name: a.sampling for a in arms(SGD)}["ProVer, anchor judge, adaptive"] == "adaptive"
    tiny = dataclasses.replace(SGD, seeds=1, steps=2, eval_every=2, eval_tasks=4, eval_samples=1, more=True)
    job = Job(arm, 8, 0, 3.0)

    def plain(run: TR.LLMRun) -> dict[str, object]:
        d = dataclasses.asdict(run)
        return d | {"seconds": 0, "logs": [log | {"seconds": 0} for log in d["logs"]]}

    here = plain(_run_job(tiny, job, start, 0.2))
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        there = plain(pool.submit(_run_job, tiny, job, start, 0.2).result())
    assert here == there
    assert sum(log["verified"] for log in here["logs"]) > 0  # the verification ran
    if "data" in arm:
        assert [log["data_rows"] for log in here["logs"]] == [16 * log["verified"] for log in here["logs"]]
    else:
        assert sum(log["data_rows"] for log in here["logs"]) == 0


def test_task_variants_clone_and_train_on_their_own_observations() -> None:
    """``variant`` reaches behaviour cloning, the rollouts and the evaluation (issue 36's regime search): the same
    seed gives other weights and other episodes on ``local`` than on ``default``, and the episodes carry it."""
    a = TR.behaviour_clone(0, steps=3)
    b = TR.behaviour_clone(0, steps=3, variant="local")
    assert any(not torch.equal(a[k], b[k]) for k in a)
    got: list[M.Params] = []
    run = TR.train_run(TR.Arm("GRPO", group_size=2), b, 0, 1e-3, 1, (1,), 2, 1, 0.0, tasks_per_step=2,
                       trained=got.append, variant="local")  # fmt: skip
    assert run.eval_steps == [0, 1] and len(run.logs) == 1
    recs = E.run(E.episodes(E.Engine(got[0], 4), [T.make_task(1, "marked")], [[0, 1]]))
    assert recs[0].task.variant == "marked"
    first = recs[0].obs_start[0]
    assert recs[0].tokens[first : first + 3] == T.observation_tokens(recs[0].task, T.State())


def test_the_gpu_regime_script_runs_its_smoke_mode_on_cpu(tmp_path: Path) -> None:
    """``scripts/gpu-llm-regime --smoke``: the whole path of the GPU run (BC, both arms at 3 lrs in 2 spawned
    worker processes, a widening, the verdict first), tiny, on CPU, with this interpreter."""
    root = Path(__file__).resolve().parents[2]
    env = os.environ | {"PYTHON": sys.executable, "OUT": str(tmp_path), "WORKERS": "2"}
    done = subprocess.run([str(root / "scripts" / "gpu-llm-regime"), "--smoke"], env=env, capture_output=True,
                          text=True, timeout=900, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("regime check: ")
    assert "GRPO learns: " in done.stdout and "More samples help: " in done.stdout
    written = tmp_path / "llm-regime-smoke"
    assert (written / "smoke.md").read_text().startswith("regime check: ")
    runs = json.loads((written / "smoke.json").read_text())["runs"]
    assert {r["arm"] for r in runs} == {"GRPO", "GRPO budget-matched"} and {r["seed"] for r in runs} == {0, 1}
    assert {r["group_size"] for r in runs} == {4, 6} and len({r["lr"] for r in runs}) >= 3


def test_the_ranking_writes_each_seed_and_resumes_from_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``llm_regime.py --rank R12 --tiny``: every arm of a seed trained and written to its own file, the check line
    first and one verdict per ProVer arm; a second call trains nothing and reports the same; a file removed is the
    one seed trained again, to the same figures (a seed's runs depend on nothing but the seed)."""
    from tests.conftest import load_script

    script = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "llm_regime.py", "llm_regime")
    results, out = tmp_path / "results", tmp_path / "out"
    argv = ["--rank", "R12", "--tiny", "--seeds", "2", "--primary-only", "--workers", "1", "--results", str(results),
            "--out", str(out)]  # fmt: skip
    assert script.main(argv) == 0
    first = capsys.readouterr()
    files = sorted(p.name for p in results.iterdir())
    assert files == ["R12-lr0.000333333-seed32.json", "R12-lr0.000333333-seed33.json"]
    assert "2 seed runs to do (0 already in" in first.err
    lines = first.out.splitlines()
    assert lines[0].startswith("regime check (fixed lr): ") and lines[0].endswith("[primary lr 0.000333333]")
    assert [x.split(" at lr ")[0] for x in lines[1:6]] == [f"verdict: {a}" for a in script.RANK_ARMS[2:]]
    saved = json.loads((results / files[0]).read_text())
    assert [r["arm"] for r in saved["runs"]] == list(script.RANK_ARMS)
    assert [r["group_size"] for r in saved["runs"]] == [4, 6, 4, 4, 4, 4, 4]
    assert script.main(argv) == 0
    again = capsys.readouterr()
    assert "0 seed runs to do (2 already in" in again.err and again.out == first.out
    before = json.loads((results / files[1]).read_text())
    (results / files[1]).unlink()
    assert script.main(argv) == 0
    third = capsys.readouterr()
    assert "1 seed runs to do (1 already in" in third.err
    redone = json.loads((results / files[1]).read_text())
    assert [(r["success"], r["policy_tokens"]) for r in redone["runs"]] == [
        (r["success"], r["policy_tokens"]) for r in before["runs"]
    ]


# --- issue 51: the ceiling regime's torch parts (benchmarks/llm_ceiling.py) ----------------------------------------


def test_decision_probs_are_the_exact_probability_of_the_take_action() -> None:
    """P(take) in the goal room of held-out task 0, computed here token by token from the full forward pass (the
    product of the 4 action tokens' softmax probabilities after the optimal path's context), against
    ``decision_probs`` on that one task; ``last`` has no key room after the goal's (NaN), ``marked`` may."""
    params = M.init_params(3)
    task = T.make_task(TR.HELD_OUT, "marked")
    record = T.start_record(task)
    while record.final.room != task.goal_room:
        T.play(record, T.action_tokens(T.solved(task, record.final)), 0.99)
    context = record.tokens + T.observation_tokens(task, record.final)
    take = T.action_tokens(("take", -1))
    with torch.no_grad():
        logits = M.forward(params, torch.tensor([context + take]))
    probs = torch.softmax(logits[0].double(), dim=-1)
    want = float(np.prod([float(probs[len(context) - 1 + j, tok]) for j, tok in enumerate(take)]))
    got = TR.decision_probs(params, "marked", tasks=1)
    assert got["pivot"] == pytest.approx(want, rel=1e-5)
    assert 0 < got["before"] < 1 or np.isnan(got["before"])
    assert np.isnan(TR.decision_probs(params, "last", tasks=8)["after"])
    assert not np.isnan(TR.decision_probs(params, "marked", tasks=8)["after"])


def test_the_same_batch_grpo_copy_of_a_grpo_arm_is_the_arm_itself(start: M.Params) -> None:
    """``Arm.diagnose``: the copy trains with GRPO's advantages on the arm's own batches, so for a GRPO arm it is
    the arm, exactly: every probe of the arm equals its copy's. The token-matched arm samples its extra members."""
    import dataclasses

    arm = TR.Arm("GRPO", group_size=4, optimizer="adam", diagnose=True)
    run = TR.train_run(arm, start, 0, 1e-3, 2, [1, 2], 4, 1, 0.0, tasks_per_step=4)
    assert len(run.probes) == 3
    for probe in run.probes:
        for kind in TR.DECISIONS:
            assert probe[kind] == probe[f"grpo_{kind}"]
    assert run.probes[0]["pivot"] != run.probes[-1]["pivot"]  # it trained
    more = TR.train_run(dataclasses.replace(arm, diagnose=False, extra_members=1.5), start, 0, 1e-3, 2, [2], 4, 1,
                        0.0, tasks_per_step=4)  # fmt: skip
    assert more.probes == [] and [log.rollout_turns > 0 for log in more.logs] == [True, True]
    assert more.policy_tokens[-1] > run.policy_tokens[-1]  # 1 + 2 extra members over the 2 steps


def test_the_ceiling_run_writes_each_seed_logs_the_credit_share_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``llm_ceiling.py --smoke``: each seed of C1 and of R12 trained and written, every arm's runs in its file, the
    ProVer arms' steps logging ``credit_share`` and ``trigger_share`` and their probes; the report's verdict lines;
    a second call trains nothing and prints the same report."""
    from tests.conftest import load_script

    script = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "llm_ceiling.py", "llm_ceiling")
    results = tmp_path / "results"
    argv = ["--smoke", "--seeds", "2", "--workers", "2", "--results", str(results)]
    assert script.main(argv) == 0
    first = capsys.readouterr()
    assert sorted(p.name for p in results.iterdir()) == [
        "C1-seed400.json", "C1-seed401.json", "R12-seed32.json", "R12-seed33.json"
    ]  # fmt: skip
    saved = json.loads((results / "C1-seed400.json").read_text())
    assert [r["arm"] for r in saved["runs"]] == list(script.ARMS)
    prover = [r for r in saved["runs"] if r["arm"] in script.PROVER_ARMS]
    assert all(len(r["probes"]) == len(r["eval_steps"]) for r in prover)
    for r in saved["runs"]:
        for log in r["logs"]:
            assert log.get("credit_share", 0.0) >= 0.0 and 0.0 <= log.get("trigger_share", 0.0) <= 1.0
    verdicts = [x for x in first.out.splitlines() if x.startswith("verdict: ")]
    assert [v.split(" in ")[0] for v in verdicts] == [f"verdict: {a}" for a in (*script.PROVER_ARMS, script.CONTRAST)]
    assert script.main(argv) == 0
    again = capsys.readouterr()
    assert "0 seed jobs to do (4 already in" in again.err and again.out == first.out
