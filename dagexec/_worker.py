"""The worker loop: take a task from my inbox, run it, report. Knows nothing of graphs.

A worker owns nothing shared. Each work item carries everything it needs,
including where to report, so a run that was abandoned (Ctrl-C) can never
deliver a late result into the next run on the same executor: its reports go to
its own results queue, which nobody reads any more.

Reporting is a ``put`` on an unbounded ``SimpleQueue``: it never blocks, so a
worker cannot wait on the scheduler while the scheduler waits on it.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from time import perf_counter
from typing import Any

__all__ = ["DONE", "FAILED", "NOTIFY_START", "STARTED", "STOP", "TIMED", "WorkItem", "worker_loop"]

# Message kinds a worker reports: (worker_id, task, kind, value_or_exc, t_start, t_end).
DONE, FAILED, STARTED = 0, 1, 2

# Item flags: extra reporting a run asked for. Off by default, so a run without
# tracing or callbacks pays nothing for them.
NOTIFY_START = 1
TIMED = 2

# Sentinel telling a worker to exit once it reaches it in its inbox.
STOP = None

Report = Callable[[tuple[int, int, int, Any, float, float]], None]
WorkItem = tuple[Report, int, Callable[..., Any], tuple[Any, ...], int]


def worker_loop(worker_id: int, inbox: queue.Queue[WorkItem | None]) -> None:
    """Run items from ``inbox`` until :data:`STOP`; report every outcome, never raise.

    Any ``BaseException`` from a task (``SystemExit`` and ``KeyboardInterrupt``
    included) is reported like any failure, so a worker is never killed silently.
    """
    get = inbox.get
    while True:
        item = get()
        if item is STOP:
            return
        report, task, fn, args, flags = item
        # Drop every reference we can before running and after reporting: an idle
        # worker must not keep a large argument or result alive.
        del item
        if flags & NOTIFY_START:
            report((worker_id, task, STARTED, None, 0.0, 0.0))
        started = perf_counter() if flags & TIMED else 0.0
        try:
            value = fn(*args)
        except BaseException as exc:  # reported, re-raised in the caller
            del args
            ended = perf_counter() if flags & TIMED else 0.0
            report((worker_id, task, FAILED, exc, started, ended))
            del exc  # the traceback would keep the task's frames alive
        else:
            del args
            ended = perf_counter() if flags & TIMED else 0.0
            report((worker_id, task, DONE, value, started, ended))
            del value
        del report, fn
