"""A run whose schedule a controller chooses: the engine's side of ``dagexec.testing.explore``.

A plain run never meets this module: an exploring executor swaps the class of
each run it makes, and of its balancer, for the subclasses here
(:func:`take_control`), so the ordinary run's path has no extra test at all (the
speed gate holds).

The explored run goes in *steps*. A step starts only when nothing is in flight;
its :class:`Controller` picks one ready task, or a few that overlap, and which
worker takes each. Tasks of one step start together: each waits at a barrier in
its worker thread before its function is called (for a process task, before the
call is sent to the child; for a task with a timeout, before its STARTED report,
from which its deadline counts), so an overlap the OS rarely produces is
produced on purpose, and a hold never makes a timeout. The next step starts once
every task of this one has reported, so a step's order is exact on replay.

Chaining and the memory-aware depth are off (the exploring executor gives plans
without chains and a fixed bound); balancing never moves a task between inboxes.

Owned by the thread that drives the run, like the run whose class it replaces; the
barriers are the only thing shared with the workers.
"""

from __future__ import annotations

import contextlib
import heapq
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol

from ..._state.runstate import RunState
from ..workers.wire import (
    ABORT,
    DONE,
    NOTIFY_START,
    R_KIND,
    R_PAYLOAD,
    R_TASK,
    STARTED,
    Chain,
    Item,
    Job,
    Message,
    Report,
    Reporter,
)
from .balance import Balance
from .items import special_items, take_back
from .scheduler import Run

__all__ = ["Chooser", "Controller", "ExploringRun", "ready_in_order", "take_control"]

# The longest a held task waits for the others of its step to reach their
# barrier. They are all in flight on idle workers when it starts, so they arrive
# at once; this only keeps a bug of ours from hanging a test run forever.
_HOLD_SAFETY_SECONDS = 30.0


class Chooser(Protocol):
    """A strategy: which of the ready tasks go in the next step, on which workers."""

    def choose(
        self, ready: Sequence[Hashable], workers: int, together: Callable[[int, int], bool]
    ) -> list[tuple[int, int]]:
        """(position in ``ready``, worker) for each task of the step, workers
        distinct; none to stop the run. ``together(i, j)``: whether the tasks at
        ``i`` and ``j`` may start together (their resources fit at once)."""
        ...


class Controller:
    """One explored run's choices, and what it saw: the steps taken (names and
    workers, in order), every value a task returned (by name; a retried task's
    last) and the run's task errors (its state's own dict, by task id: what
    tells a task's failure from the run's own)."""

    def __init__(self, chooser: Chooser, workers: int) -> None:
        self.chooser = chooser
        self.workers = workers
        self.steps: list[tuple[tuple[Hashable, int], ...]] = []
        self.values: dict[Hashable, Any] = {}
        self.errors: Mapping[int, BaseException] = {}
        self.barriers: list[threading.Barrier] = []

    def release(self) -> None:
        """The run is stopping: no held task waits for a partner that may never come."""
        for barrier in self.barriers:
            barrier.abort()
        self.barriers.clear()


class _Held:
    """A task's function behind its step's barrier (called on its worker thread)."""

    __slots__ = ("barrier", "fn", "started")

    def __init__(
        self,
        fn: Callable[..., Any],
        barrier: threading.Barrier,
        started: Callable[[], None] | None,
    ) -> None:
        self.fn, self.barrier, self.started = fn, barrier, started

    def __call__(self, *args: Any) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):  # the run stopped: go alone
            self.barrier.wait(_HOLD_SAFETY_SECONDS)
        if self.started is not None:  # the deadline counts from here, after the hold
            self.started()
        return self.fn(*args)


class _Report:
    """The STARTED report a held task sends itself once its hold is over."""

    __slots__ = ("message", "report")

    def __init__(self, report: Reporter, message: Report) -> None:
        self.report, self.message = report, message

    def __call__(self) -> None:
        self.report(self.message)


def ready_in_order(state: RunState) -> list[int]:
    """The ready tasks in the order a plain run would take them."""
    ready = state.ready
    if state.keyed:
        return [entry[-1] for entry in sorted(ready)]
    if state.depth_first:
        return list(reversed(ready))
    return list(ready)


def _fits(state: RunState, task: int) -> bool:
    """Whether ``task``'s resources are free now (always, without any)."""
    if state.needs is None or not state.needs[task]:
        return True
    resources = state.resources
    assert resources is not None
    if resources.reserving >= 0:
        return False
    return all(amount <= resources.free[r] for r, amount in state.needs[task])


def _fit_together(state: RunState, a: int, b: int) -> bool:
    """Whether ``a`` and ``b``'s resources are free at once now (the step's
    start: nothing of this run is held)."""
    needs = state.needs
    if needs is None or not needs[a] or not needs[b]:
        return True
    resources = state.resources
    assert resources is not None
    if resources.reserving >= 0:
        return False
    total: dict[int, Any] = {}
    for r, amount in (*needs[a], *needs[b]):
        total[r] = total.get(r, 0) + amount
    return all(amount <= resources.free[r] for r, amount in total.items())


