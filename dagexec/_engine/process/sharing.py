"""Children shared by every executor and ``dagexec.run`` of one program.

A worker thread checks a child out of one process-wide pool of idle children
(:func:`check_out`) at its first process task, and checks it back in when it
exits (:func:`check_in`: ``Executor.shutdown``, the end of a ``dagexec.run``, a
dropped executor's workers ending). A second ``dagexec.run`` so finds its
children started and warm. The rules:

* **Never more children than workers need.** A child is started only when a
  worker wants one and none is idle; so the children alive never outnumber the
  most worker threads that wanted one at once. A worker never waits for a child:
  one another executor holds is not idle, and a new child is started instead.
* **Nothing of an earlier user carries over** that the parent can see changed.
  Once per run a child is brought up to date (:func:`stale_modules`,
  :func:`current_place`): the working directory and the environment variables
  are sent again (a ``PLACE`` message: a task may have changed the child's, so
  what the parent sent last says nothing), and ``sys.path`` with the next call;
  a child that cannot follow the parent (:func:`can_follow`: its output went to
  other files, its directory is gone or too deep) is ended, and a new one started;
  a module the parent reloaded (``importlib.reload``, a notebook's autoreload:
  its ``__spec__`` is a new object), or removed and imported again, since the
  child started ends that child, and the call starts a new one, so old code is
  never run under a checkpoint identity computed from the new. What a task did
  to its child's globals stays, as it did across the runs of one executor.
* **Idle children end** when they have been idle :data:`IDLE_TIMEOUT` seconds, at
  the next check-out or check-in (no background thread watches them), and at
  interpreter exit (:func:`end_idle_children`, entered by the pool's exit hook),
  letting each close its process group as it goes.

Thread-safe on its own (one lock around the idle list); a checked-out slot is
its worker thread's alone, as before.
"""

from __future__ import annotations

import atexit
import contextlib
import operator
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from itertools import repeat
from typing import Any, Protocol, TypeVar, cast

from .lifecycle import end_group

__all__ = [
    "IDLE_TIMEOUT",
    "Inherited",
    "alive",
    "bring_up_to_date",
    "check_in",
    "check_out",
    "current_place",
    "end_idle_children",
    "gone",
    "idle_children",
    "inherited",
    "live_children",
    "stale_modules",
]

# How long an idle child is kept for a later executor or run. Longer keeps a
# notebook's children warm between cells for more memory held (a child holds its
# imports: tens of MB); shorter starts children again more often.
IDLE_TIMEOUT = 120.0
# How long an idle child is given to exit on its own when it is ended.
_END_GRACE = 1.0


class ChildSlot(Protocol):
    """What the pool uses of a :class:`.process_pool.ChildSlot` (named by its
    attributes: that module imports this one)."""

    proc: subprocess.Popen[bytes] | None
    requests: int
    busy: bool
    shared: bool
    idle_since: float
    run_key: object

    stops: int
    life: int
    reader: Any
    inherited: Inherited
    place_due: Any
    sent_path: list[str] | None

    def kill(self) -> None: ...

    def end(self) -> None: ...


_Slot = TypeVar("_Slot", bound=ChildSlot)

_idle: list[ChildSlot] = []  # most recently checked in last
_lock = threading.Lock()
_MISSING: Any = object()
# Every slot whose child is alive, idle or not, so that interpreter exit ends them.
_live: weakref.WeakSet[ChildSlot] = weakref.WeakSet()
_exit_hook_installed = False


def alive(slot: ChildSlot) -> None:
    """``slot`` started a child: it must not outlive the program."""
    global _exit_hook_installed
    with _lock:
        _live.add(slot)
        if not _exit_hook_installed:
            atexit.register(_end_all)
            _exit_hook_installed = True


def gone(slot: ChildSlot) -> None:
    """``slot``'s child was reaped."""
    with _lock:
        _live.discard(slot)


def live_children() -> list[int]:
    """The pids of every child process alive now (for tests and diagnostics)."""
    with _lock:
        return [s.proc.pid for s in list(_live) if s.proc is not None]


def _forget_after_fork() -> None:
    """In a process forked from this one (``os.fork``, multiprocessing's ``fork``):
    the children are the parent's, not this process's. It must never hand one out
    (two parents would talk over one pipe) nor end one at its own exit; its own
    process tasks start children of their own."""
    global _lock, _live, _exit_hook_installed
    _lock = threading.Lock()  # another thread may have held it at the fork
    for slot in list(_live):
        # Its copies of the pipes would keep the children from seeing their parent's
        # exit or death (their request and life pipes never reach end of file).
        with contextlib.suppress(Exception):
            _forsake(slot)
    _idle.clear()
    _live = weakref.WeakSet()
    if _exit_hook_installed:
        atexit.unregister(_end_all)
        _exit_hook_installed = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _end_all() -> None:
    """At interpreter exit: no child outlives its parent (idle ones are let exit)."""
    end_idle_children()
    with _lock:
        slots = list(_live)
    for slot in slots:
        with contextlib.suppress(Exception):
            slot.kill()


def idle_children() -> list[int]:
    """The pids of the idle children, oldest first (for tests and diagnostics)."""
    with _lock:
        return [s.proc.pid for s in _idle if s.proc is not None]


def check_out(new: Callable[[], _Slot]) -> _Slot:
    """An idle child for a worker thread (the one used last), or a new slot, whose
    child starts with its first call. Never waits."""
    now = time.monotonic()
    with _lock:
        stale = _take_stale(now)
        slot = cast("_Slot", _idle.pop()) if _idle else None
    _end(stale)
    if slot is None:
        slot = new()
    slot.shared = True
    return slot


