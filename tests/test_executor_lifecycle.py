"""An executor's own threads: shutdown from inside is refused; a dropped executor's workers exit."""

from __future__ import annotations

import _thread
import gc
import threading
import time
from collections.abc import Hashable

import pytest
from common import diamond, still_alive

import dagexec
from dagexec import Graph, TaskState
from dagexec.testing import (
    Gate,
)

# --- shutdown from the executor's own threads ---------------------------------


@pytest.mark.parametrize("wait", [True, False])
def test_shutdown_from_a_task_is_refused_and_the_executor_stays_usable(wait: bool) -> None:
    with dagexec.Executor(workers=2) as ex:
        g = Graph()
        g.add("closer", lambda: ex.shutdown(wait=wait))
        with pytest.raises(RuntimeError, match="Executor.shutdown called from one of") as info:
            ex.run(g)
        assert "dagexec: raised by task 'closer'" in info.value.__notes__
        assert dict(ex.run(diamond(), targets=["norm"])) == {"norm": 20}


@pytest.mark.parametrize("hook", ["on_run_start", "on_task_dispatch", "on_task_end", "on_run_end"])
@pytest.mark.parametrize("wait", [True, False])
def test_shutdown_from_a_callback_is_refused(hook: str, wait: bool) -> None:
    with dagexec.Executor(workers=2) as ex:
        callback = type("Closer", (), {hook: lambda self, *args: ex.shutdown(wait=wait)})()
        with pytest.raises(RuntimeError, match="would wait for itself forever") as info:
            ex.run(diamond(), callbacks=[callback])
        assert any("raised by callback" in note for note in info.value.__notes__)
        assert dict(ex.run(diamond(), targets=["side"])) == {"side": 3}


def test_shutdown_from_a_callback_of_an_interrupted_run_is_refused() -> None:
    """Two features at once: Ctrl-C leaves the run's task running in the background;
    when it ends, the abandoned scheduler calls a callback that shuts the executor
    down. That callback would wait for its own thread."""
    gate = Gate()
    refused: list[BaseException] = []
    called = threading.Event()
    ex = dagexec.Executor(workers=1)

    class Closer:
        def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
            try:
                ex.shutdown()
            except RuntimeError as exc:
                refused.append(exc)
            finally:
                called.set()

    def interrupted() -> None:
        _thread.interrupt_main()
        gate.wait()

    g = Graph()
    g.add("x", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            ex.run(g, callbacks=[Closer()])
        gate.open()
        assert called.wait(10)
    finally:
        gate.open()
        ex.shutdown()
    assert len(refused) == 1
    assert "own tasks or callbacks" in str(refused[0])


# --- an executor dropped without shutdown() -----------------------------------


def test_workers_of_dropped_executors_exit() -> None:
    threads: list[threading.Thread] = []
    for _ in range(20):
        ex = dagexec.Executor(workers=2)
        assert dict(ex.run(diamond(), targets=["norm"])) == {"norm": 20}
        threads += ex._threads
    del ex
    gc.collect()
    assert still_alive(threads) == []


def test_workers_of_a_dropped_executor_exit_after_its_interrupted_run_lets_go() -> None:
    """Two features at once: Ctrl-C leaves a task running; then the executor is
    dropped. Its workers may only be stopped once the abandoned run cannot put
    tasks any more, and must exit once the running task ends."""
    gate = Gate()

    def interrupted() -> None:
        _thread.interrupt_main()
        gate.wait()

    g = Graph()
    g.add("x", interrupted)
    for i in range(10):
        g.add(i, lambda x: x, deps=["x"])
    ex = dagexec.Executor(workers=2)
    threads = list(ex._threads)
    try:
        with pytest.raises(KeyboardInterrupt):
            ex.run(g)
        del ex
        gc.collect()
    finally:
        gate.open()
    assert still_alive_after_collections(threads) == []


def still_alive_after_collections(threads: list[threading.Thread]) -> list[str]:
    """``still_alive``, collecting garbage between short joins.

    The executor is only unreachable once its interrupted run has ended, on the
    scheduler thread. With the GIL, reference counting frees it right then; on
    free-threaded CPython the last reference dropped by another thread is merged
    lazily by the owning thread, so a collection makes "unreachable" happen.
    """
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        gc.collect()
        if not still_alive(threads, timeout=0.2):
            return []
    return still_alive(threads, timeout=0.0)


def test_a_dropped_executor_collected_on_one_of_its_own_workers_stops_them() -> None:
    """The finalizer may run on one of the executor's own workers (a garbage
    collection there, of an executor in a reference cycle); it must not post the
    STOPs from that thread, which could be holding its inbox's lock."""
    gate, collected = Gate(), threading.Event()

    def x() -> None:
        _thread.interrupt_main()
        gate.wait()
        gc.collect()  # the executor's finalizer runs here, on its own worker
        collected.set()

    g = Graph()
    g.add("x", x)
    ex = dagexec.Executor(workers=2)
    threads = list(ex._threads)
    cycle: list[object] = [ex]
    cycle.append(cycle)  # only a collection frees it
    gc.disable()
    try:
        with pytest.raises(KeyboardInterrupt):
            ex.run(g)
        del ex, cycle
    finally:
        gate.open()
        gc.enable()
    assert collected.wait(10)
    assert still_alive(threads) == []


# --- a worker's thread starts with its first task --------------------------------


def test_a_worker_thread_starts_with_its_first_task_and_an_unused_one_never() -> None:
    """a -> b -> c keeps one worker busy: of three, one thread starts (with the
    run, not the executor); shutdown ends it and leaves the other two unstarted."""
    g = Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda a: a + 1, deps=["a"])
    g.add("c", lambda b: b + 1, deps=["b"])
    before = set(threading.enumerate())
    ex = dagexec.Executor(workers=3)
    assert set(threading.enumerate()) == before  # nothing started yet
    assert ex.run(g)["c"] == 3
    started = [t for t in ex._threads if t.ident is not None]
    assert len(started) == 1 and started[0].is_alive()
    ex.shutdown()
    assert not started[0].is_alive()
    assert [t.ident for t in ex._threads if t is not started[0]] == [None, None]
