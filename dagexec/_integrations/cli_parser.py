"""The command line's grammar: ``python -m dagexec`` and its four commands' options.

Only parsing lives here: each option's type, default and help text, and the
one-line error argparse's mistakes turn into (exit status 2, see
:mod:`dagexec._integrations.cli`). What a command does with the options it
gets is :mod:`dagexec._integrations.cli`'s.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from .._engine.front.executor import DEFAULT_QUEUE_CAP
from .cli_io import Fail, parse_targets
from .cli_options import LOG_LEVELS, log_level, parse_resources, seconds

__all__ = ["PROG", "build_parser"]

PROG = "python -m dagexec"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage block too; one line is easier to read
        # and to grep in a CI log, and --help is one command away.
        raise Fail(f"{message} (see '{self.prog} --help')", 2)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _spec(text: str) -> tuple[str, str]:
    # rpartition: a Windows path ("C:\\x\\g.py:graph") has a colon of its own.
    path, sep, variable = text.rpartition(":")
    if not sep or not path or not variable or not variable.replace(".", "").isidentifier():
        raise argparse.ArgumentTypeError(
            f"expected FILE:VARIABLE such as pipeline.py:graph (or MODULE:VARIABLE "
            f"such as jobs.nightly:graph), got {text!r}"
        )
    return path, variable


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m dagexec``; its errors raise :class:`Fail` (status 2)."""
    parser = _Parser(
        prog=PROG,
        description="Run a graph of dependent tasks on threads, within hard bounds.",
        epilog=(
            "Exit status: 0 success; 1 the graph, its file or a task failed, or --timeout "
            "passed; "
            "2 bad command line; 130 interrupted. Errors are one line on stderr."
        ),
    )
    from .._core.version import __version__

    parser.add_argument("--version", action="version", version=f"dagexec {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    spec_help = (
        "the graph: a Python file and the name of a dagexec.Graph in it, e.g. "
        "pipeline.py:graph (the file is run as a module; its directory is put on sys.path), "
        "or an importable module and the name, e.g. jobs.nightly:graph (the current "
        "directory is put on sys.path)"
    )
    traceback_help = (
        "print full tracebacks: of a file that fails to load, and of every failed task "
        "(default: the file and line of a load error; the last frames of the first "
        "failed task)"
    )
    targets_help = (
        "comma-separated task names to compute, with everything they need and nothing "
        "else (default: every task nothing depends on). An item that parses as a Python "
        "literal names that value, e.g. 1 or \"('load', 'a.csv')\"; other items are "
        "strings; quote a string that looks like a literal: \"'1'\""
    )

    run = commands.add_parser(
        "run",
        help="run a graph from a Python file and print a summary",
        description=(
            "Run a graph defined in a Python file or module and print a summary table "
            "that counts every task once (done, loaded from the checkpoint, failed, "
            "skipped, cancelled, running when the run stopped), retries and timed-out "
            "attempts, wall time, and the bounds reached (peak in-flight vs cap); also "
            "after Ctrl-C or --timeout."
        ),
    )
    run.add_argument("spec", metavar="FILE:VARIABLE", type=_spec, help=spec_help)
    run.add_argument("--targets", type=parse_targets, metavar="A,B", help=targets_help)
    run.add_argument(
        "--workers", type=_positive_int, metavar="N", help="worker threads (default: CPU count)"
    )
    run.add_argument(
        "--queue-cap",
        type=_positive_int,
        metavar="N",
        help=(
            f"most tasks waiting in one worker's inbox (default: {DEFAULT_QUEUE_CAP}; "
            "without this and --max-in-flight the depth follows the size of the values)"
        ),
    )
    run.add_argument(
        "--max-in-flight",
        type=_positive_int,
        metavar="N",
        help="most tasks queued or running at once (default: workers x (queue cap + 1))",
    )
    run.add_argument(
        "--resources",
        type=parse_resources,
        metavar="NAME=N,...",
        help=(
            "capacities of the resources the tasks declare (resources={...} in g.add), "
            "e.g. db=2,gpu=1: tasks running at once hold at most that much of each"
        ),
    )
    run.add_argument(
        "--timeout",
        type=seconds,
        metavar="SECONDS",
        help=(
            "stop the run after this many seconds (default: no limit): what has not "
            "started is cancelled, running tasks are abandoned; exit status 1"
        ),
    )
    run.add_argument(
        "--log-level",
        type=log_level,
        metavar="LEVEL",
        help=(
            f"show log records of LEVEL and above on stderr, dagexec's and the tasks' "
            f"({', '.join(LOG_LEVELS)}; default: only dagexec's warnings). INFO shows "
            "each retry and timeout"
        ),
    )
    run.add_argument(
        "--on-error",
        choices=("raise", "continue"),
        default="raise",
        help=(
            "raise: stop at the first failure (default); continue: run everything not "
            "downstream of a failure. Either way any failure exits with status 1"
        ),
    )
    run.add_argument(
        "--progress",
        action="store_true",
        help="show a progress bar on stderr (a summary line when it is not a terminal)",
    )
    run.add_argument(
        "--trace",
        metavar="OUT.json",
        help="write a Chrome trace-event file (open in https://ui.perfetto.dev)",
    )
    run.add_argument(
        "--gantt", metavar="OUT.svg", help="write an SVG timeline, one lane per worker"
    )
    run.add_argument(
        "--report",
        metavar="OUT.html",
        help=(
            "write the run as one self-contained HTML page: summary, timeline, every "
            "task, tracebacks and each task's logs (records the run's timings and "
            "captures the tasks' logs at INFO, or --logs LEVEL)"
        ),
    )
    run.add_argument(
        "--logs",
        nargs="?",
        const="INFO",
        type=log_level,
        metavar="LEVEL",
        help=(
            "capture each task's log records of LEVEL and above (default INFO) and print "
            "a failed task's under its traceback; put it after the graph, or write "
            "--logs=LEVEL"
        ),
    )
    run.add_argument(
        "--print",
        action="store_true",
        dest="print_values",
        help=(
            "print each target's value after the summary, one per line, long values "
            "shortened (reprlib-style, with ...); --print-full prints them whole"
        ),
    )
    run.add_argument(
        "--print-full",
        action="store_true",
        help="print each target's whole value (its full repr) after the summary",
    )
    run.add_argument(
        "--json",
        metavar="OUT.json",
        help=(
            'write the targets\' values as JSON: {"values": {name: value}, "not_written": '
            "{name: reason}} (values JSON cannot hold, and targets without a value, are "
            "listed under not_written with the reason, and noted on stderr)"
        ),
    )
    run.add_argument(
        "--checkpoint",
        metavar="FILE",
        help=(
            "save each finished task's value in FILE (SQLite); run the same command "
            "again to resume: tasks found there are loaded, not run"
        ),
    )
    run.add_argument("--traceback", action="store_true", help=traceback_help)

    show = commands.add_parser(
        "show",
        help="print a graph as Graphviz DOT or Mermaid",
        description="Print the graph, or the part a run of --targets would execute.",
    )
    show.add_argument("spec", metavar="FILE:VARIABLE", type=_spec, help=spec_help)
    show.add_argument("--targets", type=parse_targets, metavar="A,B", help=targets_help)
    show.add_argument(
        "--format",
        choices=("dot", "mermaid"),
        default="dot",
        help="dot (pipe into 'dot -Tsvg') or mermaid (paste into Markdown); default: dot",
    )
    show.add_argument("--traceback", action="store_true", help=traceback_help)

    _add_explain_parser(commands, spec_help, targets_help)

    demo = commands.add_parser(
        "demo",
        help="run the built-in hashing demo",
        description="Run the built-in demo: a hashing graph, serial vs dagexec.",
    )
    demo.add_argument(
        "--trace", metavar="OUT.json", help="also write the run's Chrome trace-event file"
    )
    demo.add_argument("--gantt", metavar="OUT.svg", help="also write the run's SVG timeline")
    return parser


def _add_explain_parser(commands: Any, spec_help: str, targets_help: str) -> None:
    explain = commands.add_parser(
        "explain",
        help="say why a checkpointed run would run each task, without running it",
        description=(
            "For each task a run with --checkpoint would execute, one reason (not "
            "checkpointed, code changed, constant changed, upstream changed, not stored, "
            "damaged); which tasks would load; which only the run can decide (map "
            "items, tasks downstream of a checkpoint=False task or of a map). Reads "
            "the file, never writes it."
        ),
    )
    explain.add_argument("spec", metavar="FILE:VARIABLE", type=_spec, help=spec_help)
    explain.add_argument("--targets", type=parse_targets, metavar="A,B", help=targets_help)
    explain.add_argument(
        "--checkpoint", metavar="FILE.sqlite", required=True, help="the run's checkpoint file"
    )
