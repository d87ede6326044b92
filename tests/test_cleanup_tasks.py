"""Cleanup tasks (run_if="all_done"): they start only once every ancestor has
ended and none still runs, and they run after every kind of stop.

Issue 19, "Cleanup tasks (run_if="all_done")". Where a test checks that a
cleanup task does *not* start while an ancestor still runs, it watches for
``NOT_YET`` seconds (an ``Event.wait`` that must time out), then lets the
ancestor go: on the old code the cleanup task started at once.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import dagexec
from dagexec import Graph, TaskState, TaskTimeout, current_task
from dagexec.testing import Gate

WAIT = 10.0  # bounds waits that end long before it
NOT_YET = 0.5  # how long a test watches for something that must not happen
CHILD = Path(__file__).with_name("cleanup_sigint_child.py")


class Scratch:
    """A scratch directory's life: items write while it exists, cleanup deletes it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writing = 0
        self.writing_at_cleanup: int | None = None
        self.cleanup_started = threading.Event()

    def item(self, gate: Gate) -> object:
        def write(i: int) -> int:
            if i == 0:  # fails once the others are writing
                assert gate.wait_for_waiting(3)
                raise OSError("item 0 failed")
            with self.lock:
                self.writing += 1
            try:
                gate.wait()
            finally:
                with self.lock:
                    self.writing -= 1
            return i

        return write

    def delete(self, *ended: object) -> str:
        with self.lock:
            self.writing_at_cleanup = self.writing
        self.cleanup_started.set()
        return "deleted"


@pytest.mark.parametrize("on_error", ["raise", "continue"])
def test_a_cleanup_waits_for_map_items_still_running_after_one_failed(on_error: str) -> None:
    # Today the cleanup deleted the scratch directory under the items still writing.
    scratch, gate = Scratch(), Gate()
    g = Graph()
    g.add("files", lambda: [0, 1, 2, 3])
    g.map("write", scratch.item(gate), over="files")
    g.add("delete", scratch.delete, deps=["write"], run_if="all_done")
    with dagexec.Executor(4) as ex:
        future = ex.submit(g, on_error=on_error)
        assert gate.wait_for_waiting(3)
        assert not scratch.cleanup_started.wait(NOT_YET)  # items 1-3 still write
        gate.open()
        if on_error == "raise":
            with pytest.raises(OSError, match="item 0 failed"):
                future.result(WAIT)
        else:
            result = future.result(WAIT)
            assert result.status["delete"] is TaskState.DONE
    assert scratch.writing_at_cleanup == 0


def test_a_cleanup_waits_for_every_ancestor_not_only_its_dependencies() -> None:
    # x fails; 'join' (needs x and the still running 'slow') is skipped at once,
    # which used to be enough for the cleanup below it.
    gate = Gate()
    started = threading.Event()
    g = Graph()

    def fail() -> None:
        raise ValueError("x failed")

    g.add("x", fail)
    g.add("slow", lambda: gate.wait() or "slow")
    g.add("join", lambda a, b: (a, b), deps=["x", "slow"])
    g.add("clean", lambda j: started.set(), deps=["join"], run_if="all_done")
    with dagexec.Executor(2) as ex:
        future = ex.submit(g, on_error="continue")
        assert gate.wait_for_waiting(1)
        assert not started.wait(NOT_YET)
        gate.open()
        result = future.result(WAIT)
    assert result.status["slow"] is TaskState.DONE
    assert result.status["clean"] is TaskState.DONE


def test_a_cleanup_waits_for_a_timed_out_attempt_still_running() -> None:
    hung = threading.Event()
    returned = threading.Event()
    got: list[object] = []

    def hang() -> None:
        hung.wait(WAIT)  # overruns its timeout, ignoring its token
        returned.set()

    def clean(x: object) -> None:
        got.append((x, returned.is_set()))

    g = Graph()
    g.add("hang", hang, timeout=0.05)
    g.add("clean", clean, deps=["hang"], run_if="all_done")
    with dagexec.Executor(2) as ex:
        future = ex.submit(g, on_error="continue")
        assert not future.done() and got == []
        assert not returned.wait(NOT_YET)
        assert got == []  # hang timed out long ago, but its thread still runs
        hung.set()
        result = future.result(WAIT)
    assert result.status["hang"] is TaskState.FAILED
    (value, after_return), *_ = got
    assert isinstance(value, TaskTimeout) and after_return


