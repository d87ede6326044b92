"""A plain ``Executor.run`` is driven by its calling thread (no hand-off to the
scheduler thread and back); runs still never overlap, Ctrl-C stays prompt and
is never lost, and a program's own SIGINT handler is left alone."""

from __future__ import annotations

import signal
import threading
from collections.abc import Hashable, Iterator

import pytest

import dagexec
from dagexec.testing import Gate


def sigint_main_thread() -> None:
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


class _Quiet(dagexec.Callback):
    def on_task_end(self, name: Hashable, state: dagexec.TaskState, seconds: float) -> None:
        pass


@pytest.fixture
def ex() -> Iterator[dagexec.Executor]:
    with dagexec.Executor(workers=2) as executor:
        yield executor


def fan(n: int = 8) -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("root", lambda: 1)
    for i in range(n):
        g.add(i, lambda r, i=i: r + i, deps=["root"])
    g.add("sink", lambda *xs: sum(xs), deps=list(range(n)))
    return g


def test_a_plain_run_starts_no_scheduler_thread(ex: dagexec.Executor) -> None:
    for _ in range(3):
        assert ex.run(fan())["sink"] == 8 + 28
    assert ex._scheduler is None
    assert not any(t.name == "dagexec-scheduler" for t in threading.enumerate())
    ex.run(fan(), callbacks=[_Quiet()])  # callbacks run on the scheduler thread
    assert ex._scheduler is not None and ex._scheduler.ident is not None


def test_python_own_sigint_handler_is_back_after_every_kind_of_end(
    ex: dagexec.Executor,
) -> None:
    def boom() -> None:
        raise ValueError("boom")

    failing = dagexec.Graph()
    failing.add("boom", boom)
    ex.run(fan())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(ValueError, match="boom"):
        ex.run(failing)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    stopped = dagexec.Graph()
    stopped.add("x", sigint_main_thread)
    with pytest.raises(KeyboardInterrupt):
        ex.run(stopped)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_as_the_last_task_ends_is_not_lost(ex: dagexec.Executor) -> None:
    """The SIGINT may reach the driver before or after the task's report: either
    way the caller sees KeyboardInterrupt, and the executor is usable after."""
    g = dagexec.Graph()
    g.add("x", sigint_main_thread)
    for _ in range(5):
        with pytest.raises(KeyboardInterrupt):
            ex.run(g)
        assert ex.run(fan())["sink"] == 36


def test_a_programs_own_sigint_handler_is_kept_and_called(ex: dagexec.Executor) -> None:
    gate = Gate()
    calls: list[int] = []

    def handler(signum: int, frame: object) -> None:
        calls.append(signum)
        gate.open()  # the task waits for the handler to have run

    g = dagexec.Graph()
    g.add("x", lambda: (sigint_main_thread(), gate.wait(), "done")[2])
    previous = signal.signal(signal.SIGINT, handler)
    try:
        assert ex.run(g)["x"] == "done"
    finally:
        signal.signal(signal.SIGINT, previous)
    assert calls == [signal.SIGINT]
    assert ex._scheduler is not None  # such a run goes to the scheduler thread
    assert ex._scheduler.ident is not None


def gated_fan(gate: Gate, ended: list[int]) -> dagexec.Graph:
    """x waits at ``gate``; 20 tasks after it each append to ``ended``."""
    g = dagexec.Graph()
    g.add("x", gate.gated(lambda: 0))
    for i in range(20):
        g.add(i, lambda x, i=i: ended.append(i) or i, deps=["x"])
    return g


def probe(ended: list[int], seen: list[int]) -> dagexec.Graph:
    """One task "y" that records how many of ``ended`` it saw when it started."""
    g = dagexec.Graph()
    g.add("y", lambda: seen.append(len(ended)) or "second")
    return g


