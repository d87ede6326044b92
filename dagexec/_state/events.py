"""What the run state machine tells its observers, and how a chain ended.

Kept apart from the wire (:mod:`dagexec._engine.wire`) so the pure state package
needs nothing that knows threads: the state machine appends :class:`Event` s,
and the engine hands them to the trace and the callbacks.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "ABANDONED",
    "DISPATCH",
    "END",
    "EXPAND",
    "LET_GO",
    "READY",
    "RELEASE",
    "RELEASE_HOW",
    "RETRY",
    "RETURNED",
    "START",
    "TAKEN_BACK",
    "TIMED_OUT",
    "TIMEOUT",
    "ChainEnd",
    "Event",
]


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
# TIMEOUT: an attempt ran past its timeout= (a RETRY or an END follows at once).
READY, DISPATCH, START, END, RETRY, EXPAND, RELEASE, TIMEOUT = range(8)

# RELEASE's ``state``: how the attempt let go (names as ``on_attempt_release`` gets them).
RETURNED, TAKEN_BACK, ABANDONED, LET_GO = range(4)
RELEASE_HOW = ("returned", "taken back", "abandoned", "timed out")

# RETRY's ``state`` for an attempt that failed by its timeout (else FAILED).
TIMED_OUT = 255


class Event(NamedTuple):
    """Something that happened to ``task``, for the trace and the callbacks.

    ``state`` is the final state code (END only); ``worker`` is -1 for a task
    that never ran; ``started``/``ended`` are the worker's stamps (END only). For
    EXPAND, ``task`` is the map and ``state`` the number of its items.
    ``attempt`` is the attempt's number for DISPATCH, RETRY, RELEASE and TIMEOUT.
    """

    kind: int
    task: int
    worker: int = -1
    state: int = 0
    started: float = 0.0
    ended: float = 0.0
    attempt: int = 1
