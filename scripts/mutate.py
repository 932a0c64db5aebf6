#!/usr/bin/env python3
"""Mutation check of the decision code: does some test fail when the code is made subtly wrong?

Each mutant is one small, plausible bug (a wrong level, a boundary one off, a seed not passed on, a mask dropped)
in the trigger, the acceptance rules, the adaptive test, verification's boundaries, credit spreading or an adapter's
masking. For each one this script copies the repository's files (tracked and untracked, not ignored) into a
temporary folder once, writes the mutated file there, runs the test files chosen for that mutant with ``pytest -x``
and restores the file: the working tree is never modified. A mutant is *killed* when the tests fail, and *survives*
when they pass; a survivor is a missing test, or an equivalent mutant (written down in docs/testing.md with the
reason). Exit status 1 when a mutant outside :data:`EQUIVALENT` survives, or when the unmutated copy fails.

    python scripts/mutate.py                 # every mutant (core and TRL environments), 25 minutes on 2 busy cores
    python scripts/mutate.py --only lcb-level,adaptive-budget-early
    python scripts/mutate.py --list

Environments: ``PROVER_CORE_PYTHON`` (default .venvs/core/bin/python) and ``PROVER_TRL_PYTHON`` (default
.venvs/trl/bin/python, for the TRL adapter's mutant; skipped with a note when absent).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    env: str = "core"
    """``core`` or ``trl``: the Python environment the tests run in."""


ORACLES = "tests/test_oracles.py"
MUTANTS: tuple[Mutant, ...] = (
    # -- acceptance rules (prover_core/acceptance.py)
    Mutant(
        "lcb-level",
        "prover_core/acceptance.py",
        "low = clopper_pearson_lower(y, n, self.alpha / 2)\n        high = clopper_pearson_upper(x, m, self.alpha / 2)",
        "low = clopper_pearson_lower(y, n, self.alpha)\n        high = clopper_pearson_upper(x, m, self.alpha)",
        (ORACLES, "tests/test_acceptance.py"),
    ),
    Mutant(
        "delta-nonnegative",
        "prover_core/acceptance.py",
        "ok = delta > 0",
        "ok = delta >= 0",
        (ORACLES, "tests/test_acceptance.py"),
    ),
    Mutant(
        "posterior-strict",
        "prover_core/acceptance.py",
        "ok = prob >= self.threshold",
        "ok = prob > self.threshold",
        (ORACLES, "tests/test_acceptance.py"),
    ),
    Mutant(
        "bound-bisection-direction",
        "prover_core/acceptance.py",
        "if 1.0 - _binom_cdf(x - 1, n, mid) < level:",
        "if 1.0 - _binom_cdf(x, n, mid) < level:",
        (ORACLES, "tests/test_acceptance.py"),
    ),
    # -- the adaptive test (prover_core/sequential.py) and its loop (prover_core/verify.py)
    Mutant(
        "adaptive-budget-early",
        "prover_core/sequential.py",
        "if drawn >= self.max_pairs:",
        "if drawn >= self.max_pairs - 1:",
        (ORACLES, "tests/test_sequential.py"),
    ),
    Mutant(
        "adaptive-curtail-early",
        "prover_core/sequential.py",
        "left = self.max_pairs - drawn\n",
        "left = self.max_pairs - drawn - 1\n",
        (ORACLES, "tests/test_sequential.py"),
    ),
    Mutant(
        "adaptive-futility-counts-drawn",
        "prover_core/sequential.py",
        "if self.futility_evidence(plus, pairs) >= 1 / self.beta:",
        "if self.futility_evidence(plus, drawn) >= 1 / self.beta:",
        (ORACLES, "tests/test_sequential.py"),
    ),
    Mutant(
        "adaptive-loop-one-pair-short",
        "prover_core/verify.py",
        "lo, hi = state.drawn, min(state.drawn + test.round_pairs, test.max_pairs)",
        "lo, hi = state.drawn, min(state.drawn + test.round_pairs, test.max_pairs - 1)",
        (ORACLES, "tests/test_sequential.py"),
    ),
    # -- verification's boundaries (prover_core/runner.py, curtail.py, acceptance.py)
    Mutant(
        "terminal-outcome-success",
        "prover_core/runner.py",
        "return Outcome(success=self.trajectory.success)",
        "return Outcome(success=True)",
        ("tests/test_decision_cases.py", "tests/test_verify.py", "tests/test_negative_credit.py"),
    ),
    Mutant(
        "drop-roles-not-swapped",
        "prover_core/acceptance.py",
        "ok, reason = self.decide(y, n, x, m)",
        "ok, reason = self.decide(x, m, y, n)",
        (ORACLES, "tests/test_negative_credit.py"),
    ),
    Mutant(
        "curtail-best-case-one-success",
        "prover_core/curtail.py",
        "return rule.accept(0, k, first_successes, first_count, direction)",
        "return rule.accept(1, k, first_successes, first_count, direction)",
        (ORACLES, "tests/test_curtail.py"),
    ),
    Mutant(
        "settled-failure-allowance",
        "prover_core/curtail.py",
        "if failed + pending - wins - losses > allowed_failures:",
        "if failed + pending - wins - losses >= allowed_failures:",
        ("tests/test_curtail.py", ORACLES, "tests/test_faults.py"),
    ),
    Mutant(
        "incomplete-needs-one-more",
        "prover_core/runner.py",
        "if all(n >= need or name == not_run for name, n in finished.items()):",
        "if all(n > need or name == not_run for name, n in finished.items()):",
        ("tests/test_verify.py", ORACLES),
    ),
    # -- the trigger (prover_core/trigger.py)
    Mutant(
        "trigger-inclusive-low",
        "prover_core/trigger.py",
        "return low < rate < high",
        "return low <= rate < high",
        ("tests/test_trigger.py", "tests/test_bonus.py"),
    ),
    Mutant(
        "cap-ignores-seed",
        "prover_core/allocate.py",
        "kept_ids, _ = capped([c.group_id for c in cases], n, context.stages.seed)",
        "kept_ids, _ = capped([c.group_id for c in cases], n)",
        ("tests/test_decision_cases.py", "tests/test_trigger.py", "tests/test_bonus.py"),
    ),
    Mutant(
        "longest-failure-tie-break-only",
        "prover_core/trigger.py",
        "return min(failures, key=lambda t: (-t.num_turns, t.id))",
        "return min(failures, key=lambda t: t.id)",
        ("tests/test_decision_cases.py", "tests/test_negative_credit.py"),
    ),
    # -- credit (prover_core/credit.py)
    Mutant(
        "segment-bonus-drops-last-turn",
        "prover_core/credit.py",
        "bonus[segment.start : segment.end + 1] = lam * delta",
        "bonus[segment.start : segment.end] = lam * delta",
        ("tests/test_credit.py",),
    ),
    Mutant(
        "spread-one-token-past-span",
        "prover_core/credit.py",
        "out[span[0] : span[1]] = value",
        "out[span[0] : span[1] + 1] = value",
        ("tests/test_credit.py",),
    ),
    # -- input validation (prover_core/data.py)
    Mutant(
        "bytearray-reward",
        "prover_core/data.py",
        "if isinstance(value, str | bytes | bytearray | memoryview) or value is None:",
        "if isinstance(value, str | bytes) or value is None:",
        ("tests/test_decision_cases.py", "tests/test_data.py"),
    ),
    # -- the TRL adapter's masking (adapters/trl/prover_trl/trainer.py)
    Mutant(
        "trl-bonus-unmasked",
        "adapters/trl/prover_trl/trainer.py",
        "bonus = self._bonus_tensor(mine, accepted, length).to(loss_mask.device) * loss_mask.float()",
        "bonus = self._bonus_tensor(mine, accepted, length).to(loss_mask.device)",
        ("tests/adapters/test_trl_masking.py",),
        env="trl",
    ),
    # -- issue 51-53: the credit's size, the allocation chain, the turn cap's shares (prover_core/credit.py, budget.py,
    # report.py, allocate.py)
    Mutant(
        "credit-mass-signed",
        "prover_core/credit.py",
        "return float(np.abs(b[m]).sum()), float(np.abs(a[m]).sum())",
        "return float(b[m].sum()), float(np.abs(a[m]).sum())",
        ("tests/test_credit_share.py",),
    ),
    Mutant(
        "admission-ignores-what-is-left",
        "prover_core/budget.py",
        "while self.pool.left < reserve:",
        "while False:",
        ("tests/test_budget.py",),
    ),
    Mutant(
        "share-never-gives-back",
        "prover_core/budget.py",
        "unused, self.limit = self.limit - self.used, self.used",
        "unused = 0",
        ("tests/test_budget.py",),
    ),
    Mutant(
        "wasted-counts-only-stopped-turns",
        "prover_core/report.py",
        'return v.policy_turns if group.status == "skipped" else stats.budget_turns',
        "return stats.budget_turns",
        ("tests/test_budget.py",),
    ),
    Mutant(
        "throttle-ignores-the-window",
        "prover_core/allocate.py",
        "if low > 0:\n        return cases, []",
        "if low > 0 or True:\n        return cases, []",
        ("tests/test_judge_lift.py",),
    ),
    # -- issue 55: a batched call's answers (prover_core/batching.py) and the continuation turn limit
    # (prover_core/continuations.py, runner.py), both sides of each boundary
    Mutant(
        "batch-too-many-accepted",
        "prover_core/batching.py",
        "if len(answers) != len(futures):",
        "if len(answers) < len(futures):",
        ("tests/test_batch_policy.py",),
    ),
    Mutant(
        "batch-answer-shifted",
        "prover_core/batching.py",
        "future.set_result(answers[i])",
        "future.set_result(answers[min(i + 1, len(answers) - 1)])",
        ("tests/test_batch_policy.py",),
    ),
    Mutant(
        "batch-answers-compacted",
        "prover_core/batching.py",
        "for i, future in enumerate(futures):",
        "for i, future in enumerate([f for f in futures if not f.done()]):",
        ("tests/test_batch_policy.py",),
    ),
    Mutant(
        "batch-sends-left-out-rows",
        "prover_core/batching.py",
        "if not future.done():  # cancelled, or stopped: left out",
        "if True:  # cancelled, or stopped: left out",
        ("tests/test_batch_policy.py",),
    ),
    Mutant(
        "runner-limit-one-short",
        "prover_core/continuations.py",
        "for taken in range(max_turns):",
        "for taken in range(max_turns - 1):",
        ("tests/test_turn_limit_edges.py",),
    ),
    Mutant(
        "runner-limit-one-long",
        "prover_core/continuations.py",
        "for taken in range(max_turns):",
        "for taken in range(max_turns + 1):",
        ("tests/test_turn_limit_edges.py",),
    ),
    Mutant(
        "hook-limit-inclusive",
        "prover_core/runner.py",
        "if outcome.turns > self.settings.max_continuation_turns:",
        "if outcome.turns >= self.settings.max_continuation_turns:",
        ("tests/test_turn_limit_edges.py",),
    ),
    # -- issue 55: plan's greedy rules and the cap's boundary (prover_core/budget.py, allocate.py), the engine's
    # end-of-turn and record-layout checks at a record's last position (adapters/engine/prover_engine/layout.py)
    Mutant(
        "plan-stops-at-first-misfit",
        "prover_core/budget.py",
        "            keep[i], total = True, total + costs[i]\n    return keep",
        "            keep[i], total = True, total + costs[i]\n        else:\n            break\n    return keep",
        ("tests/test_budget_plan.py",),
    ),
    Mutant(
        "plan-strict-fit",
        "prover_core/budget.py",
        "if total + costs[i] <= cap:",
        "if total + costs[i] < cap:",
        ("tests/test_budget_plan.py",),
    ),
    Mutant(
        "plan-ties-reversed",
        "prover_core/budget.py",
        "key=lambda i: -scores[i])",
        "key=lambda i: (-scores[i], -i))",
        ("tests/test_budget_plan.py",),
    ),
    Mutant(
        "admission-strict-fit",
        "prover_core/budget.py",
        "while self.pool.left < reserve:",
        "while self.pool.left <= reserve:",
        ("tests/test_budget_plan.py",),
    ),
    Mutant(
        "budget-step-cap-one-short",
        "prover_core/allocate.py",
        "keep = plan(costs, scores, turn_cap)",
        "keep = plan(costs, scores, turn_cap - 1)",
        ("tests/test_budget_plan.py",),
    ),
    Mutant(
        "layout-skips-last-gap",
        "adapters/engine/prover_engine/layout.py",
        "for t in range(len(turns) - 1):",
        "for t in range(len(turns) - 2):",
        ("tests/test_engine_layout.py",),
    ),
    Mutant(
        "close-turn-last-id-only",
        "adapters/engine/prover_engine/layout.py",
        "return () if ids[-len(end) :] == end else end",
        "return () if ids[-1:] == end[-1:] else end",
        ("tests/test_engine_layout.py",),
    ),
)

# -- issue 55: the redactor against forms written out by hand, overlapping secrets, the header threshold
# (prover_core/redaction.py)
REDACTION = ("tests/test_redaction.py",)
MUTANTS += (
    Mutant(
        "header-secret-min-exclusive",
        "prover_core/redaction.py",
        "if len(value.strip()) >= MIN_HEADER_SECRET]",
        "if len(value.strip()) > MIN_HEADER_SECRET]",
        REDACTION,
    ),
    Mutant(
        "header-secret-length-unstripped",
        "prover_core/redaction.py",
        "if len(value.strip()) >= MIN_HEADER_SECRET]",
        "if len(value) >= MIN_HEADER_SECRET]",
        REDACTION,
    ),
    Mutant(
        "redaction-drops-json-form",
        "prover_core/redaction.py",
        "escaped = (repr(secret)[1:-1], json.dumps(secret)[1:-1])",
        "escaped = (repr(secret)[1:-1],)",
        REDACTION,
    ),
    Mutant(
        "redaction-drops-quote-plus",
        "prover_core/redaction.py",
        'encoded = (quote(secret, safe=""), quote(secret), quote_plus(secret))',
        'encoded = (quote(secret, safe=""), quote(secret))',
        REDACTION,
    ),
    Mutant(
        "redaction-drops-proxy-basic",
        "prover_core/redaction.py",
        "return [credentials, base64.b64encode(credentials.encode()).decode()]",
        "return [credentials]",
        REDACTION,
    ),
    Mutant(
        "redaction-spans-by-form-not-start",
        "prover_core/redaction.py",
        "spans = heapq.merge(*(_occurrences(text, form) for form in self._forms))",
        "spans = (span for form in self._forms for span in _occurrences(text, form))",
        REDACTION,
    ),
    Mutant(
        "redaction-nested-stretch-cut-short",
        "prover_core/redaction.py",
        "last = max(last, end)",
        "last = end",
        REDACTION,
    ),
    Mutant(
        "redaction-misses-self-overlap",
        "prover_core/redaction.py",
        "start = text.find(form, start + 1)",
        "start = text.find(form, start + len(form))",
        REDACTION,
    ),
    # -- issue 55: the report's metrics on a mixed batch (gain, drop, control, every skip reason, the cap;
    # prover_core/report.py, bonus.py)
    Mutant(
        "turns-spent-gain-only",
        "prover_core/report.py",
        "policy_turns = sum(v.policy_turns for v in every)",
        "policy_turns = sum(v.policy_turns for v in ver)",
        ("tests/test_report_mixed.py",),
    ),
    Mutant(
        "turns-spent-decided-only",
        "prover_core/report.py",
        "policy_turns = sum(v.policy_turns for v in every)",
        "policy_turns = sum(g.verification.policy_turns for g in self.groups if g.verification and g.status in "
        '("accepted", "rejected"))',
        ("tests/test_report_mixed.py",),
    ),
    Mutant(
        "extra-share-over-episodes",
        "prover_core/report.py",
        '"extra_turn_share": policy_turns / self.rollout_turns if self.rollout_turns else 0.0',
        '"extra_turn_share": policy_turns / self.rollout_episodes if self.rollout_episodes else 0.0',
        ("tests/test_report_mixed.py",),
    ),
    Mutant(
        "credit-signed",
        "prover_core/bonus.py",
        "credit = lam * abs(verification.delta) * answer.segment.num_turns",
        "credit = lam * verification.delta * answer.segment.num_turns",
        ("tests/test_report_mixed.py",),
    ),
    Mutant(
        "credit-per-turn-gain-only",
        "prover_core/report.py",
        'out["credit_per_extra_turn"] = sum(g.credit for g in self.groups) / policy_turns',
        'out["credit_per_extra_turn"] = sum(g.credit for g in accepted) / policy_turns',
        ("tests/test_report_mixed.py",),
    ),
    Mutant(
        "budget-skips-any-reason",
        "prover_core/report.py",
        'g.status == "skipped" and g.verify_stats is not None and g.verify_stats.failures.get("budget", 0) > 0',
        'g.status == "skipped" and g.verify_stats is not None',
        ("tests/test_report_mixed.py",),
    ),
    Mutant(
        "wasted-counts-every-skip",
        "prover_core/report.py",
        'if stats is None or v is None or not stats.failures.get("budget"):',
        "if stats is None or v is None:",
        ("tests/test_report_mixed.py",),
    ),
    Mutant(
        "trigger-share-drops-unverified",
        "prover_core/report.py",
        'return 1.0 - self.count("not_eligible") / len(self.groups)',
        'return 1.0 - self.count("not_eligible", "unverified") / len(self.groups)',
        ("tests/test_report_mixed.py",),
    ),
    Mutant(
        "lift-counts-undecided",
        "prover_core/report.py",
        'decided = [g for g in self.groups if g.direction == "gain" and g.status in ("accepted", "rejected")]',
        'decided = [g for g in self.groups if g.direction == "gain" and g.verification is not None]',
        ("tests/test_report_mixed.py",),
    ),
    Mutant(
        "gain-counts-take-drops",
        "prover_core/report.py",
        'accepted = [g for g in gain if g.status == "accepted"]',
        'accepted = [g for g in self.groups if g.status == "accepted"]',
        ("tests/test_report_mixed.py",),
    ),
    Mutant(
        "acceptance-rate-over-every-verification",
        "prover_core/report.py",
        '"acceptance_rate": len(accepted) / len(ver) if ver else 0.0',
        '"acceptance_rate": len(accepted) / len(every) if every else 0.0',
        ("tests/test_report_mixed.py",),
    ),
)

EQUIVALENT: dict[str, str] = {}
"""Mutants that cannot be told apart from the original by any test, with the reason (docs/testing.md)."""


def python_for(env: str) -> Path:
    default = ROOT / ".venvs" / env / "bin" / "python"  # where scripts/test builds them
    return Path(os.environ.get(f"PROVER_{env.upper()}_PYTHON", default)).absolute()  # the tests run in the copy


def copy_tree(dest: Path) -> None:
    """The repository's tracked and untracked (not ignored) files, as they are in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def run_tests(copy: Path, env: str, tests: tuple[str, ...], timeout: int) -> tuple[int, float, str]:
    """``(exit status, seconds, last output line)`` of ``pytest -x`` on ``tests`` inside ``copy``."""
    paths = [str(copy), str(copy / "benchmarks"), str(copy / "adapters" / "engine")]  # the copy's, not the install's
    paths += [str(copy / "adapters" / "trl")] if env == "trl" else []
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONDONTWRITEBYTECODE": "1"}
    environ.pop("PROVER_REQUIRE_HOSTS", None)
    start = time.monotonic()
    try:
        done = subprocess.run(
            [str(python_for(env)), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=copy, env=environ, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return -1, time.monotonic() - start, f"timed out after {timeout} s"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, time.monotonic() - start, lines[-1] if lines else done.stderr[-200:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated mutant names")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--timeout", type=int, default=180, help="seconds per mutant's test run; past it the mutant counts as killed"
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the run of the unmutated copy")
    args = parser.parse_args()
    chosen = list(MUTANTS)
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {m.name for m in MUTANTS}
        if unknown:
            parser.error(f"unknown mutants: {sorted(unknown)}")
        chosen = [m for m in MUTANTS if m.name in names]
    if args.list:
        for m in MUTANTS:
            print(f"{m.name:32} {m.path}: {m.old.strip()[:60]!r} -> {m.new.strip()[:60]!r}")
        return 0
    with tempfile.TemporaryDirectory(prefix="prover-mutants-") as tmp:
        copy = Path(tmp)
        copy_tree(copy)
        for m in chosen:  # every mutation applies to exactly one place
            count = (copy / m.path).read_text().count(m.old)
            if count != 1:
                print(f"{m.name}: the text to mutate occurs {count} times in {m.path}; update the mutant")
                return 2
        envs = sorted({m.env for m in chosen})
        missing = {env for env in envs if not python_for(env).exists()}
        for env in sorted(missing):
            print(f"note: no {env} environment at {python_for(env)}: its mutants are not run")
        if not args.no_baseline:
            for env in sorted(set(envs) - missing):
                tests = tuple(sorted({t for m in chosen if m.env == env for t in m.tests}))
                status, seconds, last = run_tests(copy, env, tests, args.timeout * 2)
                verdict = "ok" if status == 0 else "FAILED"
                print(f"baseline ({env}, {len(tests)} files): {verdict} in {seconds:.0f} s: {last}", flush=True)
                if status != 0:
                    return 1
        survivors = []
        for m in chosen:
            if m.env in missing:
                continue
            target = copy / m.path
            original = target.read_text()
            target.write_text(original.replace(m.old, m.new))
            try:
                status, seconds, last = run_tests(copy, m.env, m.tests, args.timeout)
            finally:
                target.write_text(original)
            verdict = "killed" if status != 0 else ("equivalent" if m.name in EQUIVALENT else "SURVIVED")
            verdict = "timed out" if status == -1 else verdict  # a mutant that makes a loop endless
            print(f"{m.name:32} {verdict:10} {seconds:5.0f} s  {last}", flush=True)
            if status == 0 and m.name not in EQUIVALENT:
                survivors.append(m.name)
        run = [m for m in chosen if m.env not in missing]
        print(f"{len(run)} mutants: {len(run) - len(survivors)} killed or equivalent, {len(survivors)} survived")
        if survivors:
            print(f"survivors: {', '.join(survivors)}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
