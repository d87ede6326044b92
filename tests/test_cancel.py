"""Cancel and Ctrl-C: nothing of the run starts afterwards; RunFuture is a
concurrent.futures.Future; a kept token does not keep a run's values alive.

Issue 19, "Cancel and Ctrl-C: nothing starts afterwards".
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures as cf
import gc
import threading
import weakref
from collections.abc import Callable

import pytest

import dagexec
from dagexec import Callback, Graph, current_task
from dagexec.testing import Gate

WAIT = 10.0  # bounds waits that end long before it
# How long a test watches for a task that must not start, before it lets the
# scheduler take the queued tasks back (which would hide one that would start).
NOT_YET = 0.5


class _Late:
    """Records the tasks that start after ``after`` is set (thread-safe)."""

    def __init__(self) -> None:
        self.after = threading.Event()
        self.started = threading.Event()  # a task started after ``after``
        self.names: list[str] = []
        self._lock = threading.Lock()

    def task(self, gate: Gate, name: str) -> Callable[[], str]:
        def run() -> str:
            if self.after.is_set():
                with self._lock:
                    self.names.append(name)
                self.started.set()
            gate.wait()
            return name

        return run


def _queued_graph(late: _Late, gate: Gate, n: int = 40) -> Graph:
    """``n`` independent tasks, each waiting at ``gate``: with 2 workers both
    block in their first task, the rest queue in the inboxes behind them."""
    g = Graph()
    for i in range(n):
        g.add(f"t{i}", late.task(gate, f"t{i}"))
    return g


class _HoldDriver(Callback):
    """Holds the thread that drives the run in ``on_task_start`` until ``free`` is
    set: queued tasks then stay in the inboxes, not taken back, for as long as
    the test wants."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.free = threading.Event()
        self.ends: list[dagexec.TaskState] = []

    def on_task_start(self, name: object, worker: int) -> None:
        self.inside.set()
        assert self.free.wait(WAIT)

    def on_task_end(self, name: object, state: dagexec.TaskState, seconds: float) -> None:
        self.ends.append(state)


def test_after_cancel_returns_no_queued_task_starts() -> None:
    # Today up to queue_cap queued tasks per worker still started: the workers
    # ran what their inboxes held until the scheduler took it back.
    late, gate, hold = _Late(), Gate(), _HoldDriver()
    with dagexec.Executor(2, queue_cap=8) as ex:
        future = ex.submit(_queued_graph(late, gate), callbacks=[hold])
        # Both workers are inside a task (neither is past a stop check for its
        # next one), and the scheduler is busy: nothing was taken back yet.
        assert gate.wait_for_waiting(2) and hold.inside.wait(WAIT)
        assert future.cancel()
        late.after.set()
        assert future.done() and future.cancelled()  # done at once
        gate.open()
        late.started.wait(NOT_YET)  # the workers, not the scheduler, must refuse them
        hold.free.set()
        # Nothing was lost: the run ends (every task in a final state) and the
        # executor runs the next one.
        nxt = Graph()
        nxt.add("x", lambda: "x")
        assert ex.submit(nxt).result(WAIT)["x"] == "x"
    assert late.names == []
    assert len(hold.ends) == 40
    assert hold.ends.count(dagexec.TaskState.CANCELLED) == 38


def test_after_ctrl_c_raised_no_queued_task_starts_even_with_a_busy_scheduler() -> None:
    # The caller raises after at most a second even when the scheduler thread is
    # stuck in a callback and has not taken the queued tasks back yet: the
    # workers must refuse them themselves.
    late, gate, hold = _Late(), Gate(), _HoldDriver()

    def interrupt_when_busy() -> None:
        assert gate.wait_for_waiting(2) and hold.inside.wait(WAIT)
        _thread.interrupt_main()

    helper = threading.Thread(target=interrupt_when_busy)
    ex = dagexec.Executor(2, queue_cap=8)
    try:
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            ex.run(_queued_graph(late, gate), callbacks=[hold])
        late.after.set()
        gate.open()
        late.started.wait(NOT_YET)  # the workers, not the scheduler, must refuse them
        hold.free.set()
        helper.join(WAIT)
        nxt = Graph()
        nxt.add("x", lambda: "x")
        assert ex.run(nxt)["x"] == "x"
    finally:
        gate.open()
        hold.free.set()
        ex.shutdown()
    assert late.names == []


