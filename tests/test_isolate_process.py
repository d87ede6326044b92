"""isolate="process": tasks in reused child processes, under the run's bounds.

One executor serves most tests of this module (children start once, ~50-100 ms
each). Process tasks are held at a :class:`process_tasks.ProcessGate` (FIFOs), thread
tasks at a :class:`dagexec.testing.Gate`: no sleeps.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import process_tasks as pt
import pytest

import dagexec
from dagexec._engine.process import sharing
from dagexec._engine.process.process_pool import live_children
from dagexec.testing import Gate, InFlightRecorder, assert_within_bounds

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


alive = pt.alive


@pytest.fixture(scope="module")
def ex() -> Iterator[dagexec.Executor]:
    # An explicit queue_cap: the bounds tests below fill the inboxes, which the
    # memory-aware default (no bound given) would keep shallower.
    with dagexec.Executor(workers=2, queue_cap=8) as executor:
        # Start its scheduler thread (submit's) and both children now, outside any
        # test: the no-leaked-threads check compares each test's threads.
        executor.submit(_pid_graph()).result()
        yield executor


# -- values in and out ---------------------------------------------------------


def test_values_go_in_and_out_by_pickle(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("a", pt.scale, args=(3,), kwargs={"factor": 2, "offset": 1}, isolate="process")
    g.add("b", pt.add, deps={"a": "a", "b": "a"}, isolate="process")
    g.add("point", pt.Point, args=(1, 2))  # a thread task: its value crosses to a child
    g.add("flipped", pt.flip, deps=["point"], isolate="process")
    g.add("here", os.getpid)
    g.add("there", pt.pid, deps=["b"], isolate="process")
    result = ex.run(g, targets=["a", "b", "flipped", "here", "there"])
    assert result["a"] == 7 and result["b"] == 14
    assert result["flipped"] == pt.Point(2, 1)
    assert result["there"] != result["here"] == os.getpid()


def test_decorator_and_map_run_in_children(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()

    g.add("items", list, args=(range(6),))
    g.map("squares", pt.square, over="items", isolate="process")
    g.task(name="sum", deps=["squares"], isolate="process")(pt.total)
    g.map("pids", pt.pid, over="items", isolate="process")
    result = ex.run(g, targets=["squares", "sum", "pids"])
    assert result["squares"] == [0, 1, 4, 9, 16, 25]
    assert result["sum"] == 55
    assert os.getpid() not in result["pids"]
    # Children are reused: six items ran in at most two processes (two workers).
    assert 1 <= len(set(result["pids"])) <= 2


def test_children_are_reused_across_runs(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("items", list, args=(range(8),))
    g.map("pids", pt.pid, over="items", isolate="process")
    first = set(ex.run(g)["pids"])
    second = set(ex.run(g)["pids"])
    assert first | second <= set(live_children())


def test_large_values_cross_intact(ex: dagexec.Executor) -> None:
    data = bytes(range(256)) * 20_000  # 5 MB: through /dev/shm where it has room
    g = dagexec.Graph()
    g.add("len", pt.length, args=(data,), isolate="process")
    g.add("made", pt.make_bytes, args=(len(data),), isolate="process")
    g.add("mutable", pt.append_one, args=(bytearray(data),), isolate="process")
    result = ex.run(g)
    assert result["len"] == ("bytes", len(data))
    assert result["made"] == data
    assert isinstance(result["mutable"], bytearray) and result["mutable"][-1] == 1
    assert not _segments()


def _segments() -> list[str]:
    prefix = f"dagexec-{os.getpid()}-"
    shm = Path("/dev/shm")
    return [p.name for p in shm.iterdir() if p.name.startswith(prefix)] if shm.is_dir() else []


def test_a_task_error_reaches_the_caller_as_itself(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("bad", pt.fail, isolate="process")
    with pytest.raises(ValueError, match="failed in the child") as info:
        ex.run(g)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "raised by task 'bad'" in notes and "in the child process" in notes


@pytest.mark.parametrize("theirs", [("theirs",), "theirs"], ids=["tuple", "str"])
def test_a_task_error_with_notes_add_note_refuses_still_reaches_the_caller(
    ex: dagexec.Executor, theirs: object
) -> None:
    """``add_note`` refuses ``__notes__`` that is not a list: the child's traceback
    note is added the way the thread path adds its own (the child used to die on it,
    reported as WorkerCrashed)."""
    g = dagexec.Graph()
    g.add("bad", pt.fail_with_notes, args=(theirs,), isolate="process")
    with pytest.raises(ValueError, match="noted") as info:
        ex.run(g)
    notes = info.value.__notes__
    assert notes[0] == "theirs" and notes[-1] == "dagexec: raised by task 'bad'"
    assert notes[1].startswith("dagexec: in the child process (pid ")
    assert len(notes) == 3


def test_a_forked_copy_that_returns_never_answers() -> None:
    """A task forks and its copy returns from the task as well: only the child
    answers, the copy ends without reading or answering, and the child's next calls
    get their own answers (each answer used to shift by one: silent wrong values)."""
    g = dagexec.Graph()
    g.add("forks", pt.fork_and_return, isolate="process")
    g.add("pid", pt.pid, deps=["forks"], isolate="process")
    with dagexec.Executor(workers=1) as one:  # one child: every call goes to it
        first = one.run(g, ["forks", "pid"])
        assert first["forks"] == "from the child"
        again = one.run(g, ["forks", "pid"])
    assert again["forks"] == "from the child" and again["pid"] == first["pid"]


def test_sys_path_added_after_the_children_started(
    ex: dagexec.Executor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ex.run(_pid_graph())  # the children exist before the path changes
    (tmp_path / "late_module_for_isolate.py").write_text("def triple(x):\n    return 3 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import late_module_for_isolate  # type: ignore[import-not-found]

    g = dagexec.Graph()
    g.add("t", late_module_for_isolate.triple, args=(5,), isolate="process")
    assert ex.run(g)["t"] == 15


def _pid_graph() -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("items", list, args=(range(2),))
    g.map("pids", pt.pid, over="items", isolate="process")
    return g


# -- checks at add and at send ---------------------------------------------------


def test_add_rejects_what_a_child_cannot_find() -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=r"task 'l'.*a lambda.*top level of a module"):
        g.add("l", lambda: 1, isolate="process")

    def nested() -> int:
        return 1

    with pytest.raises(TypeError, match=r"task 'n'.*defined inside another function"):
        g.add("n", nested, isolate="process")
    with pytest.raises(TypeError, match=r"task 'd'.*defined inside another"):
        g.task(name="d", isolate="process")(nested)
    with pytest.raises(ValueError, match=r"task 'x': isolate must be None .* got 'thread'"):
        g.add("x", pt.pid, isolate="thread")
    assert len(g) == 0  # nothing half-added


def test_add_rejects_a_function_of_a_main_without_a_file() -> None:
    code = textwrap.dedent(
        """
        import dagexec
        def f():
            return 1
        g = dagexec.Graph()
        try:
            g.add("f", f, isolate="process")
        except TypeError as exc:
            print(exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert "__main__ that has no file" in out and "move it into a .py module" in out


def test_an_unpicklable_argument_fails_its_task_naming_the_parameter(
    ex: dagexec.Executor,
) -> None:
    g = dagexec.Graph()
    g.add("lock", pt.give_lock)  # a thread task returning an unpicklable value
    g.add("use", pt.length, deps=["lock"], isolate="process")
    g.add("const", pt.length, args=(threading.Lock(),), isolate="process")
    g.add("fine", pt.square, args=(3,), isolate="process")
    result = ex.run(g, on_error="continue")
    use, const = result.errors["use"], result.errors["const"]
    assert isinstance(use, TypeError) and isinstance(const, TypeError)
    assert "task 'use': parameter 'data' (the value of task 'lock')" in str(use)
    assert "task 'const': args[0] (a constant), a lock," in str(const)
    assert "drop isolate" in str(use)
    assert result["fine"] == 9


def test_an_unpicklable_value_fails_its_task(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("lock", pt.give_lock, isolate="process")
    with pytest.raises(TypeError, match=r"task 'lock': its value cannot be pickled"):
        ex.run(g)


# -- bounds across threads and processes -------------------------------------------


def test_workers_bound_threads_and_processes_together(
    ex: dagexec.Executor, gate: pt.ProcessGate
) -> None:
    thread_gate = Gate()
    g = dagexec.Graph()
    for i in range(3):
        g.add(("p", i), pt.held, args=(gate.directory,), isolate="process")
        g.add(("t", i), thread_gate.gated(pt.pid))
    recorder = InFlightRecorder()
    future = ex.submit(g, callbacks=[recorder])
    try:
        # Two running and one queued behind each (a run with process tasks keeps
        # inboxes one deep): the other two wait to be dispatched.
        assert recorder.wait_for_in_flight(4)
        held = _held(gate, thread_gate, ex.workers)
        assert held == ex.workers  # two run, whichever kind
        with pytest.raises(AssertionError):  # and no third starts, thread or process
            gate.wait_for_arrivals(ex.workers - thread_gate.waiting + 1, timeout=0.3)
        assert thread_gate.waiting + len(gate.pids) == ex.workers
    finally:
        gate.open()
        thread_gate.open()
    result = future.result()
    assert_within_bounds(result)
    assert max(result.stats.peak_queue_depth) == 1 and sum(result.stats.tasks_per_worker) == 6


def _held(gate: pt.ProcessGate, thread_gate: Gate, want: int) -> int:
    """Tasks held at either gate once ``want`` of them are (fails after 10 s)."""
    for _ in range(1000):
        try:
            gate.wait_for_arrivals(want - thread_gate.waiting, timeout=0.01)
        except AssertionError:
            continue
        return thread_gate.waiting + len(gate.pids)
    raise AssertionError("tasks never reached the gates")


# -- timeouts, crashes, stops ---------------------------------------------------------


def test_a_timeout_kills_the_child_and_fails_at_once(
    ex: dagexec.Executor, gate: pt.ProcessGate
) -> None:
    g = dagexec.Graph()
    g.add("slow", pt.held, args=(gate.directory, b"x" * (2 << 20)), timeout=1.0, isolate="process")
    g.add("after", pt.square, args=(4,), isolate="process", run_if="all_done")
    result = ex.run(g, on_error="continue", targets=["slow", "after"])
    err = result.errors["slow"]
    assert isinstance(err, dagexec.TaskTimeout) and err.timeout == 1.0 and err.killed
    assert result.stats.timeouts == 1
    (pid,) = gate.wait_for_arrivals(1)
    assert not alive(pid)  # killed and reaped before the task was reported
    assert result["after"] == 16  # the worker took the next task: nothing abandoned
    assert not _segments()


def test_a_returned_timeout_object_is_a_value_not_a_timeout(ex: dagexec.Executor) -> None:
    # A value is a value, whatever its type: a process task that returns the
    # exception its worker reports a killed child with did not time out.
    g = dagexec.Graph()
    g.add("made", pt.a_timeout_object, timeout=30.0, isolate="process")
    g.add("after", pt.square, args=(3,), isolate="process")
    result = ex.run(g)
    assert isinstance(result["made"], dagexec.TaskTimeout)
    assert result["made"].timeout == 1.0 and result["after"] == 9
    assert not result.errors


def test_a_raised_timeout_object_is_a_failure_not_a_killed_child(ex: dagexec.Executor) -> None:
    # The task's own code raised it: nothing was killed, nothing timed out.
    g = dagexec.Graph()
    g.add("raises", pt.raise_a_timeout, isolate="process")
    result = ex.run(g, on_error="continue")
    err = result.errors["raises"]
    assert isinstance(err, dagexec.TaskTimeout) and not err.killed
    assert result.stats.timeouts == 0


def test_a_timeout_counts_once_per_attempt_with_retries(
    ex: dagexec.Executor, gate: pt.ProcessGate
) -> None:
    g = dagexec.Graph()
    g.add("slow", pt.held, args=(gate.directory,), timeout=0.5, retries=1, isolate="process")
    result = ex.run(g, on_error="continue")
    assert isinstance(result.errors["slow"], dagexec.TaskTimeout)
    first, second = gate.wait_for_arrivals(2)
    assert first != second and not alive(first) and not alive(second)


def test_a_crash_fails_only_its_task(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("exit", pt.exit_hard, isolate="process")
    g.add("killed", pt.kill_self, isolate="process")
    g.add("fine", pt.square, args=(5,), isolate="process")
    g.add("later", pt.pid, deps=["fine"], isolate="process")
    result = ex.run(g, on_error="continue", targets=["exit", "killed", "fine", "later"])
    exited, killed = result.errors["exit"], result.errors["killed"]
    assert isinstance(exited, dagexec.WorkerCrashed) and exited.exitcode == 3
    assert "task 'exit'" in str(exited) and "exit code 3" in str(exited)
    assert isinstance(killed, dagexec.WorkerCrashed) and "SIGKILL" in str(killed)
    assert isinstance(exited, dagexec.DagexecError)
    assert result["fine"] == 25 and result["later"] != os.getpid()


def test_a_crashed_attempt_is_retried_in_a_new_child(ex: dagexec.Executor, tmp_path: Path) -> None:
    g = dagexec.Graph()
    g.add(
        "flaky",
        pt.crash_first_time,
        args=(str(tmp_path / "crashed"),),
        retries=1,
        isolate="process",
    )
    crashed_pid, attempt, pid = ex.run(g)["flaky"]
    assert attempt == 2 and pid != crashed_pid and not alive(crashed_pid)


def test_current_task_in_a_child(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("me", pt.whoami, isolate="process")
    g.add("flaky", pt.fail_first_attempt, retries=2, retry_on=OSError, isolate="process")
    g.add("items", list, args=(range(2),))
    g.map("each", pt.whoami, over="items", isolate="process")
    result = ex.run(g, targets=["me", "flaky", "each"])
    assert result["me"] == ("me", 1, False)
    assert result["flaky"] == 2
    assert result["each"] == [(("each", 0), 1, False), (("each", 1), 1, False)]


def _wait_for_exit(pid: int, timeout: float) -> bool:
    """Block until process ``pid`` exits (a pidfd turns readable), at most ``timeout``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True  # gone already
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def test_cancel_kills_running_tasks_but_lets_cleanup_tasks_finish(
    ex: dagexec.Executor, gate: pt.ProcessGate, tmp_path: Path
) -> None:
    out = tmp_path / "cleanup.txt"
    (tmp_path / "cleanup_gate").mkdir()
    cleanup_gate = pt.ProcessGate(tmp_path / "cleanup_gate")
    try:
        g = dagexec.Graph()
        g.add("work", pt.held, args=(gate.directory,), isolate="process")
        g.add(
            "cleanup",
            pt.cleanup_held,
            args=(cleanup_gate.directory, str(out)),
            run_if="all_done",
            isolate="process",
        )
        future = ex.submit(g)
        [work_pid] = gate.wait_for_arrivals(1)  # each runs in its own child
        [cleanup_pid] = cleanup_gate.wait_for_arrivals(1)
        assert future.cancel()
        assert _wait_for_exit(work_pid, 10.0)  # the task's child was killed
        assert alive(cleanup_pid)  # the cleanup task's was not
        cleanup_gate.open()
        # The cancelled run's tasks end in the background; the next run comes after.
        ex.run(_pid_graph())
        assert out.read_text() == "finished"  # it ran to its end, its token clear
    finally:
        cleanup_gate.open()
        cleanup_gate.close()


# -- Ctrl-C, shutdown, interpreter exit ------------------------------------------------


_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import dagexec, process_tasks as pt
from dagexec._engine.process.process_pool import live_children

if __name__ == "__main__":
    g = dagexec.Graph()
    g.add("a", pt.sleep_forever, isolate="process")
    g.add("b", pt.sleep_forever, isolate="process")
    with dagexec.Executor(workers=2) as ex:
        try:
            ex.run(g)
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
            raise
"""


def test_ctrl_c_with_process_tasks_running_leaves_no_child(tmp_path: Path) -> None:
    script = tmp_path / "interrupt_me.py"
    script.write_text(_SCRIPT.format(tests=str(TESTS)))
    with subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    ) as proc:
        assert proc.stdout is not None
        pids = []
        for line in proc.stdout:
            if line.startswith("PID "):
                pids.append(int(line.split()[1]))
            if len(pids) == 2:
                break
        proc.send_signal(2)  # SIGINT to the parent only: children run in their own group
        rest = proc.stdout.read()
        assert proc.wait(timeout=30) != 0
    assert "INTERRUPTED" in rest
    assert len(pids) == 2 and not any(alive(p) for p in pids)


def test_shutdown_with_process_tasks_running(gate: pt.ProcessGate) -> None:
    ex = dagexec.Executor(workers=2)
    g = dagexec.Graph()
    g.add("a", pt.held, args=(gate.directory,), isolate="process")
    g.add("b", pt.held, args=(gate.directory,), isolate="process")
    future = ex.submit(g)
    pids = gate.wait_for_arrivals(2)
    ex.shutdown(wait=False)  # returns at once; the run finishes, then the workers exit
    gate.open()
    assert set(future.result().values()) == set(pids)
    ex.shutdown(wait=True)
    # Checked back in, healthy, for the next executor; ended with the idle ones.
    assert set(pids) <= set(sharing.idle_children())
    sharing.end_idle_children()
    assert not any(alive(p) for p in pids)


def test_main_module_runs_again_in_the_child_but_not_its_main_block(tmp_path: Path) -> None:
    script = tmp_path / "script_with_tasks.py"
    script.write_text(
        textwrap.dedent(
            """
            import os
            print("TOP", os.getpid(), flush=True)

            def twice(x):
                return 2 * x

            if __name__ == "__main__":
                import dagexec
                g = dagexec.Graph()
                g.add("t", twice, args=(21,), isolate="process")
                print("RESULT", dagexec.run(g, workers=1)["t"], flush=True)
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert "RESULT 42" in out
    tops = {line.split()[1] for line in out.splitlines() if line.startswith("TOP")}
    assert len(tops) == 2  # the parent's top level, and the child's re-run of it


# -- checkpoints ----------------------------------------------------------------------


def test_resume_from_a_checkpoint_with_process_tasks(ex: dagexec.Executor, tmp_path: Path) -> None:
    calls, marker = tmp_path / "calls", tmp_path / "marker"
    store = str(tmp_path / "ckpt")
    g = dagexec.Graph()
    g.add("a", pt.count_call, args=(str(calls),), isolate="process")
    g.add("b", pt.after_marker, args=(str(marker),), deps=["a"], isolate="process")
    g.add("c", pt.add, deps=["a", "a"], isolate="process")
    g.add("d", pt.length, deps=["b"], isolate="process")
    with pytest.raises(RuntimeError, match="missing"):
        ex.run(g, checkpoint=store)
    assert calls.read_text().count("x") == 1
    marker.write_text("")
    result = ex.run(g, checkpoint=store, targets=["c", "d"])
    assert calls.read_text().count("x") == 1  # "a" was loaded, not run again
    assert result["c"] == 2 and result["d"] == ("str", 2)

    # isolate is not part of the identity: the same tasks on threads load too.
    h = dagexec.Graph()
    h.add("a", pt.count_call, args=(str(calls),))
    h.add("c", pt.add, deps=["a", "a"])
    assert ex.run(h, checkpoint=store, targets=["c"])["c"] == 2
    assert calls.read_text().count("x") == 1


def test_a_run_with_process_tasks_queues_at_most_one_task_per_worker(
    gate: pt.ProcessGate,
) -> None:
    thread_gate = Gate()
    g = dagexec.Graph()
    g.add("p", pt.held, args=(gate.directory,), isolate="process")
    for i in range(8):
        g.add(("t", i), thread_gate.gated(pt.pid))
    recorder = InFlightRecorder()
    with dagexec.Executor(workers=2, queue_cap=8) as ex:
        future = ex.submit(g, callbacks=[recorder])
        try:
            # Two running, one queued behind each: not the 18 that queue_cap allows.
            assert recorder.wait_for_in_flight(4)
            gate.wait_for_arrivals(1)
            assert thread_gate.wait_for_waiting(1)
            assert recorder.in_flight == 4
        finally:
            gate.open()
            thread_gate.open()
        result = future.result()
    # Once the gates open, a worker may take its queued task before the scheduler
    # hears the first one ended, so in flight can pass 4 then; inboxes never do.
    assert max(result.stats.peak_queue_depth) == 1


def test_the_driver_sleeps_while_process_tasks_run(
    gate: pt.ProcessGate, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Inboxes one deep are full by design in a process run: the driver must not
    # take that for a moment's congestion and wake every 1 ms to re-check (it
    # did: ~9 wake-ups per 15 ms task, each taking the GIL from the workers).
    from dagexec._engine.run.driver import Driver

    wakes = [0]
    receive = Driver._receive

    def counted(self: Driver, pickup: bool, wait: float | None) -> list[object]:
        wakes[0] += 1
        return receive(self, pickup, wait)

    monkeypatch.setattr(Driver, "_receive", counted)
    g = dagexec.Graph()
    for i in range(6):  # more ready than two workers can hold
        g.add(("p", i), pt.held, args=(gate.directory,), isolate="process")
    with dagexec.Executor(workers=2, queue_cap=8) as ex:
        future = ex.submit(g)
        try:
            gate.wait_for_arrivals(2)
            before = wakes[0]
            with pytest.raises(AssertionError):  # nothing ends while both are held
                gate.wait_for_arrivals(3, timeout=0.2)
            assert wakes[0] - before <= 2, f"the driver woke {wakes[0] - before} times"
        finally:
            gate.open()
        assert len(future.result().values()) == 6


def test_a_child_killed_while_idle_is_replaced_without_failing_a_task(
    ex: dagexec.Executor,
) -> None:
    g = dagexec.Graph()
    g.add("items", list, args=(range(4),))
    g.map("pids", pt.pid, over="items", isolate="process")
    before = set(ex.run(g)["pids"])
    for pid in before:
        pt.kill_and_wait(pid)
    after = set(ex.run(g)["pids"])
    assert after and not after & before


def test_messages_come_whole_however_the_pipe_cuts_them() -> None:
    # A reader reads ahead: two messages in one read, a message cut across reads,
    # and out-of-band buffers on the pipe all come out as they went in.
    from dagexec._engine.process.transfer import Reader, dumps, lift, receive, send

    r, w = os.pipe()
    reader = Reader(r)
    big = bytes(range(256)) * 1000  # out of band, through the pipe (no shm path)

    def writer() -> None:
        send(w, ("small", 1), *dumps(lift((1, "a"))), None)
        send(w, ("small", 2), *dumps(lift((2, "b"))), None)
        send(w, ("big", 3), *dumps(lift((big, bytearray(big)))), None)
        send(w, ("after", 4), *dumps("end"), None)
        os.close(w)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        got = []
        while True:
            try:
                meta, data, buffers = receive(reader)
            except EOFError:
                break
            got.append((meta, pickle.loads(data, buffers=buffers)))
    finally:
        thread.join()
        os.close(r)
    assert [m for m, _ in got] == [("small", 1), ("small", 2), ("big", 3), ("after", 4)]
    assert got[0][1] == (1, "a") and got[1][1] == (2, "b") and got[3][1] == "end"
    value = got[2][1]
    assert value[0] == big and type(value[0]) is bytes
    assert value[1] == big and type(value[1]) is bytearray


def test_a_wait_ended_by_anything_else_never_reads_a_stale_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A KeyboardInterrupt (say) while a caller's thread waits for its child: the
    # answer still coming must not be taken for the next call's.
    from dagexec._core.isolate import IsolatedCall
    from dagexec._core.policy import CurrentTask
    from dagexec._engine.process import process_pool

    slot = process_pool.ChildSlot()
    call = IsolatedCall(pt.square, "sq", "process", None, False, ())
    info = CurrentTask("sq", 1, threading.Event())
    try:
        assert slot.run(call, (3,), info) == 9
        receive = process_pool.receive

        def interrupted(*args: object, **kwargs: object) -> object:
            monkeypatch.setattr(process_pool, "receive", receive)
            raise KeyboardInterrupt

        monkeypatch.setattr(process_pool, "receive", interrupted)
        with pytest.raises(KeyboardInterrupt):
            slot.run(call, (4,), info)
        assert slot.run(call, (5,), info) == 25
    finally:
        slot.close()


def test_an_exception_whose_class_the_parent_cannot_find_arrives_as_a_stand_in(
    ex: dagexec.Executor,
) -> None:
    g = dagexec.Graph()
    g.add("odd", pt.raise_unimportable_error, isolate="process")
    with pytest.raises(RuntimeError, match=r"task 'odd' raised GhostError: boo") as info:
        ex.run(g)
    assert "process_tasks.GhostError cannot be imported" in str(info.value)
    assert "GhostError" in "\n".join(info.value.__notes__)  # the child's traceback


def test_graph_files_loaded_by_the_cli_run_in_children(tmp_path: Path) -> None:
    (tmp_path / "cli_graph.py").write_text(
        textwrap.dedent(
            """
            import os
            import dagexec
            print("TOP", os.getpid(), flush=True)

            def child_pid():
                return os.getpid()

            g = dagexec.Graph()
            g.add("pid", child_pid, isolate="process")
            """
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "dagexec", "run", "cli_graph.py:g", "--print", "--workers", "1"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    tops = [line.split()[1] for line in out.splitlines() if line.startswith("TOP")]
    printed = [line for line in out.splitlines() if line.startswith("pid = ")]
    assert len(set(tops)) == 2  # the CLI's load, and the child's
    assert printed == [f"pid = {tops[1]}"]  # the task ran in the child that loaded it


def test_the_graph_keeps_the_users_function(ex: dagexec.Executor) -> None:
    g = dagexec.Graph()
    g.add("a", pt.square, args=(2,), isolate="process")
    g.add("b", pt.square, deps=["a"], isolate="process")
    assert g["a"].fn is pt.square and g["a"].args == (2,)
    assert g["b"].fn is pt.square and g["b"].deps == ("a",)


def test_docs_processes_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    text = (ROOT / "docs" / "processes.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    runnable = [b for b in blocks if not b.startswith("# fragment:")]
    assert runnable
    monkeypatch.chdir(tmp_path)
    for code in runnable:
        exec(compile(code, "docs/processes.md", "exec"), {"__name__": "__docs__"})


def test_resources_bound_threads_and_processes_together(
    ex: dagexec.Executor, gate: pt.ProcessGate
) -> None:
    thread_gate = Gate()
    g = dagexec.Graph()
    # Higher priority: the process task is dispatched first and takes the licence.
    g.add(
        "p",
        pt.held,
        args=(gate.directory,),
        resources={"licence": 1},
        priority=1,
        isolate="process",
    )
    g.add("t", thread_gate.gated(pt.pid), resources={"licence": 1})
    future = ex.submit(g, resources={"licence": 1})
    try:
        gate.wait_for_arrivals(1)
        # A worker is free, but the thread task needs the licence the child holds.
        assert not thread_gate.wait_for_waiting(1, timeout=0.3)
        gate.open()
        assert thread_gate.wait_for_waiting(1)
    finally:
        gate.open()
        thread_gate.open()
    result = future.result()
    assert result.stats.peak_resources == {"licence": 1}
    assert_within_bounds(result)


def test_children_ignore_sigint(ex: dagexec.Executor, gate: pt.ProcessGate) -> None:
    g = dagexec.Graph()
    g.add("p", pt.held, args=(gate.directory,), isolate="process")
    future = ex.submit(g)
    (pid,) = gate.wait_for_arrivals(1)
    os.kill(pid, signal.SIGINT)  # what a terminal's Ctrl-C would send, were it in our group
    gate.open()
    assert future.result()["p"] == pid and alive(pid)
    assert os.getpgid(pid) != os.getpgid(0)  # and it is not: its own process group


def test_numpy_arrays_cross_out_of_band_and_stay_writable(ex: dagexec.Executor) -> None:
    np = pytest.importorskip("numpy")
    big = np.arange(500_000, dtype=np.int64)  # 4 MB: out of band, through /dev/shm
    g = dagexec.Graph()
    g.add("a", np.arange, args=(500_000,), kwargs={"dtype": np.int64})
    g.add("doubled", pt.double_array, deps=["a"], isolate="process")
    g.add("const", pt.double_array, args=(big,), isolate="process")
    result = ex.run(g, targets=["doubled", "const"])
    assert (result["doubled"] == big * 2).all() and (result["const"] == big * 2).all()
    assert result["doubled"].flags.writeable
    assert (big == np.arange(500_000)).all()  # the parent's constant is untouched


def test_children_are_gone_at_interpreter_exit_without_shutdown(tmp_path: Path) -> None:
    script = tmp_path / "no_shutdown.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(TESTS)!r})
            import dagexec, process_tasks as pt
            from dagexec._engine.process.process_pool import live_children

            if __name__ == "__main__":
                ex = dagexec.Executor(workers=2)  # never shut down
                g = dagexec.Graph()
                g.add("items", list, args=(range(4),))
                g.map("pids", pt.pid, over="items", isolate="process")
                ex.run(g)
                print(*live_children(), flush=True)
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    pids = [int(p) for p in out.split()]
    assert pids and not any(alive(p) for p in pids)
