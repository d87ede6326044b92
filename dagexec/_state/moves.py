"""The legal moves of a task's state, as data, and a checker of a run against them.

:data:`MOVES` is every move a task's state may make, each with the reason it
happens; nothing else is a move. A state not listed as a source is final.
:class:`MoveChecker` holds a run to the table and to the run's invariants; the
property tests call it after every step of the run (``tests/test_state_moves.py``
and the serial world of ``tests/test_runstate_world.py``). Nothing on a run's
path imports this module: a run pays nothing for it (tests/test_state_moves.py).

A checker sees a run between the machine's steps, so a task that moved twice in
one step (a chain member that went on and returned in one batch of reports) is
seen to move once; the table lists such a move too (``HELD -> DONE``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .._core.result import (
    CANCELLED,
    DONE,
    FAILED,
    HELD,
    IN_FLIGHT,
    READY,
    SKIPPED,
    WAITING,
)
from .core import RunCore

__all__ = ["FINAL", "MOVES", "STATE_NAMES", "BrokenRun", "MoveChecker"]

STATE_NAMES: Mapping[int, str] = {
    WAITING: "WAITING",
    READY: "READY",
    IN_FLIGHT: "IN_FLIGHT",
    HELD: "HELD",
    DONE: "DONE",
    FAILED: "FAILED",
    SKIPPED: "SKIPPED",
    CANCELLED: "CANCELLED",
}

# (from, to) -> why. Every task starts WAITING.
MOVES: Mapping[tuple[int, int], str] = {
    (WAITING, READY): "every dependency is done (make_ready), or its retry is due (wake)",
    (WAITING, HELD): "a chain member, handed out with its chain's first task",
    (WAITING, DONE): "a map gathers its items' values without running",
    (WAITING, FAILED): "a map's over value cannot be iterated",
    (WAITING, SKIPPED): "downstream of a failure (on_error='continue')",
    (WAITING, CANCELLED): "the run stopped before it was ready",
    (READY, IN_FLIGHT): "handed out (dispatch_all)",
    (READY, CANCELLED): "the run stopped before it was handed out",
    (IN_FLIGHT, DONE): "it returned",
    (IN_FLIGHT, FAILED): "it raised, or ran past its timeout, with no retry left",
    (IN_FLIGHT, WAITING): "a failed attempt waits for its retry (retries=)",
    (IN_FLIGHT, READY): "a cleanup task taken back before it started, in a stop (put_back)",
    (IN_FLIGHT, CANCELLED): "taken back before it started, or a chain member never reached",
    (HELD, IN_FLIGHT): "the chain member before it returned",
    (HELD, DONE): "the chain member before it returned, and then it did (one report)",
    (HELD, FAILED): "the chain member before it returned, and then it raised",
    (HELD, SKIPPED): "downstream of a failure (on_error='continue')",
    (HELD, CANCELLED): "its chain stopped before it ran",
}

FINAL = frozenset({DONE, FAILED, SKIPPED, CANCELLED})


class BrokenRun(AssertionError):
    """A run broke the table or one of its invariants: a bug of the state machine."""


class MoveChecker:
    """Checks one run after each step: every move in :data:`MOVES`, and the invariants.

    Invariants checked at every step:

    * ``unfinished`` counts the tasks not in a final state;
    * ``in_flight`` (items) is at least the number of tasks in flight (a chain
      runs one member at a time), and never more than ``peak_in_flight``;
    * no resource is held below zero or above its capacity;
    * a value is kept only while a consumer waits: a task's value is None
      unless it counts a consumer, and (outside a stop, which keeps what it
      has until the run is closed) a task not yet handed out reads it, a map
      waits to gather it, or it is a target.

    :meth:`check` with ``out`` (the heads of the items the driver holds as
    handed out and not released) also checks ``in_flight`` and the resources
    held against them exactly.
    """

    def __init__(self, run: RunCore) -> None:
        """Make it as soon as ``run`` is made: its first step (the roots made
        ready) is checked here, with nothing handed out."""
        self.run = run
        self.seen = bytes(len(run.state))  # every task starts WAITING
        self.steps = 0
        self.check([])

    def check(self, out: Iterable[int] | None = None) -> None:
        """Check the moves since the last check, and the invariants now."""
        self.steps += 1
        self._moves()
        self._counts(None if out is None else list(out))
        self._values()

    def _fail(self, what: str) -> None:
        run = self.run
        raise BrokenRun(f"after step {self.steps} ({len(run.state)} tasks): {what}")

    def _moves(self) -> None:
        state = bytes(self.run.state)
        seen = self.seen + bytes(len(state) - len(self.seen))  # map items start WAITING
        for task, (was, now) in enumerate(zip(seen, state, strict=True)):
            if was != now and (was, now) not in MOVES:
                name = self.run.names[task]
                self._fail(
                    f"task {name!r} moved {STATE_NAMES.get(was, was)} -> "
                    f"{STATE_NAMES.get(now, now)}, not a move of the table"
                )
        self.seen = state

    def _counts(self, out: list[int] | None) -> None:
        run = self.run
        state = run.state
        open_tasks = sum(1 for code in state if code not in FINAL)
        if run.unfinished != open_tasks:
            self._fail(f"unfinished is {run.unfinished}, but {open_tasks} tasks are not final")
        flying = [t for t, code in enumerate(state) if code == IN_FLIGHT]
        if run.in_flight < 0 or len(flying) > run.in_flight:
            self._fail(f"in_flight is {run.in_flight}, but {len(flying)} tasks are in flight")
        if run.in_flight > run.peak_in_flight:
            self._fail(f"in_flight {run.in_flight} is over its peak {run.peak_in_flight}")
        if out is not None and run.in_flight != len(out):
            self._fail(f"in_flight is {run.in_flight}, but the driver holds {len(out)} items")
        self._resources(out)

    def _resources(self, out: list[int] | None) -> None:
        run = self.run
        resources, needs = run.resources, run.needs
        if resources is None or needs is None:
            return
        held: list[float] = [0] * len(resources.names)
        for task in out or ():
            for r, amount in needs[task]:
                held[r] += amount
        for r, name in enumerate(resources.names):
            free, capacity = resources.free[r], resources.capacity[r]
            if not 0 <= free <= capacity:
                self._fail(f"resource {name!r}: {free} free of {capacity}")
            if out is not None and free + held[r] + resources.lent_out[r] != capacity:
                self._fail(
                    f"resource {name!r}: {free} free, {held[r]} held by the items out and "
                    f"{resources.lent_out[r]} lent do not add up to its capacity {capacity}"
                )

    def _values(self) -> None:
        run = self.run
        values, consumers = run.values, run.consumers
        kept = [t for t, value in enumerate(values) if value is not None]
        for t in kept:
            if consumers[t] <= 0:
                self._fail(f"task {run.names[t]!r} keeps its value with no consumer left")
        if run.stopping or not kept:
            return
        readers = self._readers()
        for t in kept:
            if not run.is_target[t] and t not in readers:
                self._fail(f"task {run.names[t]!r} keeps its value, but no consumer waits")

    def _readers(self) -> set[int]:
        """The tasks whose value a consumer still waits for: a dependency of a task
        not handed out yet, or an item of a map that waits to gather it."""
        run = self.run
        state = run.state
        readers: set[int] = set()
        for u, code in enumerate(state):
            if code in (WAITING, READY):
                readers.update(run.deps[u])
        fanout = run.fanout
        if fanout is not None:
            for m, span in fanout.span.items():
                if m in fanout.keep and state[m] not in FINAL:
                    readers.update(span)  # the map gathers them
        return readers