def _pick(state: RunState, task: int, worker: int) -> tuple[Any, ...] | None:
    """Take ``task`` out of the ready set and dispatch it to ``worker``: its
    arguments, or None if it waits for a resource after all (parked)."""
    ready = state.ready
    if state.keyed:
        at = next(i for i, entry in enumerate(ready) if entry[-1] == task)
        entry = ready[at]
        ready[at] = ready[-1]
        ready.pop()
        heapq.heapify(ready)
        if state.needs is not None and state.needs[task]:
            assert state.resources is not None
            if not state.resources.try_hold(entry, state.needs[task]):
                return None
    else:
        ready.remove(task)
    return state.dispatch_all([task], worker)[0]


class ExploringRun(Run):
    """A run whose every dispatch is one step the controller chose (a run's class
    is swapped for this one: no slot of its own, its controller in Run's)."""

    __slots__ = ()

    control: Controller

    def _dispatch(self) -> bool:
        state, control = self.state, self.control
        if state.in_flight:  # the step is still running
            return False
        ready = ready_in_order(state)
        names = [state.names[t] for t in ready]
        chosen = control.chooser.choose(
            names, control.workers, lambda i, j: _fit_together(state, ready[i], ready[j])
        )
        if not chosen:  # the chooser gave up (a replay that does not fit): stop here
            state.stop(hard=True)
            return False
        picked = self._take(ready, chosen) or self._any_other()
        if not picked:
            return False
        barrier = threading.Barrier(len(picked)) if len(picked) > 1 else None
        if barrier is not None:
            control.barriers = [barrier]
        stopping = state.stopping
        for task, worker, args in picked:
            items = special_items(self, [task], [args])
            if barrier is not None:
                items = [self._held(items[0], worker, barrier)]
            if state.events:
                self.observer.drain(state.events)
                if state.stopping and not stopping:  # a callback raised: none goes out
                    take_back(self, items)
                    control.release()
                    continue
            self.inboxes[worker].put_all(items)
            self.balance.dispatched(worker, self.now, 1)
        control.steps.append(tuple((state.names[t], w) for t, w, _ in picked))
        return False

    def _any_other(self) -> list[tuple[int, int, tuple[Any, ...]]]:
        """When the chooser's pick waits for a resource held from outside: the
        first ready task that can go now, on the first live worker; or none."""
        state = self.state
        first = min(set(range(len(self.inboxes))) - self.balance.dead, default=0)
        for task in ready_in_order(state):
            args = _pick(state, task, first)
            if args is not None:
                return [(task, first, args)]
        return []

    def _take(
        self, ready: list[int], chosen: list[tuple[int, int]]
    ) -> list[tuple[int, int, tuple[Any, ...]]]:
        """Dispatch the chosen tasks, those the bounds allow together: (task,
        worker, arguments) for each."""
        state = self.state
        picked: list[tuple[int, int, tuple[Any, ...]]] = []
        dead = self.balance.dead  # threads hung in a timed-out attempt: no work
        for position, worker in chosen:
            task = ready[position]
            if picked and not _fits(state, task):
                continue  # an overlap the bounds do not allow
            if worker in dead:
                used = {w for _, w, _ in picked}
                alive = [w for w in range(len(self.inboxes)) if w not in dead and w not in used]
                if not alive:
                    continue
                worker = alive[0]
            args = _pick(state, task, worker)
            if args is not None:
                picked.append((task, worker, args))
        return picked

    def _held(self, item: Item, worker: int, barrier: threading.Barrier) -> Job:
        """``item`` with its function behind ``barrier`` (and its STARTED report after it)."""
        assert not isinstance(item, Chain)  # explored plans have no chains
        report, task, fn, args, flags, stop, context = item
        started = None
        if flags & NOTIFY_START:
            started = _Report(report, (worker, task, STARTED, None, 0.0, 0.0))
            flags &= ~NOTIFY_START
        return (report, task, _Held(fn, barrier, started), args, flags, stop, context)

    def _receive(self, pickup: bool, wait: float | None) -> list[Message]:
        if self.state.stopping:
            self.control.release()
        batch = super()._receive(pickup, wait)
        values, names = self.control.values, self.state.names
        for msg in batch:
            if msg is not ABORT and msg[R_KIND] == DONE:
                values[names[msg[R_TASK]]] = msg[R_PAYLOAD]
        return batch


class _StillBalance(Balance):
    """A balancer that never moves a task: the controller chose its worker."""

    __slots__ = ()

    def steer(self, now: float, started: float, ran_on: list[int]) -> None:
        return None

    def feed_idle(self, now: float) -> None:
        return None


def take_control(run: Run, control: Controller) -> None:
    """Make ``run`` (before it starts) an :class:`ExploringRun` under ``control``."""
    run.__class__ = ExploringRun
    assert isinstance(run, ExploringRun)
    run.control = control
    control.errors = run.state.errors
    run.balance.__class__ = _StillBalance
