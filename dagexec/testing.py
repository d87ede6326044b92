"""Helpers for tests that pin concurrency bounds, without sleeping.

A bound is only tested when it is *reached*: a test that never fills the queues
proves nothing about the cap. These helpers force that state deterministically:

* :class:`Gate` holds tasks until the test opens it, so they pile up;
* :class:`InFlightRecorder` is a run callback that sees what the scheduler sees
  (queued + running) and lets the test wait until the cap is reached;
* :class:`ConcurrencyProbe` counts tasks running at once, from inside them;
* :class:`ResourceRecorder` is a run callback summing the resources held by
  tasks out, and lets the test wait until a capacity is reached;
* :func:`assert_within_bounds` checks a result's observed bounds (resources
  included); :func:`assert_resource_reached` that a capacity was reached exactly;
* :func:`no_leaked_threads` fails a test that leaves a thread behind;
* :func:`explore` runs a graph under many schedules and raises
  :class:`ScheduleDivergence` when one changes the result (a dependency that was
  never declared); :func:`replay_schedule` reruns a :class:`Schedule` exactly.

Every wait takes a timeout and reports failure instead of hanging. Not imported
by ``import dagexec``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from typing import ParamSpec, TypeVar

from ._core.graph import Graph
from ._core.isolate import HeldCall
from ._core.result import RunResult
from ._engine.front.explore import Exploration, explore, replay_schedule
from ._engine.front.schedule import Schedule, ScheduleDivergence
from ._state.resources import exact

__all__ = [
    "ConcurrencyProbe",
    "Exploration",
    "Gate",
    "GateTimeout",
    "InFlightRecorder",
    "ResourceRecorder",
    "Schedule",
    "ScheduleDivergence",
    "assert_resource_reached",
    "assert_within_bounds",
    "explore",
    "no_leaked_threads",
    "replay_schedule",
    "run_in_thread",
]

# Reprs and tracebacks show the public module, not the private one that defines them.
for _public in (Exploration, Schedule, ScheduleDivergence, explore, replay_schedule):
    _public.__module__ = __name__
del _public

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_TIMEOUT = 10.0
"""Seconds any helper waits before giving up: long for a healthy test, short for CI."""


def _check_seconds(where: str, value: object) -> float:
    """A helper's timeout: a TypeError for a non-number, a ValueError for one <= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{where}: timeout must be a number of seconds, got {type(value).__name__} {value!r}"
        )
    if not value > 0:  # also refuses nan
        raise ValueError(f"{where}: timeout must be a number of seconds > 0, got {value!r}")
    return value


def _in_child(what: str, instead: str) -> None:
    """Refuse ``what`` in a child process of ``isolate="process"``: a Gate or a probe
    there is a copy the test never sees (the child imported the module again), so
    it would wait for an ``open()`` that never comes, or count nothing."""
    if "_dagexec_child" in sys.modules:  # the name the child's bootstrap loads itself as
        raise RuntimeError(
            f"{what} was called inside a task running in a child process "
            f"(isolate='process'), where it is a copy the test cannot see; wrap the "
            f"task function instead: {instead}, which holds it on the parent's worker "
            "thread before the call is sent"
        )


class GateTimeout(AssertionError):
    """A task waited at a :class:`Gate` that was never opened: the test is broken."""


