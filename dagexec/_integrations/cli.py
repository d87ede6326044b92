"""``python -m dagexec``: run, draw or demo a graph from the command line.

Every failure ends with one line on stderr, ``dagexec: error: ...`` (only a
failing task's traceback comes before it), and an exit status that says whose
fault it was:

* 0: the run (or drawing) succeeded;
* 1: the command was well formed but what it points at is wrong, or the run
  failed: missing file, module that fails to import, missing variable, not a
  Graph, invalid graph (cycle, missing dependency), unknown target, a task
  failure, ``--timeout`` passed, an output file that cannot be written;
* 2: the command line itself is wrong (unknown option, bad number, ``FILE``
  without ``:VARIABLE``, ``--resources`` that do not parse); argparse's
  convention;
* 130: interrupted with Ctrl-C (the summary table is printed first).

The graph is ``FILE.py:VARIABLE`` or ``MODULE:VARIABLE`` (see
:mod:`dagexec._integrations.cli_load`); the summary table counts every task once
(:mod:`dagexec._integrations.cli_tally`), also after Ctrl-C or ``--timeout``.

A task that raises ``SystemExit`` (or any other ``BaseException`` but
``KeyboardInterrupt``) is a failing task like any other: status 1, naming it.
A failing task's traceback goes to stderr before the error line: its last
frames by default, all of it (for every failed task) with ``--traceback``.

``--targets`` items are separated by commas outside brackets and quotes; each
item that parses as a Python literal (``1``, ``('load', 'a.csv')``, ``'1'``) is
that value, anything else is the text itself. When a literal is not a task of
the graph but its text is, the text wins, so a string task named ``2024`` can
be written bare.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from .._core.errors import DagexecError
from .._core.graph import Graph
from .._engine.executor import DEFAULT_QUEUE_CAP
from .._engine.future import _TIMED_OUT
from .cli_io import (
    Fail,
    check_output,
    failure_line,
    json_values,
    parse_targets,
    print_values,
    resolve_targets,
    safe_str,
    write_tracebacks,
)
from .cli_load import load_graph
from .cli_options import (
    LOG_LEVELS,
    check_resources_given,
    configure_logging,
    log_level,
    parse_resources,
    seconds,
)
from .cli_tally import RunTally, summary_table

if TYPE_CHECKING:
    from .._observation.progress import ProgressBar

__all__ = ["main"]

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


def _check_graph(
    graph: Graph, targets: Sequence[Hashable] | None, resources: dict[str, float] | None = None
) -> None:
    from .._core.plan import plan_run

    try:
        plan = plan_run(graph._compile(), targets)
    except DagexecError as exc:
        raise Fail(str(exc)) from exc
    if resources is not None:
        problem = check_resources_given(plan, resources)
        if problem:
            raise Fail(problem)


class _Keep:
    """Keeps the result even when the run raises, for the summary and the pictures."""

    def __init__(self) -> None:
        self.result: Any = None

    def on_run_end(self, result: Any) -> None:
        self.result = result


def _write_pictures(result: Any, trace: str | None, gantt: str | None) -> None:
    try:
        if trace:
            result.trace_to_chrome(trace)
            print(f"trace written to {trace} (open in https://ui.perfetto.dev)")
        if gantt:
            result.gantt_svg(gantt)
            print(f"timeline written to {gantt}")
    except OSError as exc:
        raise Fail(f"cannot write {exc.filename}: {exc.strerror}") from exc


def _cmd_run(args: argparse.Namespace) -> int:
    for option, path in (("--trace", args.trace), ("--gantt", args.gantt), ("--json", args.json)):
        check_output(option, path)
    graph = load_graph(*args.spec, full_traceback=args.traceback)
    targets = resolve_targets(graph, args.targets)
    _check_graph(graph, targets, args.resources or {})
    keep = _Keep()
    tally = RunTally()
    tally.checkpoint = bool(args.checkpoint)
    bar = None
    if args.progress:
        from .._observation.progress import ProgressBar

        bar = ProgressBar()
    _run_reporting_failures(args, graph, targets, keep, tally, bar)
    result = keep.result
    print(summary_table(tally.freeze(), result))
    _report(args, graph, targets, result)
    return 0


def _run_reporting_failures(
    args: argparse.Namespace,
    graph: Graph,
    targets: list[Hashable] | None,
    keep: _Keep,
    tally: RunTally,
    bar: ProgressBar | None,
) -> None:
    """Run the graph, its result kept by ``keep``, counted by ``tally``, shown by ``bar``.

    A failure before any task ran, Ctrl-C or the run's timeout becomes the
    summary so far and a :class:`Fail` naming the fix; a task's failure is
    left in ``keep.result`` for the report.
    """
    callbacks: list[object] = [keep, tally] if bar is None else [keep, tally, bar]
    from .._engine.oneshot import run_with
    from .._engine.run_checks import RunOptions

    try:
        options = RunOptions(
            on_error=args.on_error,
            callbacks=callbacks,
            trace=bool(args.trace or args.gantt),
            checkpoint=args.checkpoint,
            resources=args.resources,
            timeout=args.timeout,
        )
        run_with(graph, targets, options, args.workers, args.queue_cap, args.max_in_flight)
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()  # no run end comes after Ctrl-C: show it, give the streams back
        if tally.started:
            print(summary_table(tally.freeze(), None))
        raise
    except TimeoutError as exc:
        if not getattr(exc, _TIMED_OUT, False):
            raise  # a task's own TimeoutError: handled below as a task failure
        if bar is not None:
            bar.close()
        print(summary_table(tally.freeze(), None))
        raise Fail(
            f"the run timed out after {args.timeout:g} s (--timeout {args.timeout:g}); the "
            "summary above says what it left undone; raise --timeout or make the tasks faster"
        ) from exc
    except (ValueError, TypeError) as exc:
        if keep.result is None:  # refused before running: a bad parameter combination
            raise Fail(safe_str(exc)) from exc
    except DagexecError as exc:
        if keep.result is None:  # a checkpoint file or a constant it cannot use
            raise Fail(safe_str(exc)) from exc
    except Exception:
        if keep.result is None:
            raise
    except BaseException as exc:
        # A task's SystemExit (or other BaseException) is a task failure: it must not
        # end the command with the task's exit code, or silently with 0.
        if keep.result is None:
            raise Fail(f"{type(exc).__name__}: {safe_str(exc)}") from exc


def _report(
    args: argparse.Namespace, graph: Graph, targets: list[Hashable] | None, result: Any
) -> None:
    """Print the values and pictures asked for; fail if a task failed."""
    wanted = graph.sinks() if targets is None else targets
    if args.print_values or args.print_full:
        print_values(result, wanted, full=args.print_full)
    _write_pictures(result, args.trace, args.gantt)
    if args.json:
        document, note = json_values(result, wanted)
        try:
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump(document, out, indent=2, allow_nan=False)
                out.write("\n")
        except OSError as exc:
            raise Fail(f"cannot write {exc.filename}: {exc.strerror}") from exc
        print(f"target values written to {args.json}")
        if note:
            sys.stdout.flush()
            print(f"dagexec: note: {note}", file=sys.stderr)
    if result.errors:
        sys.stdout.flush()
        write_tracebacks(dict(result.errors), args.traceback)
        raise Fail(failure_line(dict(result.errors), result.stats.tasks_planned))


def _cmd_show(args: argparse.Namespace) -> int:
    from .._observation.draw import to_dot, to_mermaid

    graph = load_graph(*args.spec, full_traceback=args.traceback)
    targets = resolve_targets(graph, args.targets)
    _check_graph(graph, targets)
    draw = to_dot if args.format == "dot" else to_mermaid
    sys.stdout.write(draw(graph, targets, None))
    return 0


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


def _cmd_explain(args: argparse.Namespace) -> int:
    from .._persist.explain import explain

    graph = load_graph(*args.spec)
    targets = resolve_targets(graph, args.targets)
    _check_graph(graph, targets)
    try:
        explanation = explain(graph, targets, checkpoint=args.checkpoint)
    except DagexecError as exc:
        raise Fail(str(exc)) from exc
    sys.stdout.write(f"{explanation}\n")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    try:
        from .demo import main as demo_main
    except ModuleNotFoundError as exc:
        if exc.name != "dagexec._integrations.demo":
            raise
        raise Fail("the demo is not part of this installation") from None
    check_output("--trace", args.trace)
    check_output("--gantt", args.gantt)
    return demo_main(trace_path=args.trace, gantt_path=args.gantt)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version end here with status 0
            return exc.code if isinstance(exc.code, int) else 0
        if getattr(args, "log_level", None):
            configure_logging(args.log_level)
        command = {
            "run": _cmd_run,
            "show": _cmd_show,
            "demo": _cmd_demo,
            "explain": _cmd_explain,
        }[args.command]
        return command(args)
    except Fail as exc:
        sys.stdout.flush()
        # One line, even when an exception's message has several.
        message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"dagexec: error: {message}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        sys.stdout.flush()
        print("dagexec: error: interrupted", file=sys.stderr)
        return 130
