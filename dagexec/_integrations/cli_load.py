"""Finding the graph a command line names: ``FILE.py:VAR`` or ``module:VAR``.

A newcomer's first command is often mistyped, so every way this can go wrong
ends in one line that says what was looked for, where, and what is there
instead: a close file name (``nighty.py`` -> ``nightly.py``), the ``Graph``
variables the file does have, or the file and line where importing it failed
(``imperr2.py:3: ZeroDivisionError: division by zero``). With ``--traceback``
the whole traceback of a failed import comes first, without the import
machinery's own frames.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
import traceback
from types import ModuleType
from typing import Any

from .._core.graph import Graph
from .cli_io import PACKAGE_DIR, Fail, safe_str

__all__ = ["graph_variables", "load_graph", "looks_like_file"]


def looks_like_file(source: str) -> bool:
    """Whether ``source`` names a file (``x.py``, ``dir/x``) rather than a module (``pkg.mod``)."""
    return source.endswith(".py") or os.sep in source or "/" in source or os.path.isfile(source)


def load_graph(source: str, variable: str, *, full_traceback: bool = False) -> Graph:
    """The Graph ``variable`` of the file or module ``source``.

    A file is run as a fresh module with its directory on ``sys.path`` (like
    ``python FILE``); a module is imported by name with the current directory
    on ``sys.path`` (like ``python -m``).

    Raises:
        Fail: the file or module is missing (with the closest names), fails to
            import (with the file and line), or has no such Graph variable (with
            the Graph variables it has).
    """
    if looks_like_file(source):
        module = _run_file(source, full_traceback)
    else:
        module = _import_module(source, full_traceback)
    value: Any = module
    for part in variable.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            hint = _graphs_hint(module, variable)
            raise Fail(f"{source} has no variable {variable!r}; {hint}") from None
    if not isinstance(value, Graph):
        raise Fail(
            f"{source}:{variable} is a {type(value).__name__}, not a dagexec.Graph; "
            f"{_graphs_hint(module, None)}"
        )
    return value


def graph_variables(module: ModuleType) -> list[str]:
    """The names of the module's top-level ``dagexec.Graph`` variables, in definition order."""
    return [name for name, value in vars(module).items() if isinstance(value, Graph)]


def _graphs_hint(module: ModuleType, mistyped: str | None) -> str:
    found = graph_variables(module)
    if not found:
        return "it defines no dagexec.Graph at the top level"
    close = difflib.get_close_matches(mistyped, found, n=1) if mistyped else []
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}Graph variables in it: {', '.join(found)}"


def _run_file(path: str, full_traceback: bool) -> ModuleType:
    if not os.path.isfile(path):
        raise Fail(f"no such file: {path}{_close_files(path)}")
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
        raise _load_failure(path, os.path.abspath(path), exc, full_traceback) from exc
    return module


def _import_module(name: str, full_traceback: bool) -> ModuleType:
    # Like `python -m`: the current directory's modules are importable.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent package that is missing or broken
        found = None
    if found is None:
        raise Fail(
            f"no module named {name!r} (give a file as FILE.py:VARIABLE, or an importable "
            f"module as MODULE:VARIABLE){_close_modules(name)}"
        )
    try:
        return importlib.import_module(name)
    except (Exception, SystemExit) as exc:
        origin = os.path.abspath(found.origin) if found.origin else ""
        raise _load_failure(name, origin, exc, full_traceback) from exc


def _close_files(path: str) -> str:
    """``; did you mean x.py?`` for a missing file, from its directory's Python files."""
    folder, base = os.path.split(path)
    try:
        names = [n for n in os.listdir(folder or ".") if n.endswith(".py")]
    except OSError:
        return ""
    close = difflib.get_close_matches(base, names, n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(os.path.join(folder, n) for n in close) + "?"


def _close_modules(name: str) -> str:
    names = [n[:-3] for n in os.listdir(".") if n.endswith(".py")]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    return "; did you mean " + " or ".join(close) + "?" if close else ""


def _load_failure(source: str, origin: str, exc: BaseException, full: bool) -> Fail:
    """The one-line error for a module that raised while loading; its traceback if asked."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith(("<frozen importlib", PACKAGE_DIR))
    ]
    if full:
        try:
            lines = [
                "Traceback (most recent call last):\n",
                *traceback.format_list(frames),
                *traceback.format_exception_only(exc),
            ]
            sys.stderr.write("".join(lines))
        except Exception:  # a hostile exception must not hide the error line
            sys.stderr.write("(traceback unavailable)\n")
    where = _location(source, origin, exc, frames)
    more = "" if full else " (--traceback shows the full traceback)"
    return Fail(f"cannot load {source}: {where}{type(exc).__name__}: {safe_str(exc)}{more}")


def _location(
    source: str, origin: str, exc: BaseException, frames: list[traceback.FrameSummary]
) -> str:
    """``file:line: `` of where loading failed: the innermost frame in the user's code."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        filename, line = exc.filename, exc.lineno
    elif frames:
        # The innermost frame of the user's code, not the library that raised.
        users = [f for f in frames if _is_user_code(f.filename)]
        chosen = users[-1] if users else frames[-1]
        filename, line = chosen.filename, chosen.lineno or 0
    else:
        return ""
    if origin and os.path.abspath(filename) == origin and source.endswith(".py"):
        shown = source  # as the user wrote it
    else:
        shown = _relative(filename)
    return f"{shown}:{line}: "


def _is_user_code(filename: str) -> bool:
    """Not the standard library's or an installed package's file."""
    import sysconfig

    paths = sysconfig.get_paths()
    library = tuple(
        os.path.abspath(paths[key]) + os.sep for key in ("stdlib", "platstdlib", "purelib")
    )
    return not os.path.abspath(filename).startswith(library)


def _relative(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive, on Windows
        return filename
    return filename if relative.startswith("..") else relative
