"""Ctrl-C during a run: prompt, clean, and nothing leaks into the next run."""

from __future__ import annotations

import _thread
import os
import select
import signal
import threading
import time
from collections.abc import Callable

import pytest

import dagexec
import dagexec._engine.front.submission
from dagexec.testing import Gate

# "Promptly": the run must notice within about a second. Generous for slow CI;
# the waits are on gates, so a hang fails at the gate timeout, not here.
PROMPT_SECONDS = 2.0


def send_sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


INTERRUPTS = [send_sigint, _thread.interrupt_main]


def interrupt(how: Callable[[], None], gate: Gate, started: list[float]) -> Callable[[], str]:
    def task() -> str:
        started.append(time.monotonic())
        how()
        gate.wait()  # keeps running after the interrupt, like real work would
        return "stale"

    return task


@pytest.mark.parametrize(
    "how", [send_sigint, _thread.interrupt_main], ids=["SIGINT", "interrupt_main"]
)
def test_ctrl_c_is_prompt_cancels_queued_and_leaves_no_thread(how: Callable[[], None]) -> None:
    gate = Gate()
    started: list[float] = []
    later_ran: list[int] = []
    g = dagexec.Graph()
    g.add("x", interrupt(how, gate, started))
    for i in range(20):
        g.add(i, lambda x, i=i: later_ran.append(i), deps=["x"])
    try:
        with pytest.raises(KeyboardInterrupt):
            dagexec.run(g, workers=2)
        noticed = time.monotonic() - started[0]
        assert noticed < PROMPT_SECONDS, f"interrupt took {noticed:.2f} s to surface"
        assert gate.waiting == 1  # the run returned while its task still runs
    finally:
        gate.open()
    assert later_ran == []  # nothing queued or waiting ever started


@pytest.mark.parametrize(
    "how", [send_sigint, _thread.interrupt_main], ids=["SIGINT", "interrupt_main"]
)
def test_interrupted_run_never_leaks_into_the_next_run(how: Callable[[], None]) -> None:
    gate = Gate()
    started: list[float] = []
    g1 = dagexec.Graph()
    g1.add("x", interrupt(how, gate, started))
    for i in range(8):
        g1.add(i, lambda: "stale")
    g2 = dagexec.Graph()
    g2.add("x", lambda: "fresh")
    for i in range(8):
        g2.add(i, lambda i=i: ("fresh", i))
    with dagexec.Executor(workers=2, queue_cap=2) as ex:
        with pytest.raises(KeyboardInterrupt):
            ex.run(g1)
        assert gate.waiting == 1
        gate.open()  # lets the abandoned task finish; its result must be dropped
        for _ in range(3):
            result = ex.run(g2)
            assert dict(result) == {"x": "fresh", **{i: ("fresh", i) for i in range(8)}}
            assert result.stats.tasks_run == 9


def test_interrupted_executor_block_exits_without_waiting_for_running_tasks() -> None:
    gate = Gate()
    started: list[float] = []
    g = dagexec.Graph()
    g.add("x", interrupt(send_sigint, gate, started))
    try:
        with pytest.raises(KeyboardInterrupt), dagexec.Executor(workers=2) as ex:
            ex.run(g)
        assert gate.waiting == 1  # __exit__ did not wait for the task
        assert any(t.name.startswith("dagexec-worker") for t in threading.enumerate())
    finally:
        gate.open()
    # the autouse fixture then checks that every worker thread exits by itself


class _WatchedLock:
    """A run lock for the executor that tells a test when a thread starts waiting for it.

    It tells by writing a byte to a pipe, not by setting an Event: the Ctrl-C
    the test sends may land anywhere in the main thread once it is told, and
    one landing inside ``Event.set`` (between its Condition's acquire and the
    ``with``) would leave that lock held for good, hanging the next ``set``
    (seen on the free-threaded build, where the woken thread runs at once).

    For the same reason it is an ``RLock`` underneath, which knows its owner:
    the Ctrl-C may land in this wrapper's own Python frames just after the lock
    was taken (a plain lock's ``with`` takes it in C, where it cannot), and the
    ``with`` would then never let it go, hanging the executor's ``shutdown``
    (seen once on the free-threaded build, in a full run of the suite). Nothing
    in the test takes it twice on one thread, so it locks as a plain lock does.
    """

    def __init__(self, waiting_fd: int) -> None:
        self._lock, self._waiting_fd = threading.RLock(), waiting_fd

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if blocking and threading.current_thread() is threading.main_thread():
            os.write(self._waiting_fd, b"w")
        try:
            return self._lock.acquire(blocking, timeout)
        except BaseException:  # a Ctrl-C after the lock was taken: let it go
            self._let_go_if_mine()
            raise

    def _let_go_if_mine(self) -> None:
        if self._lock._is_owned():  # type: ignore[attr-defined]  # RLock's, in C
            self._lock.release()

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        try:
            return self.acquire()
        except BaseException:  # as in acquire: the with would not let it go
            self._let_go_if_mine()
            raise

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.parametrize("queued", [False, True], ids=["plain", "queued"])
def test_ctrl_c_while_waiting_for_another_threads_run_is_noticed(
    queued: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """interrupt_main does not wake a blocked lock wait: waiting for another
    thread's run must poll, or Ctrl-C is ignored until that run ends. And a run
    cancelled before it started never starts: the caller must not wait for the
    scheduler to reach it (it used to wait up to _CANCEL_WAIT_SECONDS)."""
    monkeypatch.setattr(dagexec._engine.front.submission, "_CANCEL_WAIT_SECONDS", 60.0)
    gate = Gate(timeout=30)
    waiting, told = os.pipe()
    ex = dagexec.Executor(workers=1)
    ex._run_lock = _WatchedLock(told)  # type: ignore[assignment]
    busy = dagexec.Graph()
    busy.add("slow", gate.gated(lambda: "slow"))
    other = threading.Thread(target=ex.run, args=(busy,))
    other.start()
    try:
        assert gate.wait_for_waiting(1)  # the other run holds the executor
        interrupter = threading.Thread(
            target=lambda: (select.select([waiting], [], [], 10), _thread.interrupt_main())
        )
        interrupter.start()
        quick = dagexec.Graph()
        quick.add("x", lambda: 1)
        callbacks = [dagexec.testing.InFlightRecorder()] if queued else []
        with pytest.raises(KeyboardInterrupt):
            ex.run(quick, callbacks=callbacks)
        assert gate.waiting == 1  # noticed while the other run still held the executor
        interrupter.join()
    finally:
        gate.open()
        other.join()
        ex.shutdown()
        os.close(waiting)
        os.close(told)


def test_shutdown_without_wait_returns_during_another_threads_run() -> None:
    """shutdown(wait=False) marks the executor closed and returns; the run in
    progress finishes, and the workers exit after it."""
    gate = Gate()
    ex = dagexec.Executor(workers=1)
    g = dagexec.Graph()
    g.add("slow", gate.gated(lambda: "slow"))
    results: list[object] = []
    other = threading.Thread(target=lambda: results.append(ex.run(g)["slow"]))
    other.start()
    try:
        assert gate.wait_for_waiting(1)
        ex.shutdown(wait=False)  # before: blocked here until the run ended
        assert other.is_alive()
    finally:
        gate.open()
        other.join()
    assert results == ["slow"]
    with pytest.raises(RuntimeError, match="shut down"):
        ex.run(g)
    for t in [*ex._threads, *([ex._scheduler] if ex._scheduler is not None else [])]:
        if t.ident is None:
            continue  # a worker starts with its first task, the scheduler with a queued run
        t.join(30)
        assert not t.is_alive()