class _Counter:
    """A count with a peak, and a way to wait until it reaches a value."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.current = 0
        self.peak = 0
        self.total = 0

    def add(self, delta: int) -> None:
        with self._cond:
            self.current += delta
            if delta > 0:
                self.total += delta
            self.peak = max(self.peak, self.current)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def read(self) -> tuple[int, int, int]:
        """``(current, peak, total)``, read together under the lock.

        Taking the lock orders this read after every ``add`` that finished before
        it, on any build: the free-threaded build gives no other guarantee.
        """
        with self._cond:
            return self.current, self.peak, self.total


class ConcurrencyProbe:
    """Counts how many tasks are inside it at once; thread-safe.

    Use ``with probe:`` inside a task, or ``probe.wrap(fn)``. ``active`` is the count
    now, ``peak`` the most ever at once, ``entered`` how many times it was entered.

    On a process task (``isolate="process"``) use ``g.add(name, probe.wrap(fn),
    isolate="process")``: the worker thread counts the task from before its call
    is sent to its child until the answer is back (``with probe:`` in the task's
    body raises a RuntimeError there, naming ``probe.wrap``).
    """

    def __init__(self) -> None:
        self._count = _Counter()

    def __enter__(self) -> ConcurrencyProbe:
        _in_child("with probe: (ConcurrencyProbe)", "g.add(name, probe.wrap(fn), ...)")
        self._count.add(1)
        return self

    def __exit__(self, *exc: object) -> None:
        self._count.add(-1)

    def wrap(self, fn: Callable[P, R]) -> Callable[P, R]:
        """``fn``, counted as active while it runs (a process task: while its worker
        thread waits for its child)."""
        return _held(fn, lambda: self)

    @property
    def active(self) -> int:
        return self._count.read()[0]

    @property
    def peak(self) -> int:
        return self._count.read()[1]

    @property
    def entered(self) -> int:
        return self._count.read()[2]

    def wait_for_active(self, n: int, timeout: float = DEFAULT_TIMEOUT) -> bool:
        """Block until exactly ``n`` tasks are inside; False if that did not happen in time."""
        return self._count.wait_for(lambda: self._count.current == n, timeout)


class Gate:
    """Holds every task that calls :meth:`wait` until :meth:`open` is called.

    A task still waiting after ``timeout`` seconds raises :class:`GateTimeout`, so a
    test that forgets to open the gate fails instead of hanging.

    On a process task (``isolate="process"``) use ``g.add(name, gate.gated(fn),
    isolate="process")``: the task waits on its worker thread, before its call is
    sent to its child, so the wait never counts against its ``timeout=``
    (``gate.wait()`` in the task's body raises a RuntimeError there, naming
    ``gate.gated``).
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = _check_seconds("Gate(timeout=...)", timeout)
        self._opened = threading.Event()
        self._waiting = _Counter()

    def wait(self) -> None:
        """Block the calling task until the gate opens."""
        _in_child("gate.wait() (Gate)", "g.add(name, gate.gated(fn), ...)")
        self._waiting.add(1)
        try:
            if not self._opened.wait(self.timeout):
                raise GateTimeout(f"gate not opened within {self.timeout} s")
        finally:
            self._waiting.add(-1)

    def open(self) -> None:
        """Release every waiting task, and let later ones through at once."""
        self._opened.set()

    @property
    def is_open(self) -> bool:
        return self._opened.is_set()

    @property
    def waiting(self) -> int:
        """How many tasks are blocked at the gate right now."""
        return self._waiting.read()[0]

    def wait_for_waiting(self, n: int, timeout: float = DEFAULT_TIMEOUT) -> bool:
        """Block until ``n`` tasks are held at the gate; False if not in time."""
        return self._waiting.wait_for(lambda: self._waiting.current >= n, timeout)

    def gated(self, fn: Callable[P, R]) -> Callable[P, R]:
        """``fn``, but first waiting at this gate (a process task: on its worker
        thread, before its call is sent)."""
        return _held(fn, self._held)

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        self.wait()
        yield


def _held(
    fn: Callable[P, R], hold: Callable[[], contextlib.AbstractContextManager[object]]
) -> Callable[P, R]:
    """``fn`` with ``hold()`` entered around each call, on the worker thread: on a
    process task, before the call is sent (see :class:`dagexec._core.isolate.HeldCall`).
    Looks like ``fn`` (name, docstring, signature) to the graph's checks."""
    wrapped = HeldCall(fn, hold)
    functools.update_wrapper(wrapped, fn)
    return wrapped  # called like fn


