"""Children shared across executors and dagexec.run calls (issue 36, part 1).

A worker checks a child out of the program's pool of idle children and back in
when it exits: what a shared child must not carry over from an earlier user (its
directory, its environment, a module the parent reloaded since), and how sharing
meets timeouts, crashes, a second executor running at once, logs, checkpoints.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import process_tasks as pt
import pytest

import dagexec
from dagexec._engine.process import process_pool, sharing
from dagexec._engine.process.process_pool import live_children


def _pid_graph() -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("p", pt.pid, isolate="process")
    return g


def test_a_second_dagexec_run_starts_no_child() -> None:
    g = _pid_graph()
    first = dagexec.run(g, workers=1)["p"]
    assert first in sharing.idle_children()  # checked in at the run's end, alive
    before = set(live_children())
    second = dagexec.run(g, workers=1)["p"]
    assert second == first and set(live_children()) == before


def test_executors_in_turn_share_children_and_never_outnumber_their_workers() -> None:
    g = dagexec.Graph()
    for i in range(8):
        g.add(i, pt.pid, isolate="process")
    with dagexec.Executor(workers=2) as one:
        pids = set(one.run(g).values())
    before = set(live_children())
    with dagexec.Executor(workers=2) as two:
        again = set(two.run(g).values())
    assert again <= before and set(live_children()) == before
    assert len(pids) <= 2 and len(again) <= 2


def test_a_worker_never_waits_for_a_child_another_executor_holds(gate: pt.ProcessGate) -> None:
    held = dagexec.Graph()
    held.add("h", pt.held, args=(gate.directory,), isolate="process")
    with dagexec.Executor(workers=1) as holder:
        future = holder.submit(held)
        (holding,) = gate.wait_for_arrivals(1)
        other = dagexec.run(_pid_graph(), workers=1)["p"]  # while the first holds its child
        assert other != holding
        gate.open()
        assert future.result()["h"] == holding


@pytest.mark.parametrize("reused", [False, True], ids=["dagexec.run", "reused executor"])
def test_directory_and_environment_are_the_sending_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reused: bool
) -> None:
    g = dagexec.Graph()
    g.add("where", pt.place, args=("DAGEXEC_TEST_PLACE",), isolate="process")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ex = dagexec.Executor(workers=1) if reused else None

    def run() -> tuple[int, str, str | None]:
        value = (ex.run(g) if ex is not None else dagexec.run(g, workers=1))["where"]
        assert isinstance(value, tuple)
        return value

    try:
        monkeypatch.chdir(tmp_path / "a")
        monkeypatch.setenv("DAGEXEC_TEST_PLACE", "first")
        pid, cwd, env = run()
        assert (cwd, env) == (str(tmp_path / "a"), "first")
        monkeypatch.chdir(tmp_path / "b")
        monkeypatch.setenv("DAGEXEC_TEST_PLACE", "second")
        assert run() == (pid, str(tmp_path / "b"), "second")  # the same child, moved
        monkeypatch.delenv("DAGEXEC_TEST_PLACE")
        assert run() == (pid, str(tmp_path / "b"), None)  # a variable unset goes too
    finally:
        if ex is not None:
            ex.shutdown()


@pytest.fixture
def edited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module file, ``edited_module_<n>``, importable by name from ``tmp_path``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    path = tmp_path / f"edited_module_{os.getpid()}_{id(tmp_path)}.py"
    path.write_text("import os\n\ndef version():\n    return 1, os.getpid()\n")
    yield path
    sys.modules.pop(path.stem, None)


@pytest.mark.parametrize("reused", [False, True], ids=["dagexec.run", "reused executor"])
def test_a_module_reloaded_in_the_parent_never_runs_in_its_old_form(
    edited: Path, tmp_path: Path, reused: bool
) -> None:
    module = importlib.import_module(edited.stem)
    g = dagexec.Graph()
    g.add("v", module.version, isolate="process", checkpoint=True)
    store = str(tmp_path / "ckpt")
    ex = dagexec.Executor(workers=1) if reused else None

    def run() -> tuple[int, int]:
        kwargs = {"checkpoint": store}
        value = (ex.run(g, **kwargs) if ex else dagexec.run(g, workers=1, **kwargs))["v"]
        assert isinstance(value, tuple)
        return value

    try:
        version, old_pid = run()
        assert version == 1 and old_pid in live_children()
        edited.write_text("import os\n\ndef version():\n    return 22, os.getpid()\n")
        importlib.reload(module)
        g = dagexec.Graph()
        g.add("v", module.version, isolate="process", checkpoint=True)
        version, new_pid = run()
        assert version == 22  # the new code: the old value's identity is not reused
        assert new_pid != old_pid and old_pid not in live_children()  # a new child
    finally:
        if ex is not None:
            ex.shutdown()


def test_idle_children_end_at_the_next_use_after_the_idle_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = dagexec.run(_pid_graph(), workers=1)["p"]
    assert first in sharing.idle_children()
    monkeypatch.setattr(sharing, "IDLE_TIMEOUT", 0.0)
    second = dagexec.run(_pid_graph(), workers=1)["p"]  # its check-out ends the idle ones
    assert second != first and first not in live_children()
    assert sharing.idle_children() == [second]  # kept: its idle time starts now


def test_a_timed_out_child_is_never_checked_in(tmp_path: Path) -> None:
    g = dagexec.Graph()
    g.add("slow", pt.sleep_forever, isolate="process", timeout=0.3)
    result = dagexec.run(g, workers=1, on_error="continue")
    assert isinstance(result.errors["slow"], dagexec.TaskTimeout)
    idle = sharing.idle_children()
    assert all(pt.alive(p) for p in idle)  # only healthy children are kept
    assert dagexec.run(_pid_graph(), workers=1)["p"] in live_children()


def test_a_child_that_died_idle_is_never_handed_out(gate: pt.ProcessGate) -> None:
    pid = dagexec.run(_pid_graph(), workers=1)["p"]
    assert pid in sharing.idle_children()
    pt.kill_and_wait(pid)
    again = dagexec.run(_pid_graph(), workers=1)["p"]  # a new child takes the call
    assert again != pid and pid not in live_children()


def test_a_dropped_executor_checks_its_children_in() -> None:
    before = set(threading.enumerate())
    ex = dagexec.Executor(workers=1)
    pid = ex.run(_pid_graph())["p"]
    workers = [t for t in threading.enumerate() if t not in before]
    del ex
    gc.collect()
    for thread in workers:
        thread.join(timeout=10)
    assert pid in sharing.idle_children()


def test_logs_are_told_anew_to_a_shared_child() -> None:
    g = dagexec.Graph()
    g.add("child", pt.log_lines, args=(1,), isolate="process")
    loud = dagexec.run(g, workers=1, logs=True)
    assert [r.getMessage() for e in loud.logs["child"] for r in e.records] == [
        "child line 0",
        "child warning",
    ]
    quiet = dagexec.run(g, workers=1)  # the same child, told to stream nothing
    assert quiet["child"] == 1 and not quiet.logs


def test_a_slot_not_from_the_pool_still_ends_on_close() -> None:
    slot = process_pool.ChildSlot()
    from dagexec._core.isolate import IsolatedCall
    from dagexec._core.policy import CurrentTask

    info = CurrentTask("sq", 1, threading.Event())
    assert slot.run(IsolatedCall(pt.square, "sq", "process", None, False, ()), (3,), info) == 9
    assert slot.proc is not None
    pid = slot.proc.pid
    slot.close()
    assert pid not in live_children() and pid not in sharing.idle_children()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_process_neither_uses_nor_ends_the_parents_children() -> None:
    """A user's fork (os.fork, multiprocessing's fork) copies the idle list and the
    exit hook: the copy must start its own children and leave the parent's alone."""
    g = _pid_graph()
    first = dagexec.run(g, workers=1)["p"]
    assert first in sharing.idle_children()
    with warnings.catch_warnings():  # 3.12+: "multi-threaded, fork may deadlock" if
        warnings.simplefilter("ignore", DeprecationWarning)  # a thread is alive here
        pid = os.fork()
    if pid == 0:  # the forked process: report by exit status only
        ok = sharing.idle_children() == [] and sharing.live_children() == []
        sharing._end_all()  # what its interpreter exit would run
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert first in sharing.idle_children()  # still idle, still alive, still ours
    assert dagexec.run(g, workers=1)["p"] == first