def test_a_chain_stops_before_its_first_member_once_cancelled() -> None:
    # A chain queued behind a blocked task must not start its first member either.
    late, gate, hold = _Late(), Gate(), _HoldDriver()
    g = Graph()
    g.add("block", late.task(gate, "block"))
    g.add("c0", late.task(gate, "c0"))
    g.add("c1", lambda x: late.task(gate, "c1")(), deps=["c0"])
    g.add("c2", lambda x: late.task(gate, "c2")(), deps=["c1"])
    plan = dagexec._core.plan.plan_run(g._compile(), None)
    assert plan.chain_next[plan.index["c0"]] >= 0  # fused into a chain
    with dagexec.Executor(1, queue_cap=4) as ex:
        future = ex.submit(g, callbacks=[hold])
        assert gate.wait_for_waiting(1) and hold.inside.wait(WAIT)
        assert future.cancel()
        late.after.set()
        gate.open()
        late.started.wait(NOT_YET)  # the workers, not the scheduler, must refuse them
        hold.free.set()
        nxt = Graph()
        nxt.add("x", lambda: "x")
        assert ex.submit(nxt).result(WAIT)["x"] == "x"
    assert late.names == []


# ------------------------------------------------ RunFuture as a concurrent Future
def test_run_future_works_with_concurrent_futures_wait_and_as_completed() -> None:
    gate = Gate()
    g = Graph()
    g.add("held", gate.wait)
    quick = Graph()
    quick.add("q", lambda: "q")
    with dagexec.Executor(2) as ex:
        held = ex.submit(g)
        assert isinstance(held, cf.Future)
        assert gate.wait_for_waiting(1)
        done, not_done = cf.wait([held], timeout=0.01)
        assert not done and not_done == {held}
        # A running run cancelled wakes cf.wait at once.
        waiter = threading.Thread(target=lambda: held.cancel())
        waiter.start()
        done, _ = cf.wait([held], timeout=WAIT, return_when=cf.FIRST_COMPLETED)
        waiter.join(WAIT)
        assert done == {held} and held.cancelled()
        gate.open()
        futures = [ex.submit(quick) for _ in range(3)]
        finished = list(cf.as_completed(futures, timeout=WAIT))
        assert sorted(map(id, finished)) == sorted(map(id, futures))
        assert all(f.result()["q"] == "q" for f in finished)


def test_asyncio_wrap_future_gives_the_result() -> None:
    g = Graph()
    g.add("a", lambda: 21)
    g.add("b", lambda a: a * 2, deps=["a"])
    with dagexec.Executor(2) as ex:

        async def main() -> int:
            result = await asyncio.wrap_future(ex.submit(g))
            return int(result["b"])

        assert asyncio.run(main()) == 42


def test_an_asyncio_timeout_on_wrap_future_cancels_the_run() -> None:
    late, gate = _Late(), Gate()
    with dagexec.Executor(1, queue_cap=4) as ex:
        future = ex.submit(_queued_graph(late, gate, 10))
        assert gate.wait_for_waiting(1)

        async def main() -> None:
            await asyncio.wait_for(asyncio.wrap_future(future), 0.01)

        with pytest.raises(TimeoutError):
            asyncio.run(main())
        late.after.set()
        assert future.cancelled()  # the run was cancelled, not left running
        gate.open()
        nxt = Graph()
        nxt.add("x", lambda: "x")
        assert ex.submit(nxt).result(WAIT)["x"] == "x"
    assert late.names == []


def test_a_finished_future_refuses_cancel_and_keeps_its_result_under_cf_wait() -> None:
    g = Graph()
    g.add("a", lambda: 1)
    with dagexec.Executor(1) as ex:
        future = ex.submit(g)
        done, _ = cf.wait([future], timeout=WAIT)
        assert done == {future}
        assert not future.cancel()
        assert future.result()["a"] == 1
        assert repr(future) == "<dagexec.RunFuture finished>"


# --------------------------------------------------------- kept tokens do not pin
class Big:
    """A value whose lifetime the test watches (a weakref, not RSS)."""


def test_keeping_current_task_or_its_token_does_not_pin_the_run_values() -> None:
    # Today the token (the run's stop Event) kept the run's state, and every
    # target value, alive through the name lookup of current_task().
    kept: list[object] = []
    alive: list[weakref.ref[Big]] = []

    def make() -> Big:
        me = current_task()
        kept.append(me)
        kept.append(me.cancelled)
        value = Big()
        alive.append(weakref.ref(value))
        return value

    for _ in range(5):
        g = Graph()
        g.add("big", make)
        g.add("other", lambda: 1)
        result = dagexec.run(g, workers=2)
        assert isinstance(result["big"], Big)
        del result
    gc.collect()
    assert len(kept) == 10
    assert [ref() for ref in alive] == [None] * 5
    assert "big" in repr(kept[0])  # what was kept still names its task


def test_keeping_a_policy_tasks_current_task_does_not_pin_the_run_values() -> None:
    kept: list[object] = []
    alive: list[weakref.ref[Big]] = []

    def make() -> Big:
        kept.append(current_task())
        value = Big()
        alive.append(weakref.ref(value))
        return value

    for _ in range(3):
        g = Graph()
        g.add("big", make, retries=1)
        dagexec.run(g, workers=1)
    gc.collect()
    assert [ref() for ref in alive] == [None] * 3