def test_a_cleanup_waits_at_most_its_own_timeout_then_runs_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hung = threading.Event()
    got: list[object] = []

    def hang() -> None:
        hung.wait(WAIT)

    g = Graph()
    g.add("hang", hang, timeout=0.05)
    g.add("clean", lambda x: got.append(x) or "ran", deps=["hang"], run_if="all_done", timeout=0.3)
    try:
        with caplog.at_level(logging.WARNING, logger="dagexec"):
            t0 = time.monotonic()
            result = dagexec.run(g, workers=2, on_error="continue")
            waited = time.monotonic() - t0
    finally:
        hung.set()
    assert result["clean"] == "ran"
    assert isinstance(got[0], TaskTimeout)
    assert waited >= 0.3  # it did wait for 'hang'...
    assert any(
        "cleanup task 'clean' waited its timeout for 'hang'" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


# ------------------------------------------------------- after every kind of stop
def _lock_graph(
    lock: threading.Lock, released: threading.Event, working: threading.Event | None = None
) -> Graph:
    """take (the lock) -> work (waits for its token: the run's stop) -> release
    (run_if="all_done")."""

    def take() -> str:
        lock.acquire()
        return "taken"

    def work(taken: str) -> str:
        if working is not None:
            working.set()
        current_task().cancelled.wait(WAIT)
        return "worked"

    def release(*ended: object) -> str:
        lock.release()
        released.set()
        return "released"

    g = Graph()
    g.add("take", take)
    g.add("work", work, deps=["take"])
    g.add("release", release, deps=["take", "work"], run_if="all_done")
    return g


def test_a_cleanup_runs_after_cancel_and_the_future_is_done_at_once() -> None:
    # Today a cancel cancelled the cleanup task: the lock stayed held.
    lock, released, working = threading.Lock(), threading.Event(), threading.Event()
    with dagexec.Executor(2) as ex:
        future = ex.submit(_lock_graph(lock, released, working))
        assert working.wait(WAIT)  # 'take' ran; 'work' waits for the stop
        assert future.cancel()
        assert future.done()  # at once: the cleanup runs in the background
        assert released.wait(WAIT)
        nxt = Graph()
        nxt.add("x", lambda: "x")
        assert ex.submit(nxt).result(WAIT)["x"] == "x"
    assert not lock.locked()


def test_a_cleanup_runs_after_the_run_timeout_before_the_caller_raises() -> None:
    lock, released = threading.Lock(), threading.Event()
    with pytest.raises(TimeoutError):
        dagexec.run(_lock_graph(lock, released), workers=2, timeout=0.2)
    assert released.is_set()  # the caller stayed while the cleanup ran
    assert not lock.locked()


def test_a_cleanup_runs_after_a_submitted_run_timeout_before_the_future_fails() -> None:
    lock, released = threading.Lock(), threading.Event()
    with dagexec.Executor(2) as ex:
        future = ex.submit(_lock_graph(lock, released), timeout=0.2)
        with pytest.raises(TimeoutError, match="timed out after 0.2 s"):
            future.result(WAIT)
        assert released.is_set()
    assert not lock.locked()


def test_a_cleanup_queued_when_the_run_stops_still_runs() -> None:
    # A stop takes back what is queued; a cleanup task among it used to be
    # cancelled with the rest.
    gate = Gate()
    ran: list[str] = []
    handled = threading.Event()  # the scheduler took 'clean' back (and maybe re-sent it)

    class Watch(dagexec.Callback):
        dispatched = 0

        def on_task_dispatch(self, name: object, worker: int) -> None:
            if name == "clean":
                self.dispatched += 1
                if self.dispatched == 2:
                    handled.set()

        def on_task_end(self, name: object, state: TaskState, seconds: float) -> None:
            if name == "clean" and state is TaskState.CANCELLED:
                handled.set()

    g = Graph()
    g.add("block", lambda: gate.wait() or "b", priority=1)
    g.add("clean", lambda: ran.append("clean"), run_if="all_done")
    # One worker: 'block' runs, 'clean' is queued behind it.
    with dagexec.Executor(1, queue_cap=8) as ex:
        future = ex.submit(g, callbacks=[Watch()])
        assert gate.wait_for_waiting(1)
        assert future.cancel()
        assert handled.wait(WAIT)
        gate.open()
        nxt = Graph()
        nxt.add("x", lambda: "x")
        assert ex.submit(nxt).result(WAIT)["x"] == "x"
    assert ran == ["clean"]


# ------------------------------------------------- Ctrl-C: real SIGINTs, in a child
def _child(mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _go(child: subprocess.Popen[str]) -> None:
    """Let the child's cleanup task finish."""
    assert child.stdin is not None
    child.stdin.write("GO\n")
    child.stdin.flush()


def _end(child: subprocess.Popen[str]) -> None:
    child.kill()  # a no-op if it ended
    child.wait()
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            pipe.close()


def _read_rest(child: subprocess.Popen[str], seen: list[str]) -> list[str]:
    """Every line left, through the same buffered reader (``communicate`` would
    miss what that reader already took from the pipe)."""
    assert child.stdout is not None
    seen += [line.strip() for line in child.stdout]
    child.wait(60)
    return seen


def _read_until(child: subprocess.Popen[str], wanted: str, seen: list[str]) -> None:
    assert child.stdout is not None
    for line in child.stdout:
        seen.append(line.strip())
        if line.strip() == wanted:
            return
    raise AssertionError(f"the child ended without saying {wanted!r}: {seen}")


@pytest.mark.parametrize("mode", ["plain", "queued"])
def test_the_first_ctrl_c_waits_for_cleanup_tasks_then_raises(mode: str) -> None:
    child = _child(mode)
    seen: list[str] = []
    try:
        _read_until(child, "WORKING", seen)
        child.send_signal(signal.SIGINT)
        _read_until(child, "CLEANUP START", seen)  # the caller has not raised yet
        _go(child)
        lines = _read_rest(child, seen)
    finally:
        _end(child)
    assert "CLEANUP END" in lines
    assert lines.index("CLEANUP END") < lines.index("RAISED KeyboardInterrupt")
    assert lines[-1] == "LOCK FREE"


@pytest.mark.parametrize("mode", ["plain", "queued"])
def test_a_second_ctrl_c_raises_at_once_and_abandons_cleanup_tasks(mode: str) -> None:
    child = _child(mode)  # never told GO: its cleanup task would wait forever
    seen: list[str] = []
    try:
        _read_until(child, "WORKING", seen)
        child.send_signal(signal.SIGINT)
        _read_until(child, "CLEANUP START", seen)
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        _read_until(child, "RAISED KeyboardInterrupt", seen)
        raised_after = time.monotonic() - t0
        _read_rest(child, seen)
    finally:
        _end(child)
    assert raised_after < 5.0, raised_after  # not waiting for the cleanup task
    assert "CLEANUP END" not in seen
    assert "LOCK HELD" in seen


def test_ctrl_c_without_a_cleanup_task_stays_prompt() -> None:
    child = _child("nocleanup")
    seen: list[str] = []
    try:
        _read_until(child, "WORKING", seen)
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        _read_until(child, "RAISED KeyboardInterrupt", seen)
        raised_after = time.monotonic() - t0
        _read_rest(child, seen)
    finally:
        _end(child)
    assert raised_after < 2.0, raised_after


# --------------------------------------------------------------------- the docs
DOC = Path(__file__).resolve().parent.parent / "docs" / "cancel-and-cleanup.md"


def _doc_blocks() -> list[tuple[int, str]]:
    text = DOC.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 2, m.group(1))
        for m in re.finditer(r"```python\n(.*?)```", text, re.S)
    ]


