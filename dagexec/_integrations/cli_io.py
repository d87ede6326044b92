"""What ``python -m dagexec`` reads and writes besides the summary table.

Inputs: ``--targets`` items (Python literals or plain text) and the output
paths, which are checked before anything runs. Outputs: the one-line failure,
a failing task's traceback, ``--print`` and ``--json`` of the target values.
Nothing here may raise because of a hostile task name or exception: the error
line is what the user needs most when something is already wrong.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import reprlib
import sys
import traceback
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from .._core.errors import describe
from .._core.graph import Graph
from .._core.safe import str_for_message
from .._core.task_logs import TaskLogs
from .._observation.draw import display_name

__all__ = [
    "Fail",
    "check_output",
    "failure_line",
    "json_values",
    "parse_targets",
    "print_values",
    "resolve_targets",
    "safe_str",
    "write_tracebacks",
]


class Fail(Exception):
    """A problem to report as one ``dagexec: error:`` line, with its exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class _Target:
    """One ``--targets`` item: its text, and the literal it parses as (if any)."""

    __slots__ = ("literal", "text")

    def __init__(self, text: str, literal: Hashable | None) -> None:
        self.text = text
        self.literal = literal


_NOT_LITERAL: Any = object()


def _split_top_level(text: str) -> list[str]:
    """Split at commas that are outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def parse_targets(text: str) -> list[_Target]:
    items = _split_top_level(text)
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected task names separated by commas, got {text!r}")
    targets = []
    for item in items:
        try:
            literal = ast.literal_eval(item)
            hash(literal)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            literal = _NOT_LITERAL
        targets.append(_Target(item, literal))
    return targets


def resolve_targets(graph: Graph, targets: list[_Target] | None) -> list[Hashable] | None:
    """The task names the ``--targets`` items mean for this graph (see the module doc)."""
    if targets is None:
        return None
    names: list[Hashable] = []
    for target in targets:
        if target.literal is _NOT_LITERAL or (target.literal not in graph and target.text in graph):
            names.append(target.text)
        else:
            names.append(target.literal)
    return names


def check_output(option: str, path: str | None) -> None:
    """Fail before the run when an output file could not be written after it."""
    if not path:
        return
    if os.path.isdir(path):
        raise Fail(f"{option} {path}: is a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise Fail(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (
        os.path.exists(path) and not os.access(path, os.W_OK)
    ):
        raise Fail(f"{option} {path}: permission denied")


# ``str(exc)``, or a stand-in when the exception's own ``__str__`` raises: the one
# the engine's notes and log lines use.
safe_str = str_for_message


def _task_label(name: Hashable) -> str:
    try:
        return display_name(name)
    except Exception:
        return describe(name)


def failure_line(errors: dict[Hashable, BaseException], planned: int) -> str:
    name, exc = next(iter(errors.items()))
    what = f"task {_task_label(name)} failed: {type(exc).__name__}: {safe_str(exc)}"
    if len(errors) == 1:
        return what
    return f"{len(errors)} of {planned} tasks failed; first: {what}"


# Frames of a failing task shown without --traceback: enough to see the failing
# line and its caller, short enough that the error line stays in view.
_SHORT_FRAMES = 3
# The package root (this file is in dagexec/_integrations/): frames below it are ours.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def write_tracebacks(
    errors: dict[Hashable, BaseException],
    full: bool,
    logs: Mapping[Hashable, tuple[TaskLogs, ...]] | None = None,
) -> None:
    """A failed task's traceback on stderr: the first one, short, or all, full; with
    ``logs`` (``--logs``), each one's captured records under it."""
    items = list(errors.items()) if full else list(errors.items())[:1]
    for name, exc in items:
        try:
            if full:
                lines = traceback.format_exception(exc)
                head = f"task {_task_label(name)} failed:\n"
            else:
                frames = [  # the task's own frames, not dagexec's re-raise
                    f
                    for f in traceback.extract_tb(exc.__traceback__)
                    if not f.filename.startswith(PACKAGE_DIR)
                ][-_SHORT_FRAMES:]
                lines = [
                    *traceback.format_list(frames),
                    *traceback.format_exception_only(exc),
                ]
                more = "; --traceback shows all" if len(errors) > 1 else ""
                head = (
                    f"task {_task_label(name)} failed (last {_SHORT_FRAMES} frames at "
                    f"most; --traceback for the full traceback{more}):\n"
                )
            sys.stderr.write(head + "".join(lines))
        except Exception:  # a hostile exception must not hide the error line
            sys.stderr.write(f"task {_task_label(name)} failed (traceback unavailable)\n")
        if logs is not None:
            sys.stderr.write(_logged(name, logs.get(name, ())))


