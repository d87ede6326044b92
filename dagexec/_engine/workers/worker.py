"""The worker loop: take an item from my inbox, run it, report. Knows nothing of graphs.

A worker owns nothing shared. Each work item carries everything it needs,
including where to report and the run's stop flag, so a run that was abandoned
(Ctrl-C) can never deliver a late result into the next run on the same
executor: its reports go to its own results queue, which nobody reads any more.

Reporting is a ``put`` on an unbounded ``SimpleQueue``: it never blocks, so a
worker cannot wait on the scheduler while the scheduler waits on it.

An item is a :class:`~dagexec._engine.workers.wire.Job` (one task) or a
:class:`~dagexec._engine.workers.wire.Chain`: a linear run of tasks, each the only consumer
of the one before, run back to back and reported once (see ``_plan._chain_links``).
"""

from __future__ import annotations

import threading
from contextvars import Context
from functools import partial
from time import perf_counter
from typing import Any

from ..._core.current import Running, running_by_thread
from ..._state.events import ChainEnd
from .inbox import Inbox
from .wire import (
    CHAIN,
    DONE,
    FAILED,
    J_REPORT,
    J_TASK,
    MEMBER,
    NOT_STARTED,
    NOTIFY_START,
    STARTED,
    STOP,
    TIMED,
    Chain,
    Item,
    Job,
    Reporter,
)

__all__ = ["worker_loop"]

# Context.run unbound: ``context.copy().run`` made and freed a bound method per task.
_enter = Context.run


def worker_loop(worker_id: int, inbox: Inbox[Item | None]) -> None:
    """Run items from ``inbox`` until :data:`STOP`; report every outcome, never raise.

    Any ``BaseException`` from a task (``SystemExit`` and ``KeyboardInterrupt``
    included) is reported like any failure, so a worker is never killed silently.

    An item carrying a context (a copy of the caller's, taken once per run) runs
    each task in a fresh copy of it: the task sees the caller's ``contextvars``,
    and what it sets stays its own (a ``Context`` can be entered by one thread
    at a time, and tasks must not see each other's changes). An item without one
    (its caller's were empty; or the drain's probe) is called directly in the
    worker's own Context, which is empty too and is made afresh whenever anything
    leaves a contextvar set in it (see _loop): the same isolation, without a copy
    per task.
    """
    here = running_by_thread[threading.get_ident()] = Running()
    here.inbox = inbox
    here.refuse = partial(_refuse, worker_id)
    try:
        while True:
            own = Context()
            if not own.run(_loop, worker_id, inbox, here, own):
                break
    finally:
        del running_by_thread[threading.get_ident()]
        if here.child is not None:
            here.child.close()
        if here.early is not None:
            here.early.close()


def _loop(worker_id: int, inbox: Inbox[Item | None], here: Running, own: Context) -> bool:
    """Run items until :data:`STOP` (False), or until something left a contextvar set
    in ``own``, the Context this pass runs in (True: go on in a fresh one, so that
    no later task sees it).

    A task without a context of its own (``context`` None: its caller's was
    empty) runs in ``own`` as it is, empty, and not in a copy made and entered
    for it (measured in docs/performance.md, "the caller's empty context"). Whether ``own``
    is still empty is one length read before each item. A finalizer that the
    garbage collector runs between that read and the task's call (only an
    observed run allocates there) is seen by that task alone, as one that runs
    during a task is."""
    # An item waiting is popped straight off the inbox's deque (atomic on its own,
    # as the Inbox docstring says); only an empty inbox costs a call, to sleep. It
    # is looked at first: an IndexError raised and caught costs ~2,500 instructions,
    # and a small run's workers find their inbox empty a few times each.
    waiting = inbox.queue
    pop, wait = waiting.popleft, inbox.get
    while True:
        # Looked at before each item, not after each job: a finalizer of a value let
        # go of here (a chain member's input, a task's arguments) may set a var too;
        # and before the wait, so that what was set goes as the worker idles.
        if own:
            return True
        # A process task taken off the inbox early, perhaps sent to the child already
        # (dagexec._engine.process.early): it comes before anything still queued.
        item = here.next
        if item is not None:
            here.next = None
        elif waiting:
            try:
                item = pop()
            except IndexError:  # the driver took it back meanwhile (Balance._move)
                item = wait()
        else:
            item = wait()
        if item is STOP:
            return False
        if type(item) is Chain:  # exactly: isinstance() was ~250 instructions per job
            # Handed over in a one-slot list, so that no frame but _run_chain's
            # holds the chain's input once its first member has consumed it.
            box = [item]
            del item
            _run_chain(worker_id, box, here)
            here.stop = None
            continue
        report, task, fn, args, flags, stop, context = item
        # Drop every reference we can before running and after reporting: an idle
        # worker must not keep a large argument or result alive.
        del item
        # The run stopped since this was queued: it never starts. ``stop`` is the
        # run's Flag, read as an attribute: ``is_set()`` returns the same field
        # behind a call, a Python frame per task (see flag.py).
        if stop._flag and not _began_early(here, fn):
            del fn, args, context
            report((worker_id, task, NOT_STARTED, None, 0.0, 0.0))
            del report, stop
            continue
        started = _announce(report, worker_id, task, flags) if flags else 0.0
        here.task, here.stop = task, stop
        try:
            value = fn(*args) if context is None else _enter(context.copy(), fn, *args)
        except BaseException as exc:  # reported, re-raised in the caller
            del args
            _drop_own_frame(exc)
            state, value = FAILED, exc
        else:
            del args
            state = DONE
        ended = perf_counter() if flags & TIMED else 0.0
        report((worker_id, task, state, value, started, ended))
        del value  # a failure's traceback would keep the task's frames alive
        here.stop = None
        del report, fn, stop, context


