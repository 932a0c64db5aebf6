"""The ``prover`` command.

Bad arguments (a count below 1, a non-positive timeout, LLM-judge options without ``--judge-url``, a
judge config the library refuses) end in argparse's usage message and exit status 2, never a
traceback. ``prover bench`` runs the ``prover-bench`` command of the benchmarks' distribution (its
console-script entry point), or says what to install. ``prover demo`` prints why groups were skipped
and exits 1 when every eligible group was skipped (nothing was verified), e.g. when the judge's server
is too slow for ``--judge-timeout``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from prover_core.progress import Progress, format_progress

if TYPE_CHECKING:
    from prover_core.judges.llm import LLMJudge

__all__ = [
    "DemoProgress",
    "add_llm_judge_options",
    "build_parser",
    "llm_judge_from_args",
    "main",
    "positive_float",
    "positive_int",
]


def _version() -> str:
    """The installed distribution's version, else the package's ``__version__``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prover-core")
    except PackageNotFoundError:
        from prover_core import __version__

        return __version__


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


# LLM-judge options of `prover demo` and `prover bench judges` (prover_bench.cli): (flag, dest, LLMJudgeConfig
# field). Each needs --judge-url.
_JUDGE_OPTIONS = (
    ("--judge-model", "judge_model", "model"),
    ("--judge-api-key-env", "judge_api_key_env", "api_key_env"),
    ("--judge-mode", "judge_mode", "mode"),
    ("--judge-timeout", "judge_timeout", "timeout_s"),
    ("--judge-concurrency", "judge_concurrency", "max_concurrency"),
    ("--judge-attempts", "judge_attempts", "max_attempts"),
    ("--judge-max-tokens", "judge_max_tokens", "max_tokens"),
    ("--judge-answer-form", "judge_answer_form", "answer_form"),
    ("--judge-evidence", "judge_evidence", "evidence_summary"),
)


def build_parser() -> argparse.ArgumentParser:
    """The ``prover`` command's parser: ``demo`` with its options, and ``bench``, handed over whole."""
    from prover_core.judges import judge_names

    parser = argparse.ArgumentParser(prog="prover", description="Propose, Verify, Credit for agentic RL.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the whole loop on the embedded vault environment")
    demo.add_argument("--groups", type=positive_int, default=16, help="groups in the batch (default 16)")
    demo.add_argument("--group-size", type=positive_int, default=8, help="trajectories per group (default 8)")
    demo.add_argument(
        "-k", type=positive_int, default=4, help="continuations per boundary (default 4, the library's; the paper's 8)"
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--judge", choices=judge_names(), default="choice", help="a registered judge (default choice)")
    demo.add_argument("--json", action="store_true", help="print the report's metrics as JSON")
    add_llm_judge_options(demo)
    sub.add_parser(
        "bench",
        help="the benchmarks (their own distribution: pip install -e ./benchmarks; prover bench --help there)",
        add_help=False,
    )
    return parser


def add_llm_judge_options(command: argparse.ArgumentParser) -> None:
    """The ``--judge-*`` options of the LLM judge (``prover demo``, ``prover bench judges``)."""
    llm = command.add_argument_group("LLM judge (each option needs --judge-url)")
    llm.add_argument("--judge-url", help="use the LLM judge at this OpenAI-compatible base URL (e.g. .../v1)")
    llm.add_argument("--judge-model", help="the model name the LLM judge asks for (required with --judge-url)")
    llm.add_argument("--judge-api-key-env", help="environment variable holding the API key")
    llm.add_argument("--judge-mode", choices=("structured", "agentic"), help="default: structured")
    llm.add_argument("--judge-timeout", type=positive_float, help="seconds per request (default 120)")
    llm.add_argument("--judge-concurrency", type=positive_int, help="requests in flight at once (default 16)")
    llm.add_argument("--judge-attempts", type=positive_int, help="attempts per request, retries included (default 4)")
    llm.add_argument("--judge-max-tokens", type=positive_int, help="completion tokens per answer (default 1024)")
    llm.add_argument(
        "--judge-answer-form",
        choices=("segment", "span"),
        help="segment: start and end turn (default); span: start turn and length, always admissible",
    )
    llm.add_argument(
        "--judge-evidence",
        action="store_const",
        const=True,
        help="add the group's choice statistics to the prompt (for small models)",
    )


def llm_judge_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> LLMJudge | None:
    """The LLM judge the ``--judge-*`` flags ask for, or ``None``; a bad combination is a usage error."""
    given = [flag for flag, dest, _ in _JUDGE_OPTIONS if getattr(args, dest) is not None]
    if not args.judge_url:
        if given:
            parser.error(f"{', '.join(given)} need(s) --judge-url")
        return None
    if not args.judge_model:
        parser.error("--judge-url needs --judge-model")
    from prover_core.judges.llm import LLMJudge

    settings = {field: getattr(args, dest) for _, dest, field in _JUDGE_OPTIONS if getattr(args, dest) is not None}
    try:
        return LLMJudge.from_url(args.judge_url, **settings)
    except ValueError as exc:  # pydantic's ValidationError, or an unset API-key variable
        parser.error(f"cannot build the LLM judge: {exc}")


BENCH_INSTALL = "pip install -e . -e ./benchmarks  (from a checkout: the prover-bench distribution)"


class DemoProgress:
    """``prover demo``'s progress on stderr, for a long run only: a line (:func:`~prover_core.progress.format_progress`)
    once the call has run ``after`` seconds, then at most every ``every`` seconds; a short run prints none."""

    def __init__(self, stream: TextIO | None = None, after: float = 2.0, every: float = 2.0) -> None:
        self.stream, self.next, self.every = stream, after, every

    def __call__(self, event: Progress) -> None:
        if event.seconds >= self.next:
            self.next = event.seconds + self.every
            print(f"prover demo: {format_progress(event)}", file=self.stream or sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``prover argv`` (default: the command line); the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        return _bench(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)

    if args.command == "demo":
        from prover_core.demo.run import render, render_skips, run_demo

        llm = llm_judge_from_args(parser, args)
        run = run_demo(args.groups, args.group_size, args.k, args.seed, args.judge, custom_judge=llm,
                       progress=DemoProgress())  # fmt: skip
        report = run.result.report
        if args.json:
            print(json.dumps(report.metrics(), indent=2))
            for line in render_skips(report):
                print(line, file=sys.stderr)
        else:
            print(render(run))
        eligible = len(report.groups) - report.count("not_eligible")
        if eligible and report.count("skipped") == eligible:
            print(f"prover demo: all {eligible} eligible groups were skipped (reasons above)", file=sys.stderr)
            return 1
    return 0


def _bench(argv: list[str]) -> int:
    """``prover bench ...``: the ``prover-bench`` command of the benchmarks' distribution, found through its entry
    point (the library imports none of the benchmarks), or what to install."""
    from importlib.metadata import entry_points

    missing = f"prover bench: the benchmarks are a distribution of their own: {BENCH_INSTALL}"
    found = entry_points(group="console_scripts", name="prover-bench")
    if not found:
        print(missing, file=sys.stderr)
        return 2
    try:
        bench_main = next(iter(found)).load()
    except ImportError as exc:  # installed once, its package gone since
        if not (exc.name or "").startswith("prover_bench"):
            raise
        print(missing, file=sys.stderr)
        return 2
    code: int = bench_main(argv)
    return code


if __name__ == "__main__":
    sys.exit(main())
