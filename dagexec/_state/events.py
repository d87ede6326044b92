"""What the run state machine hears from workers and tells its observers.

Kept apart from the wire (:mod:`dagexec._engine.workers.wire`) so the pure state package
needs nothing that knows threads: the state machine takes :data:`Report` s
(what workers put on the results queue; its layout is here because
``RunState.ended`` reads it) and appends :class:`Event` s, and the engine hands
them to the trace and the callbacks.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

__all__ = [
    "ABANDONED",
    "DISPATCH",
    "END",
    "EXPAND",
    "KILLED",
    "LET_GO",
    "READY",
    "RELEASE",
    "RELEASE_HOW",
    "RETRY",
    "RETURNED",
    "R_ENDED",
    "R_KIND",
    "R_PAYLOAD",
    "R_STARTED",
    "R_TASK",
    "R_WORKER",
    "START",
    "TAKEN_BACK",
    "TIMED_OUT",
    "TIMEOUT",
    "ChainEnd",
    "Event",
    "Report",
]


Report = tuple[int, Any, int, Any, float, float]
"""A worker's message ``(worker, task, kind, payload, started, ended)``: ``task``
(a chain's member tuple for CHAIN) ended or began.

``kind`` is one of :mod:`dagexec._engine.workers.wire`'s report kinds. ``payload``: the
value (DONE), the exception (FAILED), a :class:`ChainEnd` (CHAIN), None otherwise
(``task`` is a chain's first member for NOT_STARTED). ``started``/``ended`` are
``perf_counter`` stamps taken on the worker in a timed run, else 0.0.

A plain tuple, built once per task (a ``NamedTuple``'s constructor is a Python
function: ~250 ns against ~40 ns). Code that reads one field indexes it with the
constants below, never a bare number (``tests/test_wire_layout.py``); they are
``Final``, so mypy knows each field's type, and a module-level int costs no call
(an accessor function measured 51 ns against 17 ns per read).
"""

R_WORKER: Final = 0
R_TASK: Final = 1
R_KIND: Final = 2
R_PAYLOAD: Final = 3
R_STARTED: Final = 4
R_ENDED: Final = 5


class ChainEnd(NamedTuple):
    """How a chain ended: ``done`` members returned; ``ok`` False if member ``done`` raised.

    ``outcome`` is the last member's value, or the exception; ``times`` holds
    ``[start, end, ...]`` per member that ran, in a timed run.
    """

    done: int
    ok: bool
    outcome: Any
    times: list[float] | None


# Event kinds, in the order a task meets them. RETRY: an attempt failed and the
# task waits for another (retries=); END comes once, with the final state.
# EXPAND: a map made its items. RELEASE: a dispatched attempt no longer holds its
# slot and resources in the run (one per DISPATCH; ``state`` says how, below).
# TIMEOUT: an attempt ran past its timeout= (a RETRY or an END follows at once);
# its ``state`` is KILLED when its child process was killed for it (isolate=
# "process"), else 0 (a thread runs on). START: an attempt began on its worker.
# Every event about an attempt (DISPATCH, START, RETRY, TIMEOUT, RELEASE) carries
# its task and its number: an attempt is (task, attempt) in every layer.
READY, DISPATCH, START, END, RETRY, EXPAND, RELEASE, TIMEOUT = range(8)

# RELEASE's ``state``: how the attempt let go (names as ``on_attempt_release`` gets them).
# KILLED: a process task's attempt timed out and its child was killed.
RETURNED, TAKEN_BACK, ABANDONED, LET_GO, KILLED = range(5)
RELEASE_HOW = ("returned", "taken back", "abandoned", "timed out", "killed")

# RETRY's ``state`` for an attempt that failed by its timeout (else FAILED).
TIMED_OUT = 255


class Event(NamedTuple):
    """Something that happened to ``task``, for the trace and the callbacks.

    ``state`` is the final state code (END), how the attempt let go (RELEASE) or
    failed (RETRY), or KILLED for a TIMEOUT whose child process was killed;
    ``worker`` is -1 for a task that never ran; ``started``/``ended`` are the
    worker's stamps (END only). ``attempt`` is the attempt's number for
    DISPATCH, START, RETRY, RELEASE and TIMEOUT. ``items`` is the
    number of a map's items (EXPAND, whose ``task`` is the map).
    """

    kind: int
    task: int
    worker: int = -1
    state: int = 0
    started: float = 0.0
    ended: float = 0.0
    attempt: int = 1
    items: int = 0
