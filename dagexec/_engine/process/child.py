"""The child process of ``isolate="process"`` tasks: run calls its worker thread sends.

Started by :class:`dagexec._engine.process.process_pool.ChildSlot` as a fresh interpreter
(``sys.executable -c``, never a fork of the threaded parent) that loads this file
and ``transfer.py`` by path, as ``_dagexec_child`` and ``_dagexec_transfer``, without
importing the dagexec package: a child of a task that does not use dagexec starts
in about the time of a bare interpreter. It talks over three pipes::

    parent worker thread --requests--> main loop here --replies--> parent
    parent worker thread --stops (task seq)--> stop listener thread here

The main loop reads one request (the call and its arguments, see
:mod:`dagexec._engine.process.transfer`; one ``read`` for a small one), tells the parent
when the call starts if the task has a timeout (the parent times it from then),
runs it and replies with the value or the exception (one ``writev``). The stop
listener sleeps in a ``read`` of its own pipe: it costs a call nothing. A
closed request pipe (the parent closed it, or died) ends the process. SIGINT is
ignored: Ctrl-C is the parent's to handle, which kills the children whose tasks
must stop.

What the call sees: modules imported fresh by name (the parent's ``sys.path``
is sent along whenever it changed), or loaded from their file for a script's
``__main__`` (as ``__mp_main__``, like :mod:`multiprocessing`'s spawn, so its
``if __name__ == "__main__":`` block does not run) and for graph files the CLI
loaded. ``dagexec.current_task()`` gives the task's name and attempt (it reads
:data:`calling` here), and its ``cancelled`` is set when the parent forwards a stop.
Tasks arrive as their parts (function, dependency values, constants, the
parameters keyword dependencies go to), not as dagexec's call objects, so that
unpickling them does not import dagexec either.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pickle
import signal
import struct
import sys
import threading
import traceback
from typing import Any

try:
    from .transfer import Reader, dumps, lift, receive, send
except ImportError:  # loaded by file as _dagexec_child, beside _dagexec_transfer
    from _dagexec_transfer import (  # type: ignore[import-not-found,no-redef]
        Reader,
        dumps,
        lift,
        receive,
        send,
    )

__all__ = ["calling", "main"]

_SEQ = struct.Struct("<Q")

# The call running now, as (name, attempt, stop event), for dagexec.current_task()
# (which looks here when it finds no task of its own); None between calls.
calling: tuple[Any, int, threading.Event] | None = None


def main(requests: int, replies: int, stops: int, parent: int) -> None:
    """Serve requests until the request pipe closes (or the reply pipe breaks: the
    parent is gone, and nobody is left to tell). ``parent`` is the parent's pid,
    which names this child's shared-memory files (the parent unlinks them)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(BrokenPipeError):
        _serve(requests, replies, stops, f"dagexec-{parent}-{os.getpid()}-")


def _serve(requests: int, replies: int, stops: int, tag: str) -> None:
    global calling
    stop = threading.Event()
    running = [0]  # seq of the call running now (0: none)
    threading.Thread(
        target=_listen_for_stops, args=(stops, stop, running), daemon=True, name="stops"
    ).start()
    loaded: set[str] = set()
    reader = Reader(requests)
    while True:
        try:
            meta, data, buffers = receive(reader)
        except EOFError:
            return
        seq, name, attempt, timed, shm, extra = meta
        # Where a reply with large buffers goes: a file the parent names the same way.
        out_path = f"{shm}/{tag}{seq}-out" if shm else None
        if stop.is_set():
            stop.clear()
        running[0] = seq
        try:
            if extra is not None:
                _prepare(extra, loaded)
            fn, args, kwargs, dep_params, deps = pickle.loads(data, buffers=buffers)
            del data, buffers
        except BaseException as exc:
            exc.add_note(
                f"dagexec: the child process (pid {os.getpid()}) could not load task "
                f"{name!r}'s function or arguments"
            )
            _reply_error(replies, exc, name, out_path)
            continue
        if timed:
            send(replies, ("started",), b"", [], None)
        calling = (name, attempt, stop)
        try:
            if dep_params:  # dependencies passed by keyword (deps={param: task})
                kwargs.update(zip(dep_params, deps, strict=True))
                value = fn(*args, **kwargs)
            else:
                value = fn(*deps, *args, **kwargs)
        except BaseException as exc:
            del fn, deps, args, kwargs
            calling = None
            running[0] = 0
            _reply_error(replies, exc, name, out_path)
            del exc
            continue
        del fn, deps, args, kwargs
        calling = None
        running[0] = 0
        _reply_value(replies, value, name, out_path)
        del value


def _prepare(extra: tuple[list[str] | None, dict[str, str]], loaded: set[str]) -> None:
    """Take the parent's ``sys.path`` and load the modules it says to load by file."""
    paths, files = extra
    if paths is not None:
        sys.path[:] = paths
    for module, path in files.items():
        if module not in loaded:
            _load_file(module, path)
            loaded.add(module)


def _reply_value(replies: int, value: Any, name: Any, out_path: str | None) -> None:
    """Send ``value`` back; a TypeError naming the task if it cannot be pickled."""
    try:
        data, buffers = dumps(lift((value,)))
    except Exception as exc:
        error = TypeError(
            f"task {name!r}: its value cannot be pickled to return from its child "
            f"process (isolate='process'): {type(exc).__name__}: {exc}; return a "
            "picklable value, or run the task on a thread (drop isolate)"
        )
        _reply_error(replies, error, name, out_path)
        return
    send(replies, ("done", True), data, buffers, out_path)


def _reply_error(replies: int, exc: BaseException, name: Any, out_path: str | None) -> None:
    """Send ``exc`` back with the child's traceback as a note; a stand-in if it won't pickle."""
    text = "".join(traceback.format_exception(exc)).rstrip()
    exc.__traceback__ = None
    try:
        exc.add_note(f"dagexec: in the child process (pid {os.getpid()}):\n{text}")
        data, buffers = dumps(exc)
        # An exception class whose __init__ takes other arguments than it passes
        # on pickles but does not unpickle: find out here, not in the parent.
        pickle.loads(data, buffers=buffers)
    except Exception:
        stand_in = RuntimeError(
            f"task {name!r} raised {type(exc).__qualname__}: {exc} in its child process, "
            "and that exception cannot be pickled back"
        )
        stand_in.add_note(f"dagexec: in the child process (pid {os.getpid()}):\n{text}")
        data, buffers = dumps(stand_in)
    send(replies, ("done", False), data, buffers, out_path)


def _listen_for_stops(stops: int, stop: threading.Event, running: list[int]) -> None:
    """Set ``stop`` when the parent forwards a stop for the call running now."""
    while True:
        try:
            raw = os.read(stops, _SEQ.size)
        except OSError:
            return
        if len(raw) < _SEQ.size:
            return
        if _SEQ.unpack(raw)[0] == running[0]:
            stop.set()


def _load_file(module: str, path: str) -> None:
    """Load a module the parent did not import by name, from its file.

    A script's ``__main__`` is loaded as ``__mp_main__`` and also installed as
    ``__main__`` (what :mod:`multiprocessing` does), so that pickled references
    to ``__main__.f`` find it while its ``if __name__ == "__main__":`` block
    stays unrun. Its top level runs again here.
    """
    run_name = "__mp_main__" if module == "__main__" else module
    spec = importlib.util.spec_from_file_location(run_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load module {module!r} from {path!r}")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[run_name] = loaded
    if module == "__main__":
        sys.modules["__main__"] = loaded
    spec.loader.exec_module(loaded)
