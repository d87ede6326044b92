"""What moves between threads: items for workers, reports back.

One word per concept:

* a **job** is one task handed to a worker; a **chain** is a linear run of tasks
  handed over as one item (see ``_plan._chain_links``). Both are *items*: what
  an inbox holds, besides :data:`STOP`.
* a **report** is what a worker puts on the results queue.
* an **event** (:mod:`dagexec._state.events`) is what the run state machine
  emits for the trace and the callbacks.

Tuples, not classes: an item and a report are built once per task on the hot
path, and a tuple is the cheapest immutable record Python has. Immutable
matters: a job is read by a worker while the scheduler may still hold it (a
balance move), and nothing here relies on the GIL. The two built for every task,
a :data:`Job` and a :data:`Report`, are plain tuples: a ``NamedTuple``'s
constructor is a Python function, ~250 ns against ~40 ns for a plain tuple
(CPython 3.11), paid twice per task. The rarer ones (a :class:`Chain`, once per
chain; a :class:`ChainEnd`; an :class:`Event`, only when someone watches) are
``NamedTuple`` s.

Their layouts are known here (a report's in :mod:`dagexec._state.events`, which
the state machine reads, re-exported here) and nowhere else: the type aliases
let mypy check every tuple built or unpacked, and code that reads one field
indexes it with the ``J_*`` and ``R_*`` constants, never a bare number
(``tests/test_wire_layout.py`` walks the package for one). The constants are
``Final`` ints, so mypy still knows each field's type, and reading one costs no
call: an accessor function measured 51 ns a read against 17 ns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import Context
from enum import Enum
from typing import Any, Final, NamedTuple

from ..._state.events import R_ENDED, R_KIND, R_PAYLOAD, R_STARTED, R_TASK, R_WORKER, Report

__all__ = [
    "ABORT",
    "CHAIN",
    "DONE",
    "FAILED",
    "FREED",
    "J_ARGS",
    "J_CONTEXT",
    "J_FLAGS",
    "J_FN",
    "J_REPORT",
    "J_STOP",
    "J_TASK",
    "MEMBER",
    "NOTIFY_START",
    "NOT_STARTED",
    "R_ENDED",
    "R_KIND",
    "R_PAYLOAD",
    "R_STARTED",
    "R_TASK",
    "R_WORKER",
    "STARTED",
    "STOP",
    "TIMED",
    "Abort",
    "Chain",
    "Item",
    "Job",
    "Message",
    "Report",
]

# Report kinds. A chain reports each member but the last as MEMBER when it is
# timed (someone watches task ends), and always ends with one CHAIN report.
# FREED is not a worker's: an abandoned attempt of an earlier run returned, and
# its resources are free again (``task`` is its LiveAttempt; see attempts.py).
# NOT_STARTED: the worker found the item's stop flag set when it reached it, and
# did not start it (for a chain: its first member); the run cancels it.
DONE, FAILED, STARTED, MEMBER, CHAIN, FREED, NOT_STARTED = range(7)

# Item flags: extra reporting a run asked for. Off by default, so a run without
# tracing or callbacks pays nothing for them.
NOTIFY_START = 1
TIMED = 2

# Sentinel telling a worker to exit once it reaches it in its inbox.
STOP = None


Reporter = Callable[[Report], None]

Job = tuple[
    Reporter, int, Callable[..., Any], tuple[Any, ...], int, threading.Event, Context | None
]
"""One task for a worker, ``(report, task, fn, args, flags, stop, context)``: it
runs ``fn(*args)`` and reports through ``report``.

It carries the run's own ``report`` and ``stop``, so a worker needs nothing
else, and a late report of an abandoned run goes to that run's queue only.
A worker starts no item whose ``stop`` is set (it reports it NOT_STARTED):
that is what makes "nothing starts after a cancel" hold without waiting for
the scheduler to take the queued items back. A cleanup task's item carries
the run's *hard* stop instead, so that it still runs after a cancel or a
first Ctrl-C.
``context`` is the caller's contextvars (None when empty), copied per task.
"""

J_REPORT: Final = 0
J_TASK: Final = 1
J_FN: Final = 2
J_ARGS: Final = 3
J_FLAGS: Final = 4
J_STOP: Final = 5
J_CONTEXT: Final = 6


class Abort(Enum):
    """The one message on a results queue that is not a :data:`Report`."""

    ABORT = "ABORT"

    def __repr__(self) -> str:
        return "ABORT"


ABORT: Final = Abort.ABORT
"""Put on a run's results queue to stop the run (Ctrl-C, cancel, the run's timeout).

A one-member enum, so that ``msg is ABORT`` tells mypy the rest is a Report."""

Message = Report | Abort
"""What a run's results queue carries: ``queue.SimpleQueue[Message]``."""


class Chain(NamedTuple):
    """Tasks run back to back on one worker, each on the previous one's value.

    Holds one in-flight slot. The worker checks ``stop`` between members.
    """

    report: Reporter
    tasks: tuple[int, ...]
    fns: tuple[Callable[..., Any], ...]
    args: tuple[Any, ...]
    flags: int
    stop: threading.Event
    context: Context | None


Item = Job | Chain
