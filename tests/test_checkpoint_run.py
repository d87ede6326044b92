"""run(checkpoint=): values saved by the workers, loaded on the next run; crash and resume."""

from __future__ import annotations

import importlib.util
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import dagexec
from dagexec._core.plan import plan_run
from dagexec._persist.checkpoint import CheckpointStore
from dagexec._persist.resume import checkpoint_identities
from dagexec.testing import Gate

CHILD = Path(__file__).with_name("checkpoint_run_child.py")


def _child_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("checkpoint_run_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Calls:
    """Counts the tasks that really ran, thread-safely."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, name: str) -> None:
        with self.lock:
            self.names.append(name)


def diamond(calls: Calls, b_fn: Callable[[int], int] | None = None) -> dagexec.Graph:
    """a -> b -> d, a -> c -> d, plus a lone e; b's function can be swapped ("edited")."""

    def a() -> int:
        calls("a")
        return 1

    def b(x: int) -> int:
        calls("b")
        return x + 10

    def c(x: int) -> int:
        calls("c")
        return x + 100

    def d(x: int, y: int) -> int:
        calls("d")
        return x * y

    def e(k: int) -> int:
        calls("e")
        return k

    g = dagexec.Graph()
    g.add("a", a)
    g.add("b", b_fn or b, deps=["a"])
    g.add("c", c, deps=["a"])
    g.add("d", d, deps=["b", "c"])
    g.add("e", e, args=(7,))
    return g


def test_a_second_run_loads_instead_of_running(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    calls = Calls()
    first = dagexec.run(diamond(calls), checkpoint=path)
    assert sorted(calls.names) == ["a", "b", "c", "d", "e"]
    assert first.stats.tasks_loaded == 0 and first.stats.tasks_run == 5
    calls.names.clear()
    again = dagexec.run(diamond(calls), checkpoint=str(path))
    assert calls.names == []
    assert dict(again) == dict(first) == {"d": 11 * 101, "e": 7}
    # Only the targets were needed, so only they were loaded.
    assert again.stats.tasks_loaded == 2 and again.stats.tasks_run == 0
    assert again.status["d"] == dagexec.TaskState.DONE


def test_editing_a_task_reruns_it_and_its_descendants_only(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    calls = Calls()
    dagexec.run(diamond(calls), checkpoint=path)
    calls.names.clear()

    def b_edited(x: int) -> int:
        calls("b")
        return x + 20

    result = dagexec.run(diamond(calls, b_edited), checkpoint=path)
    assert sorted(calls.names) == ["b", "d"]  # a and c loaded, e untouched
    assert result["d"] == 21 * 101
    assert result.stats.tasks_run == 2


def test_a_changed_constant_argument_reruns_the_task(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    seen: list[int] = []
    for k, runs in ((1, [1]), (1, []), (2, [2])):
        seen.clear()
        g = dagexec.Graph()
        g.add("t", lambda k: seen.append(k) or k, args=(k,))
        assert dagexec.run(g, checkpoint=path)["t"] == k
        assert seen == runs


def test_on_an_executor_and_with_submit(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    calls = Calls()
    with dagexec.Executor(2) as ex:
        assert ex.run(diamond(calls), checkpoint=path)["d"] == 1111
        calls.names.clear()
        future = ex.submit(diamond(calls), ["b"], checkpoint=path)
        assert future.result()["b"] == 11
        assert calls.names == []


def test_an_unpicklable_value_fails_its_task_naming_it(tmp_path: Path) -> None:
    g = dagexec.Graph()
    g.add("fine", lambda: 1)
    g.add("lock", lambda fine: threading.Lock(), deps=["fine"])
    g.add("other", lambda: 2)
    with pytest.raises(dagexec.CheckpointError, match="task 'lock'") as info:
        dagexec.run(g, checkpoint=tmp_path / "c.sqlite")
    assert info.value.task == "lock"
    result = dagexec.run(g, checkpoint=tmp_path / "c.sqlite", on_error="continue")
    assert isinstance(result.errors["lock"], dagexec.CheckpointError)
    assert result["other"] == 2


def test_an_unpicklable_constant_is_refused_before_anything_runs(tmp_path: Path) -> None:
    ran: list[int] = []
    g = dagexec.Graph()
    g.add("t", lambda lock: ran.append(1), args=(threading.Lock(),))
    before = threading.active_count()
    with pytest.raises(dagexec.CheckpointError, match="task 't'"):
        dagexec.run(g, checkpoint=tmp_path / "c.sqlite")
    assert ran == [] and threading.active_count() == before
    assert not (tmp_path / "c.sqlite").exists()


def test_a_bad_checkpoint_file_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "not.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    g = dagexec.Graph()
    g.add("t", lambda: 1)
    with pytest.raises(dagexec.CheckpointError, match="not.sqlite"):
        dagexec.run(g, checkpoint=bad)


def test_a_cancelled_run_keeps_what_finished(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    gate = Gate()
    ran: list[str] = []
    g = dagexec.Graph()
    g.add("quick", lambda: ran.append("quick") or 1)
    g.add("held", lambda quick: gate.wait() or ran.append("held") or 2, deps=["quick"])
    with dagexec.Executor(1) as ex:
        future = ex.submit(g, ["quick", "held"], checkpoint=path)
        assert gate.wait_for_waiting(1)
        assert future.cancel()
        gate.open()
        # A checkpointed run reads the file when it is submitted, so first let the
        # cancelled run end: a run queued behind it starts once its store has
        # closed, with everything saved before the cancel written. (Without this,
        # on 3.13t the next run often read the file before the writer had.)
        barrier = dagexec.Graph()
        barrier.add("after", lambda: "after")
        assert ex.run(barrier)["after"] == "after"
        ran.clear()
        result = ex.run(g, ["quick", "held"], checkpoint=path)
    assert result["held"] == 2
    assert "quick" not in ran  # saved before the cancel, loaded now


def test_values_are_pickled_when_the_task_returns(tmp_path: Path) -> None:
    """A later task mutating its input does not change what was saved."""
    path = tmp_path / "c.sqlite"
    g = dagexec.Graph()
    g.add("data", lambda: [1, 2])
    g.add("mutate", lambda d: d.append(3) or len(d), deps=["data"])
    dagexec.run(g, ["data", "mutate"], checkpoint=path)
    ids = checkpoint_identities(g, plan_run(g._compile(), ["data"]))
    with CheckpointStore(path) as store:
        assert ids[0] is not None
        assert store.load(ids[0]) == [1, 2]


def _stored_names(path: Path, module: ModuleType) -> set[str]:
    graph = module.build()
    plan = plan_run(graph._compile(), None)
    ids = checkpoint_identities(graph, plan)
    with CheckpointStore(path) as store:
        found = store.stored(i for i in ids if i is not None)
    return {str(plan.names[k]) for k, i in enumerate(ids) if i in found}


def test_killed_mid_run_then_resumed_runs_no_committed_task_again(tmp_path: Path) -> None:
    module = _child_module()
    expected = dagexec.run(module.build(), workers=2)["total"].hex()
    total_tasks = module.CHAINS * module.LENGTH + 1
    mid_run_kills = 0  # kills after some commits, before the end
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    for kill_after in range(1, total_tasks, 2):
        path = tmp_path / f"run-{kill_after}.sqlite"
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(path)], stdout=subprocess.PIPE, text=True, env=env
        )
        assert child.stdout is not None
        started = 0
        for line in child.stdout:
            if line.startswith("RAN "):
                started += 1
                if started == kill_after:
                    child.send_signal(signal.SIGKILL)
                    break
        child.stdout.close()
        child.wait()
        committed = _stored_names(path, module)
        mid_run_kills += 0 < len(committed) < total_tasks
        resumed = subprocess.run(
            [sys.executable, str(CHILD), str(path)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=60,
        )
        ran_again = {line[4:] for line in resumed.stdout.splitlines() if line.startswith("RAN ")}
        assert not ran_again & committed, (kill_after, sorted(ran_again & committed))
        assert f"TOTAL {expected}" in resumed.stdout.splitlines()
        # And once more: everything is loaded, nothing runs.
        assert _stored_names(path, module) >= {"total"}
    assert mid_run_kills >= 3  # the kills did land mid-run, after commits


def test_command_line_checkpoint_resumes(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    script = tmp_path / "pipeline.py"
    script.write_text(
        f"import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('child', {str(CHILD)!r})\n"
        "child = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(child)\n"
        "graph = child.build()\n"
    )
    command = [sys.executable, "-m", "dagexec", "run", f"{script}:graph", "--checkpoint"]
    root = Path(__file__).resolve().parent.parent
    first = subprocess.run(
        [*command, str(path)], capture_output=True, text=True, cwd=root, timeout=60
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("RAN ") == 31
    second = subprocess.run(
        [*command, str(path)], capture_output=True, text=True, cwd=root, timeout=60
    )
    assert second.returncode == 0, second.stderr
    assert "RAN " not in second.stdout
    assert re.search(r"^  loaded\s+1$", second.stdout, re.MULTILINE), second.stdout


def test_checkpoint_values_pickle_round_trip_like_the_result(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    value: dict[str, Any] = {"nested": [1, (2, 3)], "bytes": b"x" * 1000}
    g = dagexec.Graph()
    g.add("v", lambda: value)
    dagexec.run(g, checkpoint=path)
    loaded = dagexec.run(g, checkpoint=path)
    assert loaded["v"] == value and loaded["v"] is not value
    assert pickle.loads(pickle.dumps(loaded["v"])) == value


def test_command_line_names_a_bad_checkpoint_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database" * 100)
    script = tmp_path / "pipeline.py"
    script.write_text("import dagexec\ngraph = dagexec.Graph()\ngraph.add('t', lambda: 1)\n")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "dagexec", "run", f"{script}:graph", "--checkpoint", str(bad)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=60,
    )
    assert done.returncode != 0
    assert "bad.sqlite" in done.stderr and "Traceback" not in done.stderr


def test_every_member_of_a_fused_chain_is_saved(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    g = dagexec.Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda a: a + 1, deps=["a"])
    g.add("c", lambda b: b + 1, deps=["b"])
    plan = plan_run(g._compile(), None)
    assert plan.chain_next[plan.index["a"]] >= 0  # the planner fuses a -> b -> c
    dagexec.run(g, checkpoint=path, workers=1)
    ids = checkpoint_identities(g, plan)
    with CheckpointStore(path) as store:
        assert store.stored(i for i in ids if i is not None) == set(ids)
    # Asked for b now: loaded, not run.
    result = dagexec.run(g, ["b"], checkpoint=path)
    assert result["b"] == 2 and result.stats.tasks_run == 0


def test_no_checkpoint_costs_no_import_no_thread_no_wrapper() -> None:
    code = (
        "import sys, threading, dagexec\n"
        "g = dagexec.Graph(); f = lambda: 1; g.add('t', f)\n"
        "with dagexec.Executor(1) as ex:\n"
        "    before = set(threading.enumerate())\n"
        "    ex.run(g)\n"
        "    new = set(threading.enumerate()) - before\n"
        "    assert new == set(ex._threads), new  # the worker starts with its first task\n"
        "assert g._compile().plans[None].fns[0] is f\n"
        "assert 'sqlite3' not in sys.modules and 'dagexec._persist.checkpoint' not in sys.modules\n"
    )
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, timeout=60)


def test_after_ctrl_c_the_next_run_resumes_from_what_finished(tmp_path: Path) -> None:
    import _thread

    path = tmp_path / "c.sqlite"
    gate = Gate()
    calls = Calls()
    # An Event, not a list: a closure value that pickles is part of the task's
    # identity, and a flag flipping in it would rightly make 'x' a new task.
    interrupted = threading.Event()

    def interrupter(done: int) -> str:
        calls("x")
        if not interrupted.is_set():
            interrupted.set()
            _thread.interrupt_main()
            gate.wait()  # keeps running after the interrupt, like real work would
        return "x"

    g = dagexec.Graph()
    g.add("done", lambda: calls("done") or 1)
    g.add("x", interrupter, deps=["done"])
    g.add("y", lambda x: calls("y") or x + "y", deps=["x"])
    with dagexec.Executor(2) as ex:
        with pytest.raises(KeyboardInterrupt):
            ex.run(g, ["done", "y"], checkpoint=path)
        assert calls.names == ["done", "x"]
        gate.open()
        # The next run waits for the interrupted one, store closed included: it
        # finds 'done'. 'x' returned after the run's stop was set, so its value
        # was not saved (it may be what a task that noticed the stop returned
        # early): it runs again.
        result = ex.run(g, ["done", "y"], checkpoint=path)
    assert result["y"] == "xy"
    assert calls.names == ["done", "x", "x", "y"]