@pytest.mark.parametrize(("line", "code"), _doc_blocks(), ids=lambda v: str(v)[:12])
def test_the_docs_python_blocks_run(
    line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    source = "\n" * (line - 1) + code  # a traceback points into the page
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, str(DOC), "exec"), {"__name__": "__doc__"})


def test_a_cleanup_waits_for_a_fused_chain_still_running() -> None:
    # A guard more than a regression test: a chain's members end with the chain.
    gate = Gate()
    started = threading.Event()

    def fail() -> None:
        assert gate.wait_for_waiting(1)  # once the chain runs
        raise ValueError("x failed")

    g = Graph()
    g.add("x", fail)
    g.add("c0", lambda: gate.wait() or 0)
    g.add("c1", lambda v: v + 1, deps=["c0"])
    g.add("c2", lambda v: v + 1, deps=["c1"])
    g.add("clean", lambda x, c: started.set(), deps=["x", "c2"], run_if="all_done")
    plan = dagexec._core.plan.plan_run(g._compile(), None)
    assert plan.chain_next[plan.index["c0"]] == plan.index["c1"]  # fused
    with dagexec.Executor(2) as ex:
        future = ex.submit(g)
        assert gate.wait_for_waiting(1)
        assert not started.wait(NOT_YET)  # x failed, the chain still runs
        gate.open()
        with pytest.raises(ValueError, match="x failed"):
            future.result(WAIT)
    assert started.is_set()


def test_a_cleanup_task_waits_for_an_attempt_the_run_let_go_at_its_timeout() -> None:
    """The attempt timed out and its worker was replaced (the run let go of it), but
    its function still runs: the cleanup task starts only once it has returned."""
    timed_out, release = threading.Event(), threading.Event()
    returned: list[bool] = []
    seen_at_cleanup: list[bool] = []

    def hang() -> None:
        release.wait(WAIT)
        returned.append(True)

    class Watch:
        def on_task_timeout(self, name: object, attempt: int) -> None:
            timed_out.set()

    g = Graph()
    g.add("hang", hang, timeout=0.05)
    g.add(
        "clean",
        lambda h: seen_at_cleanup.append(bool(returned)),
        deps=["hang"],
        run_if="all_done",
    )
    with dagexec.Executor(workers=2) as ex:
        future = ex.submit(g, on_error="continue", callbacks=[Watch()])
        assert timed_out.wait(WAIT)
        assert not future.done()  # the cleanup task waits for the attempt
        release.set()
        result = future.result(timeout=WAIT)
    assert seen_at_cleanup == [True]
    assert result.status["clean"] is TaskState.DONE
