"""The child process of ``isolate="process"`` tasks: run calls its worker thread sends.

Started by :class:`dagexec._engine.process.process_pool.ChildSlot` as a fresh interpreter
(``sys.executable -c``, never a fork of the threaded parent) that loads this file
and ``transfer.py`` by path, as ``_dagexec_child`` and ``_dagexec_transfer``, without
importing the dagexec package: a child of a task that does not use dagexec starts
in about the time of a bare interpreter. It talks over three pipes::

    parent worker thread --requests--> main loop here --replies--> parent
    parent worker thread --stops (task seq)--> stop listener thread here
    (a seq with WITHDRAW set: drop that early call if it has not begun)

The main loop reads one request (the call and its arguments, see
:mod:`dagexec._engine.process.transfer`; one ``read`` for a small one), loads
the task's module and arguments, runs the call and replies with the value or the
exception (one ``writev``). The parent times all of that (see ``docs/processes.md``).
The stop listener sleeps in a ``read`` of its own pipe: it costs a call nothing.
A call the parent sent *early* (while the one before it ran; see
:mod:`dagexec._engine.process.early`) waits in the request pipe. When the main loop
reaches it, it says BEGAN (with the time, from which the parent counts its
deadline) before loading it, unless the parent withdrew it first: the stop
listener then answers DROPPED and the main loop skips it. Which of the two
happens is decided under one lock (``transfer.EarlyCalls``), so exactly one is said.
Replies are written by both threads, whole, under ``_replying``.
SIGINT is ignored: Ctrl-C is the parent's to handle, which kills the children
whose tasks must stop.

How a child ends, and takes its process group (it leads one: whatever its tasks
started) with it:

* its request pipe closes (the executor shuts down): it flushes its stdout and
  stderr and kills its group, itself included;
* its stop pipe reads end of file while it lives: the parent died (it closes that
  pipe only once this child is gone). The listener thread unlinks every
  shared-memory segment of this child and kills the group at once, even while a
  task runs;
* the parent dies while a task holds the GIL in C code, where no Python thread
  here can run: the watchdog, a tiny process this child forks as it starts, does
  the same (see :mod:`dagexec._engine.process.lifecycle` for why a process, not
  ``PR_SET_PDEATHSIG``).
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
import time
import traceback
from contextvars import Context
from typing import Any, NoReturn

try:
    from .transfer import (
        BEGAN,
        DROPPED,
        ERROR,
        LOG,
        LOGS,
        PLACE,
        SEGMENT_PREFIX,
        VALUE_META,
        WITHDRAW,
        EarlyCalls,
        Reader,
        dumps,
        lift,
        receive,
        send,
        unlink_segments,
    )
except ImportError:  # loaded by file as _dagexec_child, beside _dagexec_transfer
    from _dagexec_transfer import (  # type: ignore[import-not-found,no-redef]
        BEGAN,
        DROPPED,
        ERROR,
        LOG,
        LOGS,
        PLACE,
        SEGMENT_PREFIX,
        VALUE_META,
        WITHDRAW,
        EarlyCalls,
        Reader,
        dumps,
        lift,
        receive,
        send,
        unlink_segments,
    )

__all__ = ["calling", "loading_main", "main"]

_SEQ = struct.Struct("<Q")
_enter = Context.run  # unbound: no bound method made per call

# The call running now, as (name, attempt, stop event), for dagexec.current_task()
# (which looks here when it finds no task of its own); None between calls.
calling: tuple[Any, int, threading.Event] | None = None
# True while this child loads the parent's main script (or a CLI graph file): a
# dagexec.run or Executor started then is that script's unguarded pipeline, and
# refuses to start (dagexec._core.isolate.refuse_in_a_loading_child looks here).
loading_main = False
# The pid of the process serving calls: a copy a task forks (os.fork) that returns
# instead of ending with os._exit finds a different pid, and must neither answer
# (its answer would be taken for the next call's) nor read the next call.
_serving = 0
# Held while a message is written to the reply pipe: the main loop and the stop
# listener (DROPPED) both write there, and a message must not be cut by another.
_replying = threading.Lock()


def _send_reply(replies: int, meta: Any, data: bytes, buffers: list[Any], path: str | None) -> None:
    with _replying:
        send(replies, meta, data, buffers, path)


def main(requests: int, replies: int, stops: int, life: int, parent: int) -> None:
    """Serve requests until the request pipe closes (or the reply pipe breaks: the
    parent is gone, and nobody is left to tell), then end this child's process
    group. ``life`` is the pipe whose end of file says the parent died; ``parent``
    is the parent's pid, which names this child's shared-memory segments."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tag = f"{SEGMENT_PREFIX}{parent}-{os.getpid()}-"
    _start_watchdog(life, (requests, replies, stops), tag)
    try:
        with contextlib.suppress(BrokenPipeError):
            _serve(requests, replies, stops, tag)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        _end_group()


