"""isolate="process" (issue 30): one deadline per attempt, nothing outlives its attempt,
scripts load as they were started, clear errors for what cannot travel.

Processes a task starts are held at a :class:`process_tasks.ProcessGate`: no sleeps
to synchronise. Whether a killed process is gone is polled (the kernel ends it
asynchronously), within a bound.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import process_slow_import
import process_tasks as pt
import pytest

import dagexec
from dagexec._core.isolate import IsolatedCall
from dagexec._core.policy import CurrentTask
from dagexec._engine.process import process_pool, sharing

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}


alive = pt.alive


def gone(pid: int, within: float = 10.0) -> bool:
    """True once ``pid`` no longer runs (SIGKILL takes effect asynchronously)."""
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def no_idle_child() -> None:
    """No idle child to share: a new executor's first process task starts its own."""
    sharing.end_idle_children()


@pytest.fixture(scope="module")
def ex() -> Iterator[dagexec.Executor]:
    with dagexec.Executor(workers=1) as executor:
        g = dagexec.Graph()
        g.add("warm", pt.pid, isolate="process")
        # Its scheduler thread (submit's), its child and the spawner thread start
        # now, outside any test: the no-leaked-threads check compares each test's.
        executor.submit(g).result()
        yield executor


# -- 1. one deadline per attempt -------------------------------------------------------


