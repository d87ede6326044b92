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

This module is the commands; their options are parsed by
:mod:`dagexec._integrations.cli_parser`. The graph is ``FILE.py:VARIABLE`` or
``MODULE:VARIABLE`` (see :mod:`dagexec._integrations.cli_load`); the summary
table counts every task once (:mod:`dagexec._integrations.cli_tally`), also
after Ctrl-C or ``--timeout``.

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
from typing import TYPE_CHECKING, Any

from .._core.errors import DagexecError
from .._core.graph import Graph
from .._engine.front.future import _TIMED_OUT
from .cli_io import (
    Fail,
    check_output,
    failure_line,
    json_values,
    print_values,
    resolve_targets,
    safe_str,
    write_tracebacks,
)
from .cli_load import load_graph
from .cli_options import check_resources_given, configure_logging
from .cli_parser import build_parser
from .cli_tally import RunTally, summary_table

if TYPE_CHECKING:
    from .._engine.front.run_checks import RunOptions
    from .._observation.progress import ProgressBar

__all__ = ["main"]


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


def _write_pictures(
    result: Any, trace: str | None, gantt: str | None, report: str | None = None
) -> None:
    try:
        if trace:
            result.trace_to_chrome(trace)
            print(f"trace written to {trace} (open in https://ui.perfetto.dev)")
        if gantt:
            result.gantt_svg(gantt)
            print(f"timeline written to {gantt}")
        if report:
            result.report_html(report)
            print(f"report written to {report} (open it in a browser)")
    except OSError as exc:
        raise Fail(f"cannot write {exc.filename}: {exc.strerror}") from exc


def _cmd_run(args: argparse.Namespace) -> int:
    for option, path in (
        ("--trace", args.trace),
        ("--gantt", args.gantt),
        ("--report", args.report),
        ("--json", args.json),
    ):
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
    from .._engine.front.oneshot import run_with

    try:
        options = _run_options(args, callbacks)
        run_with(graph, targets, options, args.workers, args.queue_cap, args.max_in_flight)
    except KeyboardInterrupt:
        _show_so_far(tally, bar, only_if_started=True)
        raise
    except TimeoutError as exc:
        if not getattr(exc, _TIMED_OUT, False):
            raise  # a task's own TimeoutError: handled below as a task failure
        _show_so_far(tally, bar, only_if_started=False)
        raise Fail(
            f"the run timed out after {args.timeout:g} s (--timeout {args.timeout:g}); the "
            "summary above says what it left undone; raise --timeout or make the tasks faster"
        ) from exc
    except BaseException as exc:
        if keep.result is None:  # refused, or failed, before any result was made
            refusal = _refusal(exc)
            if refusal is None:
                raise
            raise refusal from exc
        # Else a task failed: its failure is in keep.result, for the report.


def _run_options(args: argparse.Namespace, callbacks: list[object]) -> RunOptions:
    """The command line's flags as the run's options (checked there, not here)."""
    from .._engine.front.run_checks import RunOptions

    return RunOptions(
        on_error=args.on_error,
        callbacks=callbacks,
        trace=bool(args.trace or args.gantt or args.report),
        logs=args.logs or bool(args.report),
        checkpoint=args.checkpoint,
        resources=args.resources,
        timeout=args.timeout,
    )


def _show_so_far(tally: RunTally, bar: ProgressBar | None, *, only_if_started: bool) -> None:
    """Close the bar (no run end comes after Ctrl-C or the timeout: it gives the
    streams back) and print the summary so far."""
    if bar is not None:
        bar.close()
    if tally.started or not only_if_started:
        print(summary_table(tally.freeze(), None))


def _refusal(exc: BaseException) -> Fail | None:
    """The :class:`Fail` for what ended the command before any result was made;
    None for an unexpected Exception, which propagates as itself.

    A bad parameter combination (ValueError, TypeError) or a checkpoint file or
    constant the run cannot use (DagexecError) is named with its fix. A task's
    SystemExit (or other BaseException) is a task failure: it must not end the
    command with the task's exit code, or silently with 0."""
    if isinstance(exc, (ValueError, TypeError, DagexecError)):
        return Fail(safe_str(exc))
    if isinstance(exc, Exception):
        return None
    return Fail(f"{type(exc).__name__}: {safe_str(exc)}")


def _report(
    args: argparse.Namespace, graph: Graph, targets: list[Hashable] | None, result: Any
) -> None:
    """Print the values and pictures asked for; fail if a task failed."""
    wanted = graph.sinks() if targets is None else targets
    if args.print_values or args.print_full:
        print_values(result, wanted, full=args.print_full)
    _write_pictures(result, args.trace, args.gantt, args.report)
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
        write_tracebacks(dict(result.errors), args.traceback, result.logs if args.logs else None)
        raise Fail(failure_line(dict(result.errors), result.stats.tasks_planned))


def _cmd_show(args: argparse.Namespace) -> int:
    from .._observation.draw import to_dot, to_mermaid

    graph = load_graph(*args.spec, full_traceback=args.traceback)
    targets = resolve_targets(graph, args.targets)
    _check_graph(graph, targets)
    draw = to_dot if args.format == "dot" else to_mermaid
    sys.stdout.write(draw(graph, targets, None))
    return 0


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