def _start_watchdog(life: int, others: tuple[int, ...], tag: str) -> None:
    """Fork the watchdog: a process that waits for the end of file of ``life`` (the
    parent died), then unlinks this child's segments and kills its group.

    Forked twice, before any thread starts (a fork of a threaded process is not
    safe): it is nobody's child here, so a task's ``os.wait()`` never sees it. It
    holds none of this child's other pipes, so that the parent still reads the end
    of file of a child that died.
    """
    me = os.getpid()
    middle = os.fork()
    if middle == 0:
        try:
            if os.fork() == 0:
                for fd in others:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    while os.read(life, 1):
                        pass  # nothing is written to it: this waits for end of file
                unlink_segments(lambda name: name.startswith(tag))
                _end_group(me)
        finally:
            os._exit(0)
    os.waitpid(middle, 0)
    os.close(life)


def _end_group(leader: int | None = None) -> None:
    """Kill the process group this child leads (what its tasks started, the watchdog
    and this child); only the child ``leader`` itself if it leads none."""
    leader = os.getpid() if leader is None else leader
    if os.getpgrp() == leader:  # it leads its group, as the parent starts it
        os.killpg(leader, signal.SIGKILL)
    else:
        os.kill(leader, signal.SIGKILL)


def _serve(requests: int, replies: int, stops: int, tag: str) -> None:
    global calling, _serving
    _serving = os.getpid()
    stop = threading.Event()
    running = [0]  # seq of the call running now (0: none)
    early = EarlyCalls()
    threading.Thread(
        target=_listen_for_stops,
        args=(stops, stop, running, tag, early, replies),
        daemon=True,
        name="stops",
    ).start()
    loaded: set[str] = set()
    misplaced: BaseException | None = None  # why the last PLACE could not be taken
    reader = Reader(requests)
    while True:
        try:
            meta, data, buffers = receive(reader)
        except EOFError:
            return
        if meta[0] == LOGS:  # which records to stream back, from the next call on
            _stream_logs(meta[1], replies)
            continue
        if meta[0] == PLACE:  # a new user of this child: its directory, its environment
            misplaced = _move(meta[1], meta[2])
            continue
        _, seq, name, attempt, shm, extra, sent_early = meta
        if not _begins(early, seq, sent_early, replies):
            continue  # withdrawn: the stop listener said DROPPED
        # Where a reply with large buffers goes: a file the parent names the same way.
        out_path = f"{shm}/{tag}{seq}-out" if shm else None
        if stop._flag:  # type: ignore[attr-defined]  # is_set()'s field, without its call
            stop.clear()
        running[0] = seq
        try:
            if misplaced is not None:
                raise misplaced
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
        calling = (name, attempt, stop)
        try:
            # Each call in a new, empty Context: a contextvar one call sets reaches no
            # later call in this child (docs/guarantees.md), as on the worker threads.
            if dep_params:  # dependencies passed by keyword (deps={param: task})
                kwargs.update(zip(dep_params, deps, strict=True))
                value = _enter(Context(), fn, *args, **kwargs)
            else:
                value = _enter(Context(), fn, *deps, *args, **kwargs)
        except BaseException as exc:
            if os.getpid() != _serving:
                _end_forked_copy(name)
            del fn, deps, args, kwargs
            calling = None
            running[0] = 0
            _flush()
            _reply_error(replies, exc, name, out_path)
            del exc
            continue
        if os.getpid() != _serving:
            _end_forked_copy(name)
        del fn, deps, args, kwargs
        calling = None
        running[0] = 0
        _flush()
        _reply_value(replies, value, name, out_path)
        del value


