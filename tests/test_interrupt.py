"""Ctrl-C during a run: prompt, clean, and nothing leaks into the next run."""

from __future__ import annotations

import _thread
import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

import dagexec
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