def test_a_hanging_import_of_the_tasks_module_times_out(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("hangs", process_slow_import.task, timeout=0.5, isolate="process")
    future = ex.submit(g, on_error="continue")
    try:
        result = future.result(timeout=20)  # before: never (the import is not timed)
    finally:
        future.cancel()
    assert isinstance(result.errors["hangs"], dagexec.TaskTimeout)


def test_a_hanging_unpickling_of_an_argument_times_out(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("hangs", pt.pid, args=(pt.SlowToUnpickle(),), timeout=0.5, isolate="process")
    future = ex.submit(g, on_error="continue")
    try:
        result = future.result(timeout=20)
    finally:
        future.cancel()
    assert isinstance(result.errors["hangs"], dagexec.TaskTimeout)


def test_a_value_that_came_in_time_is_saved_though_the_child_started_slowly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_idle_child: None
) -> None:
    # A cold child that takes 0.8 s to start (within the start-up allowance), and a
    # task of timeout=0.5 that is quick: the attempt succeeds and must be saved
    # (before, the checkpoint's own clock, from the parent's start, refused it).
    assert getattr(process_pool, "STARTUP_ALLOWANCE", 2.0) > 0.8
    monkeypatch.setattr(
        process_pool, "_BOOT", "import time; time.sleep(0.8)\n" + process_pool._BOOT
    )
    calls, store = tmp_path / "calls", str(tmp_path / "ckpt")
    g = dagexec.Graph()
    g.add("upload", pt.count_call, args=(str(calls),), timeout=0.5, isolate="process")
    for _ in range(2):
        with dagexec.Executor(workers=1) as cold:  # the first starts a new child
            assert cold.run(g, checkpoint=store)["upload"] == 1
    assert calls.read_text().count("x") == 1  # the second run loaded it


def test_a_cold_attempt_gets_the_start_up_allowance_and_no_more(
    monkeypatch: pytest.MonkeyPatch, no_idle_child: None
) -> None:
    # A child that takes longer than the allowance to start fails the attempt.
    monkeypatch.setattr(process_pool, "STARTUP_ALLOWANCE", 0.2)
    monkeypatch.setattr(
        process_pool, "_BOOT", "import time; time.sleep(1.0)\n" + process_pool._BOOT
    )
    g = dagexec.Graph()
    g.add("quick", pt.square, args=(3,), timeout=0.3, isolate="process")
    with dagexec.Executor(workers=1) as cold:
        result = cold.run(g, on_error="continue")
    assert isinstance(result.errors["quick"], dagexec.TaskTimeout)


def test_an_answer_read_after_the_deadline_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker thread is late to read a reply the child sent in time (a busy
    # parent): the attempt has timed out by the time it is read, so it fails.
    late = threading.Event()

    class LatePoll:
        def __init__(self) -> None:
            self.poll_ = select.poll()

        def register(self, fd: int, mask: int) -> None:
            self.poll_.register(fd, mask)

        def poll(self, ms: float) -> list[Any]:
            ready = self.poll_.poll(ms)
            if ready and late.is_set():
                time.sleep(0.6)  # the parent is busy elsewhere: not a synchronisation
            return ready

    fake = SimpleNamespace(poll=LatePoll, POLLIN=select.POLLIN)
    monkeypatch.setattr(process_pool, "select", fake)
    slot = process_pool.ChildSlot()
    info = CurrentTask("sq", 1, threading.Event())
    try:
        assert slot.run(IsolatedCall(pt.square, "sq", "process", None, False, ()), (3,), info) == 9
        late.set()
        timed = IsolatedCall(pt.square, "sq", "process", 0.3, False, ())
        with pytest.raises(dagexec.TaskTimeout):
            slot.run(timed, (4,), info)
    finally:
        slot.close()


# -- 2. nothing outlives its attempt ---------------------------------------------------


def test_a_timeout_kills_what_the_task_started(ex: dagexec.Executor, gate: pt.ProcessGate) -> None:
    g = dagexec.Graph()
    g.add("compile", pt.start_grandchild, args=(gate.directory,), timeout=1.0, isolate="process")
    result = ex.run(g, on_error="continue")
    assert isinstance(result.errors["compile"], dagexec.TaskTimeout)
    grandchild, child = gate.wait_for_arrivals(2)
    assert gone(child) and gone(grandchild)


def test_a_stop_kills_what_the_task_started(ex: dagexec.Executor, gate: pt.ProcessGate) -> None:
    g = dagexec.Graph()
    g.add("compile", pt.start_grandchild, args=(gate.directory,), isolate="process")
    future = ex.submit(g)
    grandchild, child = gate.wait_for_arrivals(2)
    future.cancel()
    with pytest.raises(CancelledError):
        future.result(timeout=20)
    assert gone(child) and gone(grandchild)


def test_a_crash_kills_what_the_task_started(ex: dagexec.Executor, gate: pt.ProcessGate) -> None:
    g = dagexec.Graph()
    g.add("crash", pt.start_grandchild_and_exit, args=(gate.directory,), isolate="process")
    result = ex.run(g, on_error="continue")
    err = result.errors["crash"]
    assert isinstance(err, dagexec.WorkerCrashed) and err.exitcode == 7  # its own code
    (grandchild,) = gate.wait_for_arrivals(1)
    assert gone(grandchild)


def test_an_idle_child_ending_kills_what_earlier_tasks_of_it_left(
    gate: pt.ProcessGate, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = dagexec.Graph()
    g.add("daemon", pt.start_grandchild, args=(gate.directory, False), isolate="process")
    g.add("next", pt.pid, deps=["daemon"], isolate="process")
    with dagexec.Executor(workers=1) as own:
        result = own.run(g, targets=["daemon", "next"])
        (grandchild,) = gate.wait_for_arrivals(1)
        assert result["daemon"] == grandchild and alive(grandchild)  # left running
    assert result["next"] in sharing.idle_children() and alive(grandchild)  # kept, shared
    monkeypatch.setattr(sharing, "IDLE_TIMEOUT", 0.0)
    sharing.check_in(sharing.check_out(process_pool.ChildSlot))  # the next use ends it
    assert gone(grandchild) and not alive(result["next"])  # with its child's group


def test_interpreter_exit_kills_what_a_running_task_started(tmp_path: Path) -> None:
    gate = pt.ProcessGate(tmp_path)
    try:
        script = textwrap.dedent(
            f"""
            import dagexec, process_tasks as pt
            g = dagexec.Graph()
            g.add("held", pt.start_grandchild, args=({gate.directory!r},), isolate="process")
            ex = dagexec.Executor(workers=1)
            future = ex.submit(g)
            import sys; sys.stdin.readline()  # the test says when to exit
            """
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, env=ENV, cwd=ROOT
        )
        grandchild, child = gate.wait_for_arrivals(2)
        assert proc.stdin is not None
        proc.stdin.close()  # exit without shutdown, the task still held
        assert proc.wait(timeout=30) is not None
        assert gone(child) and gone(grandchild)
    finally:
        gate.open()
        gate.close()


# -- 4. scripts load as they were started ----------------------------------------------


def _package(root: Path) -> None:
    pkg = root / "jobs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    body = textwrap.dedent(
        """
        import dagexec
        from .helpers import double

        def work(x):
            return double(x) + 1

        if __name__ == "__main__":
            g = dagexec.Graph()
            g.add("w", work, args=(20,), isolate="process")
            print("RESULT", dagexec.run(g, workers=1)["w"], flush=True)
        """
    )
    (pkg / "upload.py").write_text(body)
    (pkg / "__main__.py").write_text(body)


@pytest.mark.parametrize("module", ["jobs.upload", "jobs"])
def test_a_script_run_with_python_m_loads_in_its_package(tmp_path: Path, module: str) -> None:
    _package(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", module], capture_output=True, text=True, cwd=tmp_path, env=ENV
    )
    assert out.returncode == 0, out.stderr
    assert "RESULT 41" in out.stdout


def test_an_unguarded_script_does_not_run_its_pipeline_again_in_a_child(tmp_path: Path) -> None:
    log = tmp_path / "log"
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os
            import dagexec

            def work(x):
                return x + 1

            depth = int(os.environ.get("UNGUARDED_DEPTH", "0"))
            os.environ["UNGUARDED_DEPTH"] = str(depth + 1)
            with open({str(log)!r}, "a") as f:
                f.write(f"top {{depth}}\\n")
            if depth < 2:  # (before the fix: bounded, so the test cannot recurse for ever)
                g = dagexec.Graph()
                g.add("w", work, args=(1,), isolate="process")
                print("RESULT", dagexec.run(g, workers=1)["w"], flush=True)
                with open({str(log)!r}, "a") as f:
                    f.write(f"ran {{depth}}\\n")
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=ENV)
    assert out.returncode != 0
    assert 'if __name__ == "__main__":' in out.stderr
    assert "task 'w'" in out.stderr
    # The child ran the script's top level (documented) but not its pipeline.
    assert log.read_text().splitlines() == ["top 0", "top 1"]


# -- 5. what cannot travel -------------------------------------------------------------


class LockedName:
    """A task name that does not pickle."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        return "<locked name>"


def test_a_task_name_that_does_not_pickle_travels_as_its_description(
    ex: dagexec.Executor,
) -> None:
    name = LockedName()
    g = dagexec.Graph()
    g.add(name, pt.my_name, isolate="process")
    assert ex.run(g)[name] == "<locked name>"


def test_an_exception_that_does_not_unpickle_is_rebuilt_so_retry_on_matches(
    ex: dagexec.Executor, tmp_path: Path
) -> None:
    calls = tmp_path / "calls"
    g = dagexec.Graph()
    g.add(
        "odd",
        pt.raise_two_arg_error_counted,
        args=(str(calls),),
        retries=1,
        retry_on=(pt.TwoArgError,),
        isolate="process",
    )
    result = ex.run(g, on_error="continue")
    err = result.errors["odd"]
    assert type(err) is pt.TwoArgError and str(err) == "1 and 2"
    assert calls.read_text().count("x") == 2  # retried: retry_on matched
    notes = "\n".join(err.__notes__)
    assert "rebuilt in the parent" in notes and "task 'odd'" in notes
    assert "__reduce__" in notes  # the fix


def test_an_exception_that_does_not_pickle_is_rebuilt_as_its_type(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("locked", pt.raise_locked_error, isolate="process")
    with pytest.raises(pt.LockedError, match="holds a lock") as info:
        ex.run(g)
    notes = "\n".join(info.value.__notes__)
    assert "cannot be pickled" in notes and "lock" in notes
    assert "raise_locked_error" in notes  # the child's traceback


def test_an_unpicklable_argument_names_its_task_parameter_and_fix(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("src", pt.give_lock)
    g.add("use", pt.length, deps=["src"], isolate="process")
    with pytest.raises(TypeError) as info:
        ex.run(g)
    message = str(info.value)
    assert "task 'use'" in message and "parameter 'data'" in message
    assert "drop isolate" in message