def test_a_run_queued_first_runs_first(ex: dagexec.Executor) -> None:
    """submit() then run(): the caller must not drive its run past the queued one."""
    gate = Gate()
    ended: list[int] = []
    seen: list[int] = []
    second = probe(ended, seen)
    future = ex.submit(gated_fan(gate, ended))
    assert gate.wait_for_waiting(1)
    opener = threading.Thread(target=gate.open)
    opener.start()
    assert ex.run(second)["y"] == "second"
    opener.join()
    assert dict(future.result(10)) == {i: i for i in range(20)}
    assert seen == [20]  # y started after the whole first run


def test_a_run_queued_while_a_caller_drives_waits_for_it(ex: dagexec.Executor) -> None:
    gate = Gate()
    ended: list[int] = []
    seen: list[int] = []
    second = probe(ended, seen)
    results: list[object] = []
    driver = threading.Thread(target=lambda: results.append(dict(ex.run(gated_fan(gate, ended)))))
    driver.start()
    try:
        assert gate.wait_for_waiting(1)
        future = ex.submit(second)  # the scheduler thread must wait for the driver
        gate.open()
        assert future.result(10)["y"] == "second"
    finally:
        gate.open()
        driver.join()
    assert results == [{i: i for i in range(20)}]
    assert seen == [20]  # y started after the whole first run


def test_shutdown_during_a_caller_driven_run_lets_it_finish() -> None:
    """The workers' STOPs must go in after the run's last dispatch, not at once."""
    gate = Gate()
    ex = dagexec.Executor(workers=2, queue_cap=2)
    g = dagexec.Graph()
    g.add("x", gate.gated(lambda: 0))
    for i in range(20):
        g.add(i, lambda x, i=i: i, deps=["x"])
    results: list[object] = []
    driver = threading.Thread(target=lambda: results.append(dict(ex.run(g))))
    driver.start()
    try:
        assert gate.wait_for_waiting(1)
        ex.shutdown(wait=False)
    finally:
        gate.open()
        driver.join()
    assert results == [{i: i for i in range(20)}]
    ex.shutdown()  # joins every thread
    assert not any(t.is_alive() for t in ex._threads)


def test_after_ctrl_c_the_next_run_waits_for_the_tasks_still_running(
    ex: dagexec.Executor,
) -> None:
    gate = Gate()
    g = dagexec.Graph()
    g.add("x", lambda: (sigint_main_thread(), gate.wait())[1])
    with pytest.raises(KeyboardInterrupt):
        ex.run(g)
    assert gate.waiting == 1  # raised while its task still runs
    saw_x_over: list[bool] = []
    later = dagexec.Graph()
    later.add("y", lambda: saw_x_over.append(gate.is_open) or "y")
    future = ex.submit(later)  # queued behind the interrupted run's last task
    gate.open()
    assert future.result(10)["y"] == "y"
    assert saw_x_over == [True]


class Deadline(Exception):
    """What a program's own signal handler raises (a SIGALRM watchdog, say)."""


def test_an_exception_from_another_signal_handler_is_raised_at_once() -> None:
    """Such a handler can raise at any line of the driver: the run is stopped
    without trusting its state, the caller gets the exception while a task still
    runs, and the next run waits for that task."""
    gate = Gate()

    def on_usr1(signum: int, frame: object) -> None:
        raise Deadline("too slow")

    g = dagexec.Graph()
    g.add(
        "x",
        lambda: (
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1),
            gate.wait(),
        )[1],
    )
    for i in range(20):
        g.add(i, lambda x, i=i: i, deps=["x"])
    previous = signal.signal(signal.SIGUSR1, on_usr1)
    try:
        with dagexec.Executor(workers=2) as ex:
            with pytest.raises(Deadline) as info:
                ex.run(g)
            assert gate.waiting == 1  # raised while its task still runs
            assert any("was stopped" in note for note in info.value.__notes__)
            ended: list[int] = []
            later = dagexec.Graph()
            later.add("y", lambda: ended.append(gate.waiting) or "y")
            future = ex.submit(later)
            gate.open()
            assert future.result(10)["y"] == "y"
            assert ended == [0]  # y started after x had left the gate
            assert ex.run(fan())["sink"] == 36
    finally:
        gate.open()
        signal.signal(signal.SIGUSR1, previous)
