"""``python -m dagexec``: run, draw or demo a graph from the command line.

Every failure ends with one line on stderr, ``dagexec: error: ...`` (only a
failing task's traceback comes before it), and an exit status that says whose
fault it was:

* 0: the run (or drawing) succeeded;
* 1: the command was well formed but what it points at is wrong, or the run
  failed: missing file, module that fails to import, missing variable, not a
  Graph, invalid graph (cycle, missing dependency), unknown target, a task
  failure, an output file that cannot be written;
* 2: the command line itself is wrong (unknown option, bad number, ``FILE``
  without ``:VARIABLE``); argparse's convention;
* 130: interrupted with Ctrl-C.

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
import importlib.util
import json
import os
import sys
from collections.abc import Hashable, Sequence
from typing import Any, NoReturn

from .._core.errors import DagexecError
from .._core.graph import Graph
from .._engine.executor import DEFAULT_QUEUE_CAP
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
            f"expected FILE:VARIABLE such as pipeline.py:graph, got {text!r}"
        )
    return path, variable


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Run a graph of dependent tasks on threads, within hard bounds.",
        epilog=(
            "Exit status: 0 success; 1 the graph, its file or a task failed; "
            "2 bad command line; 130 interrupted. Errors are one line on stderr."
        ),
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"dagexec {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    spec_help = (
        "the graph: a Python file and the name of a dagexec.Graph in it, e.g. "
        "pipeline.py:graph (the file is run as a module; its directory is put on sys.path)"
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
            "Run a graph defined in a Python file and print a summary table: tasks "
            "planned, done, failed, skipped, cancelled, wall time, peak in-flight vs cap."
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
        help="print each target's value (its repr) after the summary",
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
    run.add_argument(
        "--traceback",
        action="store_true",
        help=(
            "print the full traceback of every failed task (default: the last frames "
            "of the first failure)"
        ),
    )

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


def load_graph(path: str, variable: str) -> Graph:
    """Run the file at ``path`` as a fresh module and return its Graph ``variable``.

    Raises:
        Fail: the file is missing or fails to import, or the variable is missing
            or is not a Graph.
    """
    if not os.path.isfile(path):
        raise Fail(f"no such file: {path}")
    stem = os.path.splitext(os.path.basename(path))[0]
    # A name that cannot clash with a real module: the user's file may well be
    # called json.py, and sys.modules must hold it while it runs (dataclasses,
    # pickling of its functions by name).
    module_name = "__dagexec_graph_" + "".join(ch if ch.isalnum() else "_" for ch in stem)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise Fail(f"cannot load {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # Like `python FILE`: modules next to the file are importable from it.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        raise Fail(f"cannot load {path}: {type(exc).__name__}: {safe_str(exc)}") from exc
    value: Any = module
    for part in variable.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise Fail(f"{path} has no variable {variable!r}") from None
    if not isinstance(value, Graph):
        raise Fail(f"{path}:{variable} is a {type(value).__name__}, not a dagexec.Graph")
    return value


def _check_graph(graph: Graph, targets: Sequence[Hashable] | None) -> None:
    from .._core.plan import plan_run

    try:
        plan_run(graph._compile(), targets)
    except DagexecError as exc:
        raise Fail(str(exc)) from exc


def _summary(result: Any) -> str:
    from .._core.result import TaskState

    stats = result.stats
    counts = dict.fromkeys(TaskState, 0)
    for state in result.status.values():
        counts[state] += 1
    depth = max(stats.peak_queue_depth, default=0)
    seconds = stats.wall_seconds
    wall = f"{seconds:.3f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"
    rows = [
        ("tasks planned", str(stats.tasks_planned)),
        ("  done", str(counts[TaskState.DONE])),
        ("  failed", str(counts[TaskState.FAILED])),
        ("  skipped", str(counts[TaskState.SKIPPED])),
        ("  cancelled", str(counts[TaskState.CANCELLED])),
        *([("  loaded", str(stats.tasks_loaded))] if stats.tasks_loaded else []),
        ("wall time", wall),
        ("workers", str(stats.workers)),
        ("peak in flight", f"{stats.peak_in_flight} of cap {stats.effective_cap}"),
        ("peak queue depth", f"{depth} of cap {stats.queue_cap}"),
        ("tasks per worker", " ".join(map(str, stats.tasks_per_worker))),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


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
    from .._engine.executor import run

    for option, path in (("--trace", args.trace), ("--gantt", args.gantt), ("--json", args.json)):
        check_output(option, path)
    graph = load_graph(*args.spec)
    targets = resolve_targets(graph, args.targets)
    _check_graph(graph, targets)
    keep = _Keep()
    callbacks: list[Any] = [keep]
    bar = None
    if args.progress:
        from .._observation.progress import ProgressBar

        bar = ProgressBar()
        callbacks.append(bar)
    try:
        run(
            graph,
            targets,
            workers=args.workers,
            queue_cap=args.queue_cap,
            max_in_flight=args.max_in_flight,
            on_error=args.on_error,
            callbacks=callbacks,
            trace=bool(args.trace or args.gantt),
            checkpoint=args.checkpoint,
        )
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()  # no run end comes after Ctrl-C: show it, give the streams back
        raise
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
    result = keep.result
    print(_summary(result))
    wanted = graph.sinks() if targets is None else targets
    if args.print_values:
        print_values(result, wanted)
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
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from .._observation.draw import to_dot, to_mermaid

    graph = load_graph(*args.spec)
    targets = resolve_targets(graph, args.targets)
    _check_graph(graph, targets)
    draw = to_dot if args.format == "dot" else to_mermaid
    sys.stdout.write(draw(graph, targets, None))
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
        command = {"run": _cmd_run, "show": _cmd_show, "demo": _cmd_demo}[args.command]
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