def _begins(early: EarlyCalls, seq: int, sent_early: bool, replies: int) -> bool:
    """Whether call ``seq`` runs (False: withdrawn); one sent early says BEGAN first,
    with the time its deadline counts from. Only early calls can be withdrawn, so a
    call sent in its turn takes no lock here."""
    if not sent_early:
        return True
    if not early.begin(seq):
        return False
    _send_reply(replies, (BEGAN, seq, time.monotonic()), b"", [], None)
    return True


def _end_forked_copy(name: Any) -> NoReturn:
    """A process the task forked returned here, as if it were the call: end it
    without answering, running no ``atexit`` (they belong to the child)."""
    _flush()
    with contextlib.suppress(Exception):
        os.write(
            2,
            f"dagexec: a process forked by task {name!r} (pid {os.getpid()}) returned "
            "from the task instead of exiting; it ends here without answering. End a "
            "forked process with os._exit().\n".encode(errors="replace"),
        )
    os._exit(0)


def _move(cwd: str | None, env: dict[bytes, bytes]) -> BaseException | None:
    """Take the new user's working directory and environment; the error if the
    directory cannot be entered (each call then fails with it, until the next PLACE)."""
    os.environb.clear()
    os.environb.update(env)
    if hasattr(time, "tzset"):
        time.tzset()  # localtime() follows a new TZ only when told
    if cwd is None:
        return None
    try:
        os.chdir(cwd)
    except OSError as exc:
        return exc
    return None


def _flush() -> None:
    """Write out what the call printed before its answer goes (nothing to do, and no
    system call, if it printed nothing): a shared child outlives its executor."""
    # try/except rather than contextlib.suppress: this runs on every call, and the
    # two context managers cost ~1.8 us a call against ~0.3 us (docs/performance.md).
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - see above
            stream.flush()
        except Exception:  # a closed or broken stream must not fail the call
            pass


def _prepare(extra: tuple[list[str] | None, dict[str, tuple[str, ...]]], loaded: set[str]) -> None:
    """Take the parent's ``sys.path`` and load the modules it says to load (its
    script, by name or by file, with the parent's ``sys.argv`` as multiprocessing's
    spawn gives it; CLI graph files, by file)."""
    global loading_main
    paths, modules = extra
    if paths is not None:
        sys.path[:] = paths
    for module, (how, where, *argv) in modules.items():
        if module in loaded:
            continue
        if argv:
            sys.argv[:] = argv
        loading_main = True
        try:
            if how == "name":
                _run_main_by_name(where)
            else:
                _load_file(module, where)
        except SystemExit as exc:
            # A top level that parses its command line and exits: as an error of the
            # load, not an exit of the parent that re-raises it.
            raise RuntimeError(
                f"loading {where!r} in the child process called sys.exit({exc.code!r}); "
                "put the script's top-level work (argument parsing included) under "
                "'if __name__ == \"__main__\":' so that loading it only defines its functions"
            ) from None
        finally:
            loading_main = False
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
    _send_reply(replies, VALUE_META, data, buffers, out_path)


def _reply_error(replies: int, exc: BaseException, name: Any, out_path: str | None) -> None:
    """Send ``exc`` back with the child's traceback for a note, and what it is (its
    class's module and name, its message), from which the parent rebuilds it when
    it does not pickle, here or there."""
    text = "".join(traceback.format_exception(exc)).rstrip()
    exc.__traceback__ = None
    kind = type(exc)
    try:
        message = str(exc)
    except Exception:
        message = object.__repr__(exc)
    note = f"dagexec: in the child process (pid {os.getpid()}):\n{text}"
    # The parent adds the note (a task may have set __notes__ to what add_note refuses).
    what = (kind.__module__, kind.__qualname__, message, note)
    why = None
    try:
        data, buffers = dumps(exc)
    except Exception as error:
        why = f"{type(error).__name__}: {error}"
        data, buffers = b"", []
    _send_reply(replies, (ERROR, what, why), data, buffers, out_path)