def _logged(name: Hashable, attempts: tuple[TaskLogs, ...]) -> str:
    """What a failed task logged (``--logs``), attempt by attempt, one line a record."""
    if not attempts:
        return f"task {_task_label(name)} logged nothing that was captured\n"
    out = []
    for attempt in attempts:
        n = len(attempt.records)
        dropped = f", {attempt.dropped} more dropped (the cap)" if attempt.dropped else ""
        out.append(
            f"task {_task_label(name)} logged (attempt {attempt.attempt}: "
            f"{n} record{'s' if n != 1 else ''}{dropped}):\n"
        )
        for record in attempt.records:
            text = _LOG_LINE.format(record)
            out.append("  " + text.replace("\n", "\n  ") + "\n")
    return "".join(out)


_LOG_LINE = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


def json_values(result: Any, targets: Sequence[Hashable]) -> tuple[dict[str, Any], str]:
    """The JSON document for ``--json``, and a note about what it could not hold."""
    values: dict[str, Any] = {}
    not_written: dict[str, str] = {}
    for name in targets:
        key = name if isinstance(name, str) else _task_label(name)
        if key in values or key in not_written:
            key = describe(name)
        if name not in result:
            state = result.status.get(name)
            not_written[key] = f"no value: the task is {getattr(state, 'name', state)}"
            continue
        value = result[name]
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            not_written[key] = f"JSON cannot hold it: {type(exc).__name__}: {safe_str(exc)}"
            continue
        values[key] = value
    unheld = [k for k, why in not_written.items() if why.startswith("JSON")]
    note = ""
    if unheld:
        note = (
            f"{len(unheld)} target value(s) not written to JSON (JSON cannot hold them; "
            f"see not_written in the file): {', '.join(unheld)}"
        )
    return {"values": values, "not_written": not_written}, note


def _short_repr() -> reprlib.Repr:
    """reprlib's shortening, a little roomier than its defaults: a dozen items of a
    list and 60 characters of a string still fit one terminal line or two."""
    short = reprlib.Repr()
    short.maxlevel = 3
    short.maxtuple = short.maxlist = short.maxarray = short.maxdeque = 12
    short.maxdict = short.maxset = short.maxfrozenset = 8
    short.maxstring = 60
    short.maxlong = 40
    short.maxother = 60
    return short


def print_values(result: Any, targets: Sequence[Hashable], *, full: bool = False) -> None:
    """One ``name = value`` line per target; long values shortened unless ``full``.

    A shortened line would hide that it is shortened only when the value itself
    contains ``...``, so a closing note says how to see the values whole.
    """
    short = None if full else _short_repr()
    shortened = 0
    for name in targets:
        if name in result:
            value = result[name]
            try:
                text = repr(value) if short is None else short.repr(value)
                if short is not None and "..." in text and text != repr(value):
                    shortened += 1
            except Exception as exc:
                text = f"<repr failed: {type(exc).__name__}>"
        else:
            state = result.status.get(name)
            text = f"<no value: {getattr(state, 'name', state)}>"
        print(f"{_task_label(name)} = {text}")
    if shortened:
        print(
            f"({shortened} long value{'s' if shortened > 1 else ''} shortened with ...; "
            "--print-full prints them whole, --json writes them to a file)"
        )