class InFlightRecorder:
    """A run callback counting tasks queued or running, as the scheduler counts them.

    Pass it in ``callbacks=[...]``; from another thread, :meth:`wait_for_in_flight`
    blocks until the scheduler has that many tasks out, which is how a test knows
    the cap was reached before it releases a :class:`Gate`.

    Counts attempts, as the scheduler does: +1 at each ``on_task_dispatch`` (each
    retry is dispatched again; a linear run of tasks handed over as one unit is
    dispatched once, by its first task), -1 at its ``on_attempt_release``. So it
    stays exact with retries, with a timed-out attempt that holds its slot until
    its function returns, and with one abandoned at the run's end (the run lets
    go of its slot then): ``in_flight`` is 0 once a run is over. A task a
    checkpoint loads is dispatched too (a worker hands back its stored value),
    so it shows here, as in ``RunStats.tasks_per_worker``; ``tasks_loaded``, not
    ``tasks_run``, counts it (see docs/checkpoints.md).
    """

    def __init__(self) -> None:
        self._count = _Counter()
        # Appended on the scheduler thread; read it after the run (its join orders it).
        self.dispatched: list[tuple[Hashable, int]] = []

    def on_task_dispatch(self, name: Hashable, worker: int) -> None:
        self.dispatched.append((name, worker))
        self._count.add(1)

    def on_attempt_release(self, name: Hashable, attempt: int, how: str) -> None:
        self._count.add(-1)

    @property
    def in_flight(self) -> int:
        return self._count.read()[0]

    @property
    def peak(self) -> int:
        return self._count.read()[1]

    def wait_for_in_flight(self, n: int, timeout: float = DEFAULT_TIMEOUT) -> bool:
        """Block until exactly ``n`` tasks are in flight; False if not in time."""
        return self._count.wait_for(lambda: self._count.current == n, timeout)


class ResourceRecorder:
    """A run callback summing what attempts out hold in the run, per resource.

    Reads each task's ``resources`` from ``graph``. Counts move exactly when the
    scheduler's own do: an attempt holds from its dispatch until its
    ``on_attempt_release`` (a timed-out attempt holds on after its task ended,
    until its function returns or the run ends and abandons it to the
    executor; each retry holds again), so from another thread
    :meth:`wait_for_held` tells a test that a capacity is reached before it
    releases a :class:`Gate`; ``peak`` must then equal
    ``RunStats.peak_resources``, and ``held`` is empty-handed (0) after a run.
    Sums are exact, like the scheduler's (three tasks of 0.1 hold 0.3, not
    0.30000000000000004); ``held`` and ``peak`` show them as plain numbers.
    """

    def __init__(self, graph: Graph) -> None:
        if not isinstance(graph, Graph):
            raise TypeError(
                f"ResourceRecorder(graph=...) takes the dagexec.Graph to be run, got "
                f"{type(graph).__name__}"
            )
        needs = {i: record.needs for i, record in graph._options.items() if record.needs}
        self._needs = {graph._names[i]: need for i, need in needs.items()}
        # A map's items, named (map, i), hold what the map declares.
        self._map_needs = {graph._names[i]: needs[i] for i in graph._maps if i in needs}
        self._cond = threading.Condition()
        self._out: dict[Hashable, int] = {}  # attempts out per task; scheduler thread only
        self.held: dict[str, float] = {}
        self.peak: dict[str, float] = {}
        self._held: dict[str, float] = {}  # exact sums (see _state/resources.exact)
        self._peak: dict[str, float] = {}

    def on_task_dispatch(self, name: Hashable, worker: int) -> None:
        need = self._needs.get(name)
        if need is None and type(name) is tuple and len(name) == 2:
            need = self._map_needs.get(name[0])
            if need:
                self._needs[name] = need
        if need:
            self._out[name] = self._out.get(name, 0) + 1
            with self._cond:
                for r, amount in need:
                    held = self._held[r] = self._held.get(r, 0) + exact(amount)
                    self._peak[r] = max(self._peak.get(r, 0), held)
                    self.held[r], self.peak[r] = _plain(held), _plain(self._peak[r])
                self._cond.notify_all()

    def on_attempt_release(self, name: Hashable, attempt: int, how: str) -> None:
        out = self._out.get(name, 0)
        if not out:
            return
        if out == 1:
            del self._out[name]
        else:
            self._out[name] = out - 1
        with self._cond:
            for r, amount in self._needs[name]:
                held = self._held[r] = self._held[r] - exact(amount)
                self.held[r] = _plain(held)
            self._cond.notify_all()

    def wait_for_held(self, resource: str, amount: float, timeout: float = DEFAULT_TIMEOUT) -> bool:
        """Block until exactly ``amount`` of ``resource`` is held; False if not in time.

        Exact like the scheduler: 0.3 is reached by three tasks of 0.1.
        """
        want = exact(amount)
        with self._cond:
            return self._cond.wait_for(lambda: self._held.get(resource, 0) == want, timeout)


def _plain(amount: float) -> float:
    """An exact sum as a float, or an int when whole (as in ``RunStats``)."""
    value = float(amount)
    return int(value) if value.is_integer() else value