def _listen_for_stops(
    stops: int, stop: threading.Event, running: list[int], tag: str, early: EarlyCalls, replies: int
) -> None:
    """Set ``stop`` when the parent forwards a stop for the call running now, withdraw
    an early call it withdraws; at end of file (the parent died) unlink this child's
    segments and end its group."""
    while True:
        try:
            raw = os.read(stops, _SEQ.size)
        except OSError:
            raw = b""
        if len(raw) < _SEQ.size:
            break
        seq = _SEQ.unpack(raw)[0]
        if seq & WITHDRAW:
            if early.withdraw(seq & ~WITHDRAW):
                with contextlib.suppress(OSError):  # the parent is gone: nobody to tell
                    _send_reply(replies, (DROPPED, seq & ~WITHDRAW), b"", [], None)
        elif seq == running[0]:
            stop.set()
    unlink_segments(lambda name: name.startswith(tag))
    _end_group()


def _run_main_by_name(module: str) -> None:
    """Run the parent's ``python -m module`` as ``__mp_main__`` (what :mod:`multiprocessing`'s
    spawn does), so that its relative imports find its package; installed as
    ``__main__`` too, so that pickled references to ``__main__.f`` find it."""
    import runpy
    import types

    main_module = types.ModuleType("__mp_main__")
    main_module.__dict__.update(runpy.run_module(module, run_name="__mp_main__", alter_sys=True))
    sys.modules["__main__"] = sys.modules["__mp_main__"] = main_module


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


# run(logs=...): which records the calls stream back, (level, logger or None); None:
# none. Records go to the parent as they are made, so a child killed mid-call (its
# timeout, a crash) has sent its last lines already. The same rule as the parent's
# capture (dagexec._observation.capture): logging is wrapped once the first LOGS
# arrives, and a record the child's own levels would drop is made for the parent
# only; one they let through reaches the child's handlers as before.
_wanted: tuple[int, str | None] | None = None
_log_out = -1


def _stream_logs(wanted: tuple[int, str | None] | None, replies: int) -> None:
    global _wanted, _log_out
    _wanted, _log_out = wanted, replies
    if wanted is None:
        return
    import logging

    if getattr(logging.Logger.handle, "_dagexec", False):
        return
    enabled, handle = logging.Logger.isEnabledFor, logging.Logger.handle

    def wants(name: str, level: int) -> bool:
        w = _wanted
        if w is None or calling is None or level < w[0] or os.getpid() != _serving:
            return False  # (a process the task forked never writes to the replies)
        if threading.current_thread() is not threading.main_thread():
            return False  # the call's own thread only, the one writing the replies
        return w[1] is None or name == w[1] or name.startswith(w[1] + ".")

    def is_enabled_for(self: logging.Logger, level: int) -> bool:
        return enabled(self, level) or wants(self.name, level)

    def handle_record(self: logging.Logger, record: logging.LogRecord) -> None:
        if not wants(record.name, record.levelno):
            handle(self, record)
            return
        if enabled(self, record.levelno):
            handle(self, record)
        _send_record(record)

    handle_record._dagexec = True  # type: ignore[attr-defined]
    logging.Logger.isEnabledFor = is_enabled_for  # type: ignore[method-assign]
    logging.Logger.handle = handle_record  # type: ignore[method-assign]


def _send_record(record: Any) -> None:
    """Send ``record``'s fields, message formatted, to the parent."""
    import logging

    fields = dict(record.__dict__)
    try:
        fields["msg"] = record.getMessage()
    except Exception as exc:
        fields["msg"] = f"{record.msg!r} % {record.args!r} (could not format: {exc!r})"
    fields["args"] = None
    if record.exc_info:
        fields["exc_text"] = record.exc_text or logging.Formatter().formatException(record.exc_info)
    fields["exc_info"] = None
    # Plain data only: an extra= value may not pickle, or not unpickle in the parent.
    plain = (str, int, float, bool, type(None))
    data = pickle.dumps({k: v if isinstance(v, plain) else repr(v) for k, v in fields.items()})
    _send_reply(_log_out, (LOG,), data, [], None)
