"""What the run state machine tells its observers, and how a chain ended.

Kept apart from the wire (:mod:`dagexec._engine.wire`) so the pure state package
needs nothing that knows threads: the state machine appends :class:`Event` s,
and the engine hands them to the trace and the callbacks.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "DISPATCH",
    "END",
    "EXPAND",
    "READY",
    "RETRY",
    "START",
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
# EXPAND: a map made its items. TIMEOUT: an attempt ran past its timeout= (a
# RETRY or an END follows at once).
READY, DISPATCH, START, END, RETRY, EXPAND, TIMEOUT = range(7)


class Event(NamedTuple):
    """Something that happened to ``task``, for the trace and the callbacks.

    ``state`` is the final state code (END only); ``worker`` is -1 for a task
    that never ran; ``started``/``ended`` are the worker's stamps (END only). For
    EXPAND, ``task`` is the map and ``state`` the number of its items; for RETRY
    and TIMEOUT, ``state`` is the number of the attempt that failed.
    """

    kind: int
    task: int
    worker: int = -1
    state: int = 0
    started: float = 0.0
    ended: float = 0.0