def assert_resource_reached(result: RunResult, resource: str) -> None:
    """Assert the run held exactly its capacity of ``resource`` at some moment, never more."""
    s = result.stats
    assert resource in s.resources, (
        f"resource {resource!r} has no capacity in this run; it has {sorted(s.resources)}"
    )
    peak, capacity = s.peak_resources[resource], s.resources[resource]
    assert peak <= capacity, f"{resource!r}: peak {peak} exceeded its capacity {capacity}"
    assert peak == capacity, (
        f"{resource!r}: peak {peak} never reached its capacity {capacity}; gate enough "
        "tasks that need it to fill it"
    )


def assert_within_bounds(result: RunResult) -> None:
    """Assert the bounds a run observed hold: in-flight cap, inbox cap, accounting.

    Holds on a resumed run: a task a checkpoint supplied counts in
    ``tasks_loaded`` and in ``tasks_per_worker`` (a worker handed its stored
    value back), never in ``tasks_run``.
    """
    s = result.stats
    expected_cap = min(s.max_in_flight, s.workers * (s.queue_cap + 1))
    assert s.effective_cap == expected_cap, f"effective_cap {s.effective_cap} != {expected_cap}"
    assert s.peak_in_flight <= s.effective_cap, (
        f"peak_in_flight {s.peak_in_flight} exceeded effective_cap {s.effective_cap}"
    )
    deepest = max(s.peak_queue_depth, default=0)
    assert deepest <= s.queue_cap, f"an inbox held {deepest} tasks; queue_cap is {s.queue_cap}"
    # A worker hands back a loaded task too (its stored value): tasks_per_worker
    # counts it, tasks_run does not (see docs/checkpoints.md).
    assert sum(s.tasks_per_worker) == s.tasks_run + s.tasks_loaded, (
        f"tasks_per_worker {s.tasks_per_worker} does not add up to tasks_run "
        f"{s.tasks_run} + tasks_loaded {s.tasks_loaded}"
    )
    for r, peak in s.peak_resources.items():
        assert peak <= s.resources[r], (
            f"resource {r!r}: peak {peak} exceeded its capacity {s.resources[r]}"
        )


def run_in_thread(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Future[R]:
    """Call ``fn`` on a new daemon thread; the future holds its result or exception.

    For starting a blocking ``run`` while the test thread drives gates.
    """
    future: Future[R] = Future()

    def target() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

    threading.Thread(target=target, name="dagexec-test-runner", daemon=True).start()
    return future


def _join_started(thread: threading.Thread, timeout: float) -> None:
    """``thread.join(timeout)``, also for a thread still inside its ``start()``.

    ``threading.enumerate()`` lists a thread as soon as ``start()`` begins, and
    ``join`` refuses one that has not signalled it runs yet: a ``start()``
    interrupted by Ctrl-C leaves exactly that (the thread runs a moment later).
    """
    deadline = time.monotonic() + timeout
    started = getattr(thread, "_started", None)  # CPython's "it runs" event
    if isinstance(started, threading.Event):
        started.wait(timeout)
    with contextlib.suppress(RuntimeError):  # never started after all
        thread.join(max(0.0, deadline - time.monotonic()))


@contextlib.contextmanager
def no_leaked_threads(timeout: float = DEFAULT_TIMEOUT) -> Iterator[None]:
    """Fail if a thread started inside the block is still alive ``timeout`` s after it.

    Garbage is collected between short joins: the threads of an ``Executor``
    dropped without ``shutdown()`` exit when it is collected, and on free-threaded
    CPython a reference dropped by another thread (the scheduler's, at the end of
    a run) is merged lazily, so only a collection makes the executor unreachable
    while this thread waits.
    """
    _check_seconds("no_leaked_threads(timeout=...)", timeout)
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + timeout
    while True:
        alive = [t for t in set(threading.enumerate()) - before if t.is_alive()]
        remaining = deadline - time.monotonic()
        if not alive or remaining <= 0:
            break
        gc.collect()
        for thread in alive:
            _join_started(thread, min(_JOIN_SLICE, max(0.0, deadline - time.monotonic())))
    leaked = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert not leaked, f"threads still running after the test: {sorted(leaked)}"


# How long no_leaked_threads joins a thread before collecting garbage again.
_JOIN_SLICE = 0.1