def check_in(slot: ChildSlot) -> None:
    """Take back a worker's child: idle for the next worker, if it is healthy."""
    slot.run_key = None  # keeps no run alive
    if slot.proc is None or slot.busy or slot.proc.poll() is not None:
        slot.kill()
        return
    now = slot.idle_since = time.monotonic()
    with _lock:
        stale = _take_stale(now)
        _idle.append(slot)
    _end(stale)


def end_idle_children() -> None:
    """End every idle child now, each with its process group (at interpreter exit)."""
    with _lock:
        slots = _idle[:]
        _idle.clear()
    _end(slots)


def _take_stale(now: float) -> list[ChildSlot]:
    """Remove and return the children idle longer than :data:`IDLE_TIMEOUT` (under
    the lock; the oldest are first)."""
    n = 0
    while n < len(_idle) and now - _idle[n].idle_since >= IDLE_TIMEOUT:
        n += 1
    stale = _idle[:n]
    del _idle[:n]
    return stale


def _end(slots: list[ChildSlot]) -> None:
    """Let ``slots``' children exit (each ends when its request pipe closes, and
    takes its group with it), all at once; kill those that are slow."""
    for slot in slots:
        if slot.requests >= 0:
            os.close(slot.requests)
            slot.requests = -1
    deadline = time.monotonic() + _END_GRACE  # one grace for all, not one each
    for slot in slots:
        proc = slot.proc
        if proc is not None:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                end_group(proc)
        slot.kill()


# The longest working directory ``chdir`` takes in one call (Linux's PATH_MAX): a
# child started in a deeper one inherited it, and cannot be sent into one.
_PATH_MAX = 4096


def output_files() -> tuple[tuple[int, int] | None, ...]:
    """Which files the parent's standard output and error are now (device, inode):
    a child writes to those it inherited when it started, so one started before
    the parent redirected them (pytest's capture, a log rotation) writes elsewhere."""
    ids: list[tuple[int, int] | None] = []
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            ids.append(None)
        else:
            ids.append((st.st_dev, st.st_ino))
    return tuple(ids)


def can_follow(born_outputs: object, born_cwd: str | None, cwd: str | None) -> bool:
    """Whether a child started with ``born_outputs`` in ``born_cwd`` can be brought to
    the parent's place now: not if the parent's output went to other files since
    (a child cannot be handed the parent's descriptors), nor if the parent's
    directory was removed or is too deep to enter in one ``chdir`` (a new child
    inherits it as it is)."""
    if output_files() != born_outputs:
        return False
    if cwd == born_cwd:
        return True
    return cwd is not None and len(os.fsencode(cwd)) < _PATH_MAX


def current_place() -> tuple[str | None, dict[Any, Any]]:
    """Where a call must run: the parent's working directory (None if it was
    removed) and its environment, as bytes (what ``os.environb`` holds)."""
    try:
        cwd: str | None = os.getcwd()
    except OSError:
        cwd = None
    data = getattr(os.environ, "_data", None)  # CPython: bytes -> bytes, no decoding
    env = dict(data) if isinstance(data, dict) else dict(os.environb)
    return cwd, env


class Inherited:
    """What a child inherited from the parent when it started, and what it saw of
    the parent's modules since: its output files and working directory (which
    :func:`can_follow` compares with the parent's now), and the modules'
    ``__spec__`` objects by name and in ``sys.modules``' order, which a run checks
    in one C-level pass when no module was imported or removed since (the usual
    case: a few hundred us less per run in a program of a few thousand modules)."""

    __slots__ = ("by_name", "cwd", "in_order", "outputs")

    def __init__(self, cwd: str | None = None) -> None:
        self.by_name: dict[str, Any] = {}
        self.in_order: list[Any] = []
        self.outputs: object = None
        self.cwd = cwd


def inherited(cwd: str | None) -> Inherited:
    """What a child started now in ``cwd`` inherits: a reload makes a new ``__spec__``."""
    seen = Inherited(cwd)
    seen.outputs = output_files()
    stale_modules(seen)
    return seen


def bring_up_to_date(slot: ChildSlot, run_key: object) -> None:
    """Bring a child up to date for a new run: one that may hold a module the
    parent reloaded since, or that cannot follow the parent's place, is ended (the
    call starts a new one); the directory, the environment and ``sys.path`` are
    sent with the call, whatever was sent before (a task of the last run may have
    moved it)."""
    slot.run_key = run_key
    if slot.proc is None:
        return
    place = current_place()
    born = slot.inherited
    if stale_modules(born) or not can_follow(born.outputs, born.cwd, place[0]):
        slot.end()
        return
    slot.place_due = place
    slot.sent_path = None


def _forsake(slot: ChildSlot) -> None:
    """In a forked process: close this copy of a child's pipes and forget the
    child, which is the parent's to end, not this process's."""
    reader = slot.reader
    for fd in (slot.requests, slot.stops, slot.life, -1 if reader is None else reader.fd):
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
    slot.requests = slot.stops = slot.life = -1
    slot.reader = None
    slot.proc = None


def stale_modules(seen: Inherited) -> bool:
    """True if a module in ``seen`` was reloaded (or imported again) since; modules
    imported for the first time since are added to ``seen``."""
    values = list(sys.modules.values())
    specs = list(map(getattr, values, repeat("__spec__", len(values)), repeat(None, len(values))))
    if len(specs) == len(seen.in_order) and not any(map(operator.is_not, specs, seen.in_order)):
        return False
    by_name = seen.by_name
    for name, module in list(sys.modules.items()):
        spec = _spec(module)
        old = by_name.get(name, _MISSING)
        if old is spec:
            continue
        if old is not _MISSING:
            return True
        by_name[name] = spec
    seen.in_order = specs
    return False


def _spec(module: object) -> Any:
    return getattr(module, "__spec__", None)
