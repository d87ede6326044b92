"""When a cleanup task may start: once every ancestor has ended and none still runs.

A cleanup task (``run_if="all_done"``) is *due* once each of its own
dependencies has ended, in any state. That is not enough to start it: an
ancestor further up may still be running (a task beside a failed one, the other
items of a map whose item failed, the thread of an attempt that timed out), and
a cleanup that deletes a scratch directory must not run under them. So a due
cleanup task waits here until every one of its ancestors (map items and chain
members included) is *settled*: in a final state, with no attempt of it still
on a worker. This is the one place where a run waits for an attempt that
overran its timeout, because the user asked for it by writing a cleanup task.

It waits at most its own ``timeout=``, if it has one, counted from when it
became due: then it starts anyway, with a WARNING naming the ancestor still
running, and receives what its dependencies left (a timed-out one passes its
``TaskTimeout``). Without a timeout it waits as long as it takes.

Part of the run state machine, and as pure: the driver passes the clock in
(``RunState.now``), and re-checks happen as the machine hears of ends.

Where "an attempt is still running" comes from is :meth:`CleanupGate.attempt_began`
and :meth:`CleanupGate.attempt_returned`, and nowhere else. ``RunState`` calls
them when an item is handed out and when it is off its worker (its function
returned, or it was taken back or refused before it started); a timed-out
attempt's item is released only when its worker reports, so it counts as
running until its function really returned.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from .._core.policy import Policy
from .._core.result import CANCELLED, DONE, WAITING
from .._core.safe import task_for_message
from .fanout import Fanout

__all__ = ["CleanupGate"]


class _Walk:
    """A depth-first walk over one cleanup task's ancestors, paused at the first
    one not settled. Settled is for good (a final task never runs again and its
    attempts only return), so a resumed walk never looks back."""

    __slots__ = ("seen", "stack")

    def __init__(self, parents: list[int]) -> None:
        self.stack = parents
        self.seen = set(parents)


class GateRun(Protocol):
    """What a :class:`CleanupGate` reads of the run that owns it (a ``RunState``)."""

    @property
    def cleanup(self) -> bytearray | None:
        """1 for the run's cleanup tasks."""

    @property
    def deps(self) -> Sequence[tuple[int, ...]]:
        """Per task, its dependencies."""

    @property
    def fanout(self) -> Fanout | None:
        """The run's maps (their items are ancestors too), or None."""

    @property
    def hard(self) -> bool:
        """Whether the run stopped hard (cleanup tasks are cancelled too)."""

    @property
    def names(self) -> Sequence[Hashable]:
        """Per task, its name."""

    @property
    def now(self) -> float:
        """The driver's clock, as last told."""

    @property
    def policy(self) -> Sequence[Policy | None] | None:
        """Per task, its policy (its ``timeout=``)."""

    @property
    def state(self) -> bytearray:
        """Per task, its state code."""

    @property
    def warn(self) -> Callable[..., None]:
        """Where a warning goes."""

    def make_ready(self, task: int) -> None:
        """``task`` can run now."""


class CleanupGate:
    """The due cleanup tasks of one run that wait for their ancestors. Owned by
    its :class:`RunState`, on the same thread."""

    __slots__ = ("cleared", "deadlines", "held", "run", "running", "seq", "tasks")

    def __init__(self, run: GateRun) -> None:
        self.run = run
        cleanup = run.cleanup
        assert cleanup is not None
        self.tasks = [t for t, c in enumerate(cleanup) if c]  # the run's cleanup tasks
        self.running: dict[int, int] = {}  # task -> its attempts on workers now
        self.cleared: set[int] = set()  # cleanup tasks that passed: never held again
        self.held: dict[int, _Walk] = {}  # due cleanup tasks that wait
        self.deadlines: list[tuple[float, int, int]] = []  # heap of (due, seq, task)
        self.seq = 0

    # ------------------------------------------------------------- attempts
    def attempt_began(self, task: int) -> None:
        """An item headed by ``task`` was handed out (it may start any moment)."""
        self.running[task] = self.running.get(task, 0) + 1

    def attempt_returned(self, task: int) -> None:
        """An item headed by ``task`` is off its worker: its function returned (or
        never started). Its cleanup tasks may now go, if nothing else holds them."""
        left = self.running[task] - 1
        if left:
            self.running[task] = left
        else:
            del self.running[task]
        self.recheck()

    # ------------------------------------------------------------ the gate
    def holds(self, task: int) -> bool:
        """Whether ``task``, about to become ready, must wait here instead.

        Only a cleanup task is ever held; one that passed once is never held
        again (a retry of it goes straight back to ready).
        """
        run = self.run
        cleanup = run.cleanup
        if cleanup is None or task >= len(cleanup) or not cleanup[task]:
            return False
        if task in self.cleared:
            return False
        if task in self.held:
            return True
        walk = _Walk(self._parents(task))
        blocker = self._advance(walk)
        if blocker < 0:
            self.cleared.add(task)
            return False
        self.held[task] = walk
        policies = run.policy
        policy = None if policies is None else policies[task]
        if policy is not None and policy.timeout is not None:
            self.seq += 1
            heapq.heappush(self.deadlines, (run.now + policy.timeout, self.seq, task))
        return True

    def recheck(self) -> None:
        """Let go of the held cleanup tasks whose ancestors have all settled now."""
        if not self.held or self.run.hard:
            return
        for task in [t for t, walk in self.held.items() if self._advance(walk) < 0]:
            self._release(task)

    def expire(self, now: float) -> None:
        """Start the held cleanup tasks whose own timeout has passed at ``now``."""
        deadlines = self.deadlines
        while deadlines and deadlines[0][0] <= now:
            task = heapq.heappop(deadlines)[2]
            walk = self.held.get(task)
            if walk is None or self.run.hard:
                continue  # went already, or was cancelled
            blocker = self._advance(walk)
            if blocker >= 0:
                self.run.warn(
                    "cleanup task %s waited its timeout for %s, still running; it starts anyway",
                    task_for_message(self.run.names[task]),
                    task_for_message(self.run.names[blocker]),
                )
            self._release(task)

    def next_deadline(self) -> float | None:
        """When the first held cleanup task's timeout passes, or None."""
        deadlines, held = self.deadlines, self.held
        while deadlines and deadlines[0][2] not in held:
            heapq.heappop(deadlines)  # went already
        return deadlines[0][0] if deadlines else None

    def pending(self) -> bool:
        """Whether a cleanup task of the run has not ended yet (for an aborted run:
        whether its caller must still wait)."""
        state = self.run.state
        return any(not DONE <= state[t] <= CANCELLED for t in self.tasks)

    # ------------------------------------------------------------- internals
    def _release(self, task: int) -> None:
        del self.held[task]
        self.cleared.add(task)
        if self.run.state[task] == WAITING:  # not cancelled meanwhile
            self.run.make_ready(task)

    def _parents(self, task: int) -> list[int]:
        """What ``task`` waits on directly: its dependencies, and a map's items."""
        run = self.run
        parents = list(run.deps[task])
        fanout = run.fanout
        if fanout is not None:
            span = fanout.span.get(task)
            if span is not None:
                parents.extend(span)
        return parents

    def _settled(self, task: int) -> bool:
        return DONE <= self.run.state[task] <= CANCELLED and task not in self.running

    def _advance(self, walk: _Walk) -> int:
        """Walk on past settled ancestors; the first one not settled, or -1."""
        stack, seen = walk.stack, walk.seen
        while stack:
            task = stack[-1]
            if not self._settled(task):
                return task
            stack.pop()
            for parent in self._parents(task):
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        return -1