def _announce(report: Reporter, worker_id: int, task: int, flags: int) -> float:
    """An observed run's task starts: its STARTED report, for the start hooks, and
    its start time, for the trace and ``on_task_end`` (0.0 if not timed). Out of
    _loop, which a plain run's task (no flags) passes with one test."""
    if flags & NOTIFY_START:
        report((worker_id, task, STARTED, None, 0.0, 0.0))
    return perf_counter() if flags & TIMED else 0.0


def _began_early(here: Running, fn: object) -> bool:
    """The run stopped before this item started: False (report it NOT_STARTED) unless
    it was sent to the child early and the child had begun it (see Sender.began)."""
    return here.early is not None and bool(here.early.began(fn))


def _refuse(worker_id: int, item: Job) -> None:
    """Report ``item`` NOT_STARTED: taken off the inbox early, it will never start."""
    item[J_REPORT]((worker_id, item[J_TASK], NOT_STARTED, None, 0.0, 0.0))


def _drop_own_frame(exc: BaseException) -> None:
    """Start the traceback at the task's own frame.

    The worker's frame is still running (it goes on to later tasks, even later
    runs), so leaving it in a traceback the caller keeps would pin whatever the
    worker holds at that moment; it tells the user nothing about their task.
    """
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None:
        exc.__traceback__ = tb.tb_next


def _run_chain(worker_id: int, box: list[Chain], here: Running) -> None:
    """Run a chain's members in order, each on the previous one's value.

    Stops early, before any member, once the run is stopping (a failure
    elsewhere, Ctrl-C, a cancel), so a long chain is no longer than one task in
    how late it notices; stopped before its first member, the chain is
    reported NOT_STARTED.
    In a timed run each member's end is reported as it happens, so progress,
    traces and callbacks (and whatever they hold per task) keep pace with the
    work instead of waiting for the whole chain.
    """
    report, tasks, fns, args, flags, stop, context = box.pop()
    timed = flags & TIMED
    times: list[float] | None = [] if timed else None
    value: Any = None
    done = 0
    last = len(fns) - 1
    for k, fn in enumerate(fns):
        if stop._flag:  # type: ignore[attr-defined]  # is_set()'s field (see _loop)
            if not k:
                del args, value
                report((worker_id, tasks[0], NOT_STARTED, None, 0.0, 0.0))
                return
            break
        if flags & NOTIFY_START:
            report((worker_id, tasks[k], STARTED, None, 0.0, 0.0))
        started = perf_counter() if timed else 0.0
        here.task, here.stop = tasks[k], stop
        try:
            # Each member in a Context of its own, an empty one if the caller's was
            # (None): none sees what an earlier one set.
            value = _enter(Context() if context is None else context.copy(), fn, *args)
        except BaseException as exc:
            # This frame ends here but stays reachable from exc's traceback:
            # it must not keep the previous member's value alive.
            args = ()
            value = None
            _drop_own_frame(exc)
            if times is not None:
                times += (started, perf_counter())
            report((worker_id, tasks, CHAIN, ChainEnd(done, False, exc, times), 0.0, 0.0))
            del exc
            return
        if times is not None:
            ended = perf_counter()
            times += (started, ended)
            if k < last:
                report((worker_id, tasks[k], MEMBER, None, started, ended))
        args = (value,)
        done = k + 1
    del args
    report((worker_id, tasks, CHAIN, ChainEnd(done, True, value, times), 0.0, 0.0))
