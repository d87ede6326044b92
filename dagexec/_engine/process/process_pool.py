"""One child process per worker thread, for ``isolate="process"`` tasks.

A process task reaches the engine as an ordinary task function (an
:class:`~dagexec._core.isolate.IsolatedCall`), so the scheduler, the bounds and
the bookkeeping see nothing new. When its worker thread calls it, the call goes
to that worker's child and the thread waits for the answer::

    worker thread --pickle (+ /dev/shm for large buffers)--> its child process
    worker thread <--value or exception--------------------- its child process

Ownership: a :class:`ChildSlot` belongs to one worker thread (kept on the
worker's ``Running`` record) and is only used by it; it is checked out of the
program's pool of idle children by the first process task that worker runs and
reused by every later one, across runs, until the worker exits
(``Executor.shutdown``, the end of a ``dagexec.run``, a dropped executor), which
checks it back in for the next executor (:mod:`.sharing`), which lists
every live child so that interpreter exit ends them all. The scheduler thread
never pickles anything: the worker thread does.

While it waits, the worker thread wakes every :data:`_TICK` seconds to look at
the attempt's cancellation token (a ``threading.Event`` cannot be waited on
together with a pipe):

* the run is stopping (Ctrl-C, ``cancel()``, a failure with on_error="raise"):
  a cleanup task's child is told (its ``current_task().cancelled`` is set) and
  finishes; any other task's child is killed and the task fails with
  :class:`~dagexec.Cancelled`;
* the task has a ``timeout``: the attempt has one deadline (:meth:`ChildSlot.deadline`),
  counted from when the call is sent (a call sent early, :mod:`.early`: from
  the child's BEGAN), so that the child's loading of the task's module and
  arguments counts, plus :data:`STARTUP_ALLOWANCE` if the call starts the
  child. Past it the child and its process group are killed and the task fails
  with :class:`~dagexec.TaskTimeout` at once (:meth:`ChildSlot.time_out`);
  an answer read after it is never used, so a value that came back is one that
  came in time (which the checkpoint's save rule relies on). The worker is free
  straight away: nothing is abandoned.

A child that dies fails its task with :class:`~dagexec.WorkerCrashed`; the next
process task starts a new one. A child found dead when a call is sent (killed
while idle: the request pipe is broken) is replaced and the call goes to the new
one: it never reached the old. Killed and crashed children are reaped at once,
with their process group (:mod:`dagexec._engine.process.lifecycle`), and the
shared-memory files of their call are unlinked by the parent.

Assumes nothing from the GIL: a slot is touched by its own worker thread only,
except :func:`_kill_all` at interpreter exit.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import time
from typing import Any, NoReturn

from ..._core.errors import Cancelled, TaskTimeout, WorkerCrashed, describe
from ..._core.isolate import IsolatedCall
from ..._core.policy import CurrentTask
from ..._observation.capture import child_wanted, from_child
from . import early
from .lifecycle import end_group, spawn, sweep_segments
from .loading import extra_for
from .sharing import (
    Inherited,
    alive,
    bring_up_to_date,
    check_in,
    current_place,
    gone,
    inherited,
    live_children,
)
from .transfer import (
    BEGAN,
    CALL,
    DROPPED,
    LOG,
    LOGS,
    PLACE,
    SEGMENT_PREFIX,
    VALUE,
    Reader,
    dumps,
    lift,
    receive,
    send,
    shm_dir,
    unlink_quietly,
)
from .travel import parts, rebuilt_error, travelling_name, unpicklable

__all__ = ["STARTUP_ALLOWANCE", "ChildSlot", "live_children"]

# How often a waiting worker thread looks at its task's cancellation token. Lower
# notices Ctrl-C and cancel() sooner, for more wake-ups while a long task runs
# (each ~10 us); a finished call is noticed at once whatever this is.
_TICK = 0.05
# How long close() lets an idle child exit on its own before killing it.
_CLOSE_GRACE = 1.0
# Added to a task's timeout for the attempt that starts its child: the bare
# interpreter and child.py loading (~50 ms idle, measured up to ~0.5 s on this
# loaded 2-core machine), not the task's own imports, which count in its timeout.
# Higher lets a hung cold start go on longer; lower fails tasks on a busy machine
# for what their code did not do.
STARTUP_ALLOWANCE = 2.0

_SEQ = struct.Struct("<Q")
_MORE: Any = object()  # ChildSlot._answer: a message that is not the call's answer
# The child loads child.py and transfer.py by path: importing the dagexec package
# would cost it ~3x a bare interpreter's start-up (measured 215 ms vs 55 ms, loaded).
_BOOT = (
    "import sys, importlib.util as u\n"
    "def load(name, path):\n"
    "    spec = u.spec_from_file_location(name, path)\n"
    "    module = sys.modules[name] = u.module_from_spec(spec)\n"
    "    spec.loader.exec_module(module)\n"
    "    return module\n"
    "load('_dagexec_transfer', sys.argv[6])\n"
    "load('_dagexec_child', sys.argv[7]).main(*map(int, sys.argv[1:6]))\n"
)


class ChildSlot:
    """A worker thread's child process: started on first use, replaced when it dies.

    A call costs the worker thread one ``write`` (the request), one ``poll`` (the
    wait, which wakes every :data:`_TICK` to look at the task's token) and, for a
    reply up to 64 KiB, one ``read``: nothing else per call touches the kernel
    (whether the child still lives shows as a broken pipe or an end of file, and
    is checked by ``waitpid`` only at a tick).
    """

    __slots__ = (
        "__weakref__",
        "busy",
        "deadline",
        "early",
        "idle_since",
        "inherited",
        "life",
        "loaded",
        "place_due",
        "poller",
        "proc",
        "reader",
        "requests",
        "run_key",
        "sender",
        "sent_logs",
        "sent_path",
        "sent_place",
        "seq",
        "shared",
        "stops",
        "tag",
        "turn",
        "waiting",
    )

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.requests = self.stops = self.life = -1
        self.reader: Reader | None = None
        self.poller: select.poll | None = None
        self.seq = 0  # the last call sent
        self.waiting = 0  # the call whose answer is awaited (seq - 1 if one went early)
        self.early: early.EarlyCall | None = None  # a call sent before its turn
        self.turn: early.EarlyCall | None = None  # one sent early, waited for now
        self.sender: early.Sender | None = None  # its worker's, while EARLY_SEND is on
        self.busy = False  # a call was sent and its answer not read yet
        self.deadline: float | None = None  # the call's, if its task has a timeout
        self.tag = ""  # shared-memory file names of this child's calls start so
        self.sent_path: list[str] | None = None  # sys.path as the child has it
        self.sent_logs: tuple[int, str | None] | None = None  # what it streams back
        self.loaded: set[str] = set()  # modules the child loaded from their file
        self.shared = False  # checked out of the pool: close() checks it back in
        self.idle_since = 0.0  # when it was checked in (time.monotonic())
        self.run_key: object = None  # the run it was last brought up to date for
        # The directory and environment the child has, and those to send if new.
        self.sent_place: tuple[str | None, dict[Any, Any]] | None = None
        self.place_due: tuple[str | None, dict[Any, Any]] | None = None
        self.inherited = Inherited()  # the parent's files, directory, modules' specs

    def start(self) -> None:
        """Start a fresh child: a bare interpreter loading child.py (~50 ms)."""
        sweep_segments()  # the first child of this program: those of dead parents go
        self.proc, req_w, rep_r, stop_w, life_w = spawn(_BOOT)
        self.requests, self.stops, self.life = req_w, stop_w, life_w
        self.reader = Reader(rep_r)
        self.poller = select.poll()
        self.poller.register(rep_r, select.POLLIN)
        self.tag = f"{SEGMENT_PREFIX}{os.getpid()}-{self.proc.pid}-"
        self.sent_path = self.sent_logs = self.place_due = None
        self.sent_place = current_place()  # it inherits them
        self.inherited = inherited(self.sent_place[0])
        self.loaded = set()
        alive(self)

    def run(
        self,
        call: IsolatedCall,
        dep_values: tuple[Any, ...],
        info: CurrentTask,
        run_key: object = None,
    ) -> Any:
        """Send the call, wait for its answer, return the value or raise the error.

        ``run_key`` names the run sending it (its stop flag): the child is brought
        up to date once per run (:func:`.sharing.bring_up_to_date`); None: at every call.
        """
        if self.early is not None:  # sent early, and not this call: it must not run
            early.clear(self)
        if run_key is None or run_key is not self.run_key:
            bring_up_to_date(self, run_key)
        try:
            data, buffers = dumps((*parts(call.call), lift(dep_values)))
        except Exception as exc:
            raise unpicklable(call, dep_values, info.name, exc) from None
        shm = shm_dir()
        self.seq += 1
        in_path = None
        name = travelling_name(info.name)
        logs = child_wanted()
        for retry in (False, True):
            cold = self.proc is None
            if cold:
                self.start()
            extra = extra_for(self, call, data)
            meta = (CALL, self.seq, name, info.attempt, shm, extra, False)
            in_path = f"{shm}/{self.tag}{self.seq}-in" if shm and buffers else None
            self.deadline = self.deadline_for(call, cold)
            try:
                self._tell(logs)
                shared = send(self.requests, meta, data, buffers, in_path)
                self.busy, self.waiting = True, self.seq
                break
            except OSError:  # the pipe broke: the child died since its last call
                unlink_quietly(in_path)
                if retry:
                    del data, buffers
                    self._crashed(info, shm)
                # It died idle (killed from outside, out of memory): this call never
                # reached it, so a new child takes it.
                self.kill()
        del data, buffers
        return self.finish(call, info, shm, extra, in_path if shared else None)

    def finish(
        self,
        call: IsolatedCall,
        info: CurrentTask,
        shm: str | None,
        extra: tuple[list[str] | None, dict[str, tuple[str, ...]]] | None,
        in_path: str | None = None,
    ) -> Any:
        """Wait for the answer to the call sent (unlinking its ``in_path`` after)."""
        sender = self.sender
        if sender is not None:
            sender.begin(self)  # the next process task may go early, while this one runs
        try:
            return self._wait(call, info, shm, extra)
        except BaseException:
            # Anything else than its answer ended the wait (a KeyboardInterrupt on a
            # caller's thread, say): the answer still coming must not be read as the
            # next call's, so the child goes (a no-op if it went already).
            if self.proc is not None and self.busy:
                self.kill(shm)
            raise
        finally:  # read by now, or the child is gone: unlinked either way
            if sender is not None:
                sender.end(self)
            unlink_quietly(in_path)

    def _tell(self, logs: tuple[int, str | None] | None) -> None:
        """Send what the child must know before the call, if it changed: the log
        records to stream back (run(logs=...)), a new user's directory and environment."""
        if logs != self.sent_logs:
            send(self.requests, (LOGS, logs), b"", [], None)
            self.sent_logs = logs
        if self.place_due is not None:
            send(self.requests, (PLACE, *self.place_due), b"", [], None)
            self.sent_place, self.place_due = self.place_due, None

    def deadline_for(self, call: IsolatedCall, cold: bool) -> float | None:
        """The attempt's one deadline (``time.monotonic()``), taken as its call is sent:
        its task's timeout, plus :data:`STARTUP_ALLOWANCE` if the call starts the
        child. Everything after counts: the call's journey, the child's import of
        the task's module, the unpickling of its arguments, the call. None: no timeout.
        """
        if call.timeout is None:
            return None
        return time.monotonic() + call.timeout + (STARTUP_ALLOWANCE if cold else 0.0)

    def time_out(self, call: IsolatedCall, info: CurrentTask, shm: str | None) -> NoReturn:
        """The attempt's deadline passed: kill the child and its group, fail with
        TaskTimeout. The one place a process task times out."""
        assert call.timeout is not None
        self.kill(shm)
        error = TaskTimeout(info.name, call.timeout, info.attempt)
        error.killed = True
        raise error

    def _wait(
        self,
        call: IsolatedCall,
        info: CurrentTask,
        shm: str | None,
        extra: tuple[list[str] | None, dict[str, tuple[str, ...]]] | None,
    ) -> Any:
        reader, poller = self.reader, self.poller
        assert reader is not None and poller is not None
        told = False
        next_tick = time.monotonic() + _TICK
        while True:
            deadline = self.deadline  # an early call's is set when it began
            wait = _TICK if deadline is None else min(_TICK, max(0.0, deadline - time.monotonic()))
            if reader.has_frame() or self._ready(poller.poll(wait * 1000.0)):
                if deadline is not None and time.monotonic() >= deadline:
                    self.time_out(call, info, shm)  # an answer past it is never used
                value = self._answer(reader, info, shm, extra)
                if value is not _MORE:
                    return value
                # A child that logs without pause keeps the poll answering: look at
                # the token and the child all the same, every _TICK.
                if time.monotonic() < next_tick:
                    continue
            told = self._tick(call, info, shm, told)
            next_tick = time.monotonic() + _TICK

    def _ready(self, events: list[tuple[int, int]]) -> bool:
        """Whether the reply pipe has something to read; the inbox's wake-up, which
        shares the poll while a call may go early, is the sender's to handle."""
        sender = self.sender
        if sender is None or not events:
            return bool(events)
        return sender.woken(self, events)

    def _answer(
        self,
        reader: Reader,
        info: CurrentTask,
        shm: str | None,
        extra: tuple[list[str] | None, dict[str, tuple[str, ...]]] | None,
    ) -> Any:
        """Read one message: the call's value (raise its error), or :data:`_MORE`
        for a message kind that is not final (handled here: a log record of
        run(logs=...), kept as it comes)."""
        try:
            meta, data, buffers = receive(reader, unlink=True)
        except EOFError:
            self._crashed(info, shm)
        if meta[0] == LOG:
            from_child(data)
            return _MORE
        if meta[0] == BEGAN or meta[0] == DROPPED:  # of a call sent early
            early.note(self, meta)
            return _MORE
        self.busy = False
        if meta[0] == VALUE:
            try:
                return pickle.loads(data, buffers=buffers)[0]
            except Exception as exc:
                raise RuntimeError(
                    f"task {describe(info.name)}: the value its child process sent "
                    f"back cannot be unpickled here: {type(exc).__name__}: {exc}; "
                    "return a value whose classes the parent can import"
                ) from exc
        if extra is not None:
            # Perhaps a module failed to load there: send it again next time.
            self.loaded.difference_update(extra[1])
        error = rebuilt_error(info.name, meta[1], meta[2], data, buffers)
        del data, buffers
        raise error

    def _tick(self, call: IsolatedCall, info: CurrentTask, shm: str | None, told: bool) -> bool:
        """No answer yet: is the child alive, the run stopping, the deadline past?
        Whether a cleanup task's child was told of the stop, now."""
        proc, poller = self.proc, self.poller
        assert proc is not None and poller is not None
        if proc.poll() is not None and not poller.poll(0):
            # Dead, and the pipe still open: a process it started holds its end.
            self._crashed(info, shm)
        if info.cancelled.is_set():
            if not call.cleanup:
                self.kill(shm)
                raise Cancelled(
                    f"task {describe(info.name)} (attempt {info.attempt}) was stopped "
                    "while it ran in a child process (the run is stopping: Ctrl-C, "
                    "cancel() or a failure); the child and its process group were killed"
                )
            if not told:  # let it see current_task().cancelled, and finish
                told = True
                with contextlib.suppress(OSError):  # died: the next poll sees EOF
                    os.write(self.stops, _SEQ.pack(self.waiting))
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.time_out(call, info, shm)
        if self.sender is not None:
            self.sender.tick(self)
        return told

    def _crashed(self, info: CurrentTask, shm: str | None) -> NoReturn:
        proc = self.proc
        assert proc is not None
        pid = proc.pid
        # Its exit code is fixed once it began to exit, which its closed pipe says:
        # killing its group first (what it started) leaves that code as it was.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        code = proc.wait()
        self.kill(shm)
        raise WorkerCrashed(info.name, code, pid)

    def kill(self, shm: str | None = None) -> None:
        """Kill the child and its process group now and reap it; the next call starts
        a new one. With ``shm``, unlink the shared-memory file its reply to the last
        call may have left there."""
        proc = self.proc
        if proc is None:
            return
        end_group(proc)
        if shm:
            unlink_quietly(f"{shm}/{self.tag}{self.waiting}-out")
        self._discard()

    def close(self) -> None:
        """Done with the child: a shared one goes back to the pool of idle children
        (:func:`.sharing.check_in`), any other ends (:meth:`end`)."""
        if self.early is not None:  # cannot happen: a worker runs its next item first
            early.clear(self)
        self.sender = None  # its worker's (which holds the worker's inbox): not pooled
        if self.shared:
            check_in(self)
        else:
            self.end()

    def end(self) -> None:
        """Let the child exit (it ends when its request pipe closes, and kills its
        process group as it goes); kill it and its group if slow."""
        proc = self.proc
        if proc is None:
            return
        os.close(self.requests)
        self.requests = -1
        try:
            proc.wait(timeout=_CLOSE_GRACE)
        except subprocess.TimeoutExpired:
            end_group(proc)
        self._discard()

    def _discard(self) -> None:
        reader = self.reader
        for fd in (self.requests, -1 if reader is None else reader.fd, self.stops, self.life):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.requests = self.stops = self.life = -1
        self.reader = None
        self.busy = False
        self.early = None  # sent early, never begun (no BEGAN came): its worker still has it
        self.proc = None
        self.poller = None
        gone(self)
