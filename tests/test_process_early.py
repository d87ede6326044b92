"""The next call sent early (issue 36, part 2): ``dagexec._engine.process.early``.

A worker waiting for its child sends it the next process task from its inbox, which
the child starts without waiting for the parent. Off by default (``EARLY_SEND``);
each test switches it on with monkeypatch. Executors are given ``max_in_flight``:
without it the run's cap starts at one task per worker and grows with the values
made (depth.py), so nothing would be queued behind a run's first task.
Synchronised with gates and events set by wrappers of the early module's own
functions, never by sleeping: ``sent`` is set when a call went early, ``dropped``
when the child said it dropped a withdrawn one.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Hashable, Iterator
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import process_tasks as pt
import pytest

import dagexec
from dagexec import TaskState
from dagexec._core.isolate import IsolatedCall
from dagexec._core.policy import Attempt, CurrentTask
from dagexec._engine.process import early
from dagexec._engine.process.process_pool import ChildSlot, live_children
from dagexec._engine.run.flag import Flag
from dagexec._engine.workers.inbox import Inbox
from dagexec.testing import InFlightRecorder, assert_within_bounds

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0


@dataclass
class Watch:
    """Events and counts from wrappers of early.send_early and early.note."""

    sent: threading.Event = field(default_factory=threading.Event)
    dropped: threading.Event = field(default_factory=threading.Event)
    began: threading.Event = field(default_factory=threading.Event)
    names: list[Hashable] = field(default_factory=list)


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Watch]:
    """EARLY_SEND on, and a :class:`Watch` of what went early."""
    seen = Watch()
    send, note = early.send_early, early.note

    def send_early(slot: Any, item: Any) -> Any:
        sent = send(slot, item)
        if sent is not None:
            seen.names.append(sent.info.name)
            seen.sent.set()
        return sent

    def noted(slot: Any, meta: Any) -> None:
        note(slot, meta)
        (seen.began if meta[0] == "began" else seen.dropped).set()

    monkeypatch.setattr(early, "EARLY_SEND", True)
    monkeypatch.setattr(early, "send_early", send_early)
    monkeypatch.setattr(early, "note", noted)
    yield seen


class Record:
    """A run callback: which tasks started, and how each ended."""

    def __init__(self) -> None:
        self.started: list[Hashable] = []
        self.ended: dict[Hashable, TaskState] = {}

    def on_task_start(self, name: Hashable, worker: int) -> None:
        self.started.append(name)

    def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
        self.ended[name] = state


def _done(result: dagexec.RunResult) -> int:
    return sum(state is TaskState.DONE for state in result.status.values())


def _pids(n: int) -> dagexec.Graph:
    g = dagexec.Graph()
    for i in range(n):
        g.add(f"p{i}", pt.pid, isolate="process")
    return g


def _held_then_b(gate: pt.ProcessGate, **b_options: Any) -> dagexec.Graph:
    """'held' (first, by priority; held at ``gate``) then 'b', both on one worker::

    held   b      (independent; b waits in the worker's inbox while held runs)
    """
    g = dagexec.Graph()
    g.add("held", pt.held, args=(gate.directory,), isolate="process", priority=10)
    g.add("b", pt.pid, isolate="process", **b_options)
    return g


# -- off, and what never goes ----------------------------------------------------------


def test_off_by_default_no_call_goes_early(monkeypatch: pytest.MonkeyPatch) -> None:
    assert early.EARLY_SEND is False
    calls: list[object] = []
    monkeypatch.setattr(early, "send_early", lambda *a: calls.append(a))
    g = dagexec.Graph()
    for i in range(6):
        g.add(i, time.sleep, args=(0.05,), isolate="process")
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        assert _done(ex.run(g)) == 6
    assert calls == []


def test_the_next_call_goes_early_and_runs_as_usual(watch: Watch, gate: pt.ProcessGate) -> None:
    g = _held_then_b(gate)
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        future = ex.submit(g, callbacks=[rec := Record()])
        (child,) = gate.wait_for_arrivals(1)
        assert watch.sent.wait(WAIT), "b was never sent early"
        gate.open()
        result = future.result(timeout=WAIT)
    assert watch.names == ["b"]
    assert result["held"] == result["b"] == child  # the same child ran both
    assert rec.ended == {"held": TaskState.DONE, "b": TaskState.DONE}
    assert watch.began.is_set()


def test_cleanup_tasks_never_go_early(watch: Watch, gate: pt.ProcessGate) -> None:
    g = dagexec.Graph()
    g.add("held", pt.held, args=(gate.directory,), isolate="process", priority=10)
    g.add("clean", pt.pid, isolate="process", run_if="all_done")
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        future = ex.submit(g)
        gate.wait_for_arrivals(1)
        gate.open()
        assert _done(future.result(timeout=WAIT)) == 2
    assert watch.names == []


def test_a_call_over_the_size_limit_never_goes_early(watch: Watch, gate: pt.ProcessGate) -> None:
    big = bytes(early.EARLY_MAX_BYTES + 1)
    g = dagexec.Graph()
    g.add("held", pt.held, args=(gate.directory,), isolate="process", priority=10)
    g.add("big", pt.length, args=(big,), isolate="process")
    g.add("small", pt.length, args=(b"x",), isolate="process", priority=5)
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        future = ex.submit(g)
        gate.wait_for_arrivals(1)
        assert watch.sent.wait(WAIT)
        gate.open()
        result = future.result(timeout=WAIT)
    assert result["big"] == ("bytes", len(big))
    assert "big" not in watch.names and "small" in watch.names


def test_a_checkpointed_run_sends_nothing_early(watch: Watch, tmp_path: Path) -> None:
    g = dagexec.Graph()
    for i in range(4):
        g.add(i, time.sleep, args=(0.05,), isolate="process")
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        result = ex.run(g, checkpoint=str(tmp_path / "ck.db"))
    assert _done(result) == 4
    assert watch.names == []  # its functions are wrapped by the saver: never eligible


# -- the deadline counts from BEGAN ------------------------------------------------


def test_the_deadline_of_a_call_sent_early_counts_from_when_the_child_began_it(
    watch: Watch,
) -> None:
    """b (timeout 0.3 s) goes early behind a 1 s task on the same child: counted from
    the send it would be late before it began; counted from BEGAN it is in time."""
    g = dagexec.Graph()
    g.add("long", time.sleep, args=(1.0,), isolate="process", priority=10)
    g.add("b", pt.pid, isolate="process", timeout=0.3)
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        result = ex.run(g)
    assert watch.names == ["b"]
    assert result.status["b"] is TaskState.DONE and result.stats.timeouts == 0


# -- withdrawn: a stop, a cancel, Ctrl-C --------------------------------------------


def _cleanup_graph(gate: pt.ProcessGate) -> dagexec.Graph:
    """'clean' (a cleanup task, held at ``gate``: a stop does not kill its child) and
    'b', sent early behind it on the one worker."""
    g = dagexec.Graph()
    g.add(
        "clean",
        pt.held,
        args=(gate.directory,),
        isolate="process",
        run_if="all_done",
        priority=10,
    )
    g.add("b", pt.pid, isolate="process")
    return g


def _assert_same_child_serves(child: int) -> None:
    assert pt.alive(child), "the child was killed"
    assert dagexec.run(_pids(1), workers=1)["p0"] == child


def test_a_cancel_withdraws_the_call_sent_early_and_keeps_the_child(
    watch: Watch, gate: pt.ProcessGate
) -> None:
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        future = ex.submit(_cleanup_graph(gate), callbacks=[rec := Record()])
        (child,) = gate.wait_for_arrivals(1)
        assert watch.sent.wait(WAIT)
        future.cancel()
        assert watch.dropped.wait(WAIT), "b was not withdrawn"
        gate.open()
        with pytest.raises(CancelledError):
            future.result(timeout=WAIT)
    assert "b" not in rec.started and rec.ended.get("b") is TaskState.CANCELLED
    assert rec.ended["clean"] is TaskState.DONE
    _assert_same_child_serves(child)


def test_a_stop_withdraws_the_call_sent_early_and_keeps_the_child(
    watch: Watch, gate: pt.ProcessGate
) -> None:
    """The stop is the run's timeout= (an abort, like a failure with on_error='raise')."""
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        future = ex.submit(_cleanup_graph(gate), callbacks=[rec := Record()], timeout=1.0)
        (child,) = gate.wait_for_arrivals(1)
        assert watch.sent.wait(WAIT)
        assert watch.dropped.wait(WAIT), "b was not withdrawn"
        gate.open()
        with pytest.raises(TimeoutError):
            future.result(timeout=WAIT)
    assert "b" not in rec.started and rec.ended.get("b") is TaskState.CANCELLED
    _assert_same_child_serves(child)


def test_ctrl_c_withdraws_the_call_sent_early_and_keeps_the_child(
    watch: Watch, gate: pt.ProcessGate
) -> None:
    """SIGINT while the caller's thread drives the run: a first Ctrl-C stops it (the
    cleanup task runs on), so the call sent early is withdrawn."""
    assert threading.current_thread() is threading.main_thread()
    arrivals: list[int] = []

    def interrupt() -> None:
        arrivals.extend(gate.wait_for_arrivals(1))
        if watch.sent.wait(WAIT):
            os.kill(os.getpid(), signal.SIGINT)
            watch.dropped.wait(WAIT)
        gate.open()

    helper = threading.Thread(target=interrupt)
    rec = Record()
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        helper.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                ex.run(_cleanup_graph(gate), callbacks=[rec])
        finally:
            helper.join(WAIT)
    assert watch.dropped.is_set(), "b was not withdrawn"
    assert "b" not in rec.started
    _assert_same_child_serves(arrivals[0])


# -- a crash while a call waits early ---------------------------------------------


def test_a_crash_while_a_call_waits_early_runs_it_on_a_new_child(
    watch: Watch, gate: pt.ProcessGate
) -> None:
    """'crash' kills its child once 'b' went early behind it: b never began, so it is
    not failed but sent again, to a new child, when its turn comes; nothing hangs."""
    g = dagexec.Graph()
    g.add("crash", pt.held_then_exit, args=(gate.directory,), isolate="process", priority=10)
    g.add("b", pt.pid, isolate="process")
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        future = ex.submit(g, on_error="continue")
        (child,) = gate.wait_for_arrivals(1)
        assert watch.sent.wait(WAIT)
        gate.open()
        result = future.result(timeout=WAIT)
    assert watch.names == ["b"]
    assert isinstance(result.errors["crash"], dagexec.WorkerCrashed)
    assert result.status["b"] is TaskState.DONE
    assert result["b"] != child and not pt.alive(child)  # a new child ran it
    assert result.stats.retries == 0 and result.stats.tasks_run == 2


def test_a_child_that_dies_before_the_early_call_began_sends_it_again(
    watch: Watch, gate: pt.ProcessGate
) -> None:
    """'first' answers, then its child dies as it would say BEGAN of 'b': b never began,
    so that crash is not b's, and b goes to a new child::

        held --> first (held at the gate too; patches its child to die)
        held --> b     (lower priority: sent early behind first)
    """
    g = dagexec.Graph()
    g.add("held", pt.held, args=(gate.directory,), isolate="process")
    g.add("first", pt.die_before_next_began, args=(gate.directory,), deps=["held"],
          isolate="process", priority=5)  # fmt: skip
    g.add("b", pt.pid, deps=["held"], isolate="process")
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        future = ex.submit(g)
        gate.wait_for_arrivals(1)
        gate.open(1)
        gate.wait_for_arrivals(2)  # 'first' is held too, with b sent early behind it
        assert watch.sent.wait(WAIT)
        gate.open()
        result = future.result(timeout=WAIT)
    assert watch.names == ["b"]
    assert result.status["b"] is TaskState.DONE and not result.errors
    assert result["b"] != result["first"] and result.stats.tasks_run == 3
    assert not pt.alive(result["first"])


# -- bounds -----------------------------------------------------------------------


def test_bounds_hold_with_calls_sent_early(watch: Watch) -> None:
    """Half the tasks hold the one 'slot' (a task holding a resource is not queued
    behind another, so those go early only behind a task holding none)."""
    g = dagexec.Graph()
    for i in range(16):
        options: dict[str, Any] = {"resources": {"slot": 1}} if i % 2 else {}
        g.add(i, time.sleep, args=(0.02,), isolate="process", **options)
    recorder = InFlightRecorder()
    with dagexec.Executor(workers=2, max_in_flight=3) as ex:
        result = ex.run(g, resources={"slot": 1}, callbacks=[recorder])
    assert_within_bounds(result)
    assert result.stats.peak_in_flight <= 3 and recorder.peak <= 3
    assert result.stats.peak_resources["slot"] <= 1
    assert _done(result) == 16
    assert watch.names, "nothing went early: the test proves nothing"


# -- the twin: the same plans, on and off ------------------------------------------


def _twin_graphs(tmp_path: Path) -> list[tuple[str, dagexec.Graph, dict[str, Any]]]:
    wide = dagexec.Graph()
    for i in range(8):
        wide.add(f"w{i}", pt.square, args=(i,), isolate="process")
    chain = dagexec.Graph()
    chain.add("c0", pt.square, args=(3,), isolate="process")
    for i in range(1, 5):
        chain.add(f"c{i}", pt.add, deps=[f"c{i - 1}"], args=(i,), isolate="process")
    mixed = dagexec.Graph()
    mixed.add("a", pt.square, args=(4,), isolate="process")
    mixed.add("bad", pt.fail, deps=["a"], isolate="process")
    mixed.add("after", pt.square, deps=["bad"], isolate="process")
    mixed.add("ok", pt.add, deps=["a"], args=(1,), isolate="process")
    mixed.add("flaky", pt.fail_first_attempt, isolate="process", retries=1)
    mixed.add("t", int, args=("7",))  # a thread task among them
    mixed.add("clean", pt.pid, deps=["bad"], isolate="process", run_if="all_done")
    return [
        ("wide", wide, {}),
        ("chain", chain, {}),
        ("mixed", mixed, {"on_error": "continue"}),
        ("mixed, raise", mixed, {"on_error": "raise"}),
    ]


def _outcome(g: dagexec.Graph, workers: int, options: dict[str, Any]) -> tuple[Any, ...]:
    with dagexec.Executor(workers=workers) as ex:
        try:
            result = ex.run(g, **options)
        except ValueError as exc:  # on_error="raise": the failure itself
            return ("raised", type(exc).__name__, str(exc).splitlines()[0])
    values = {k: v for k, v in result.items() if k != "clean"}  # a pid
    errors = {k: type(e).__name__ for k, e in result.errors.items()}
    return dict(result.status), values, errors, result.stats.tasks_run, result.stats.retries


@pytest.mark.parametrize("workers", [1, 2])
def test_twin_the_same_plans_end_the_same_with_early_send_on_and_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workers: int
) -> None:
    for label, g, options in _twin_graphs(tmp_path):
        monkeypatch.setattr(early, "EARLY_SEND", False)
        off = _outcome(g, workers, options)
        monkeypatch.setattr(early, "EARLY_SEND", True)
        on = _outcome(g, workers, options)
        assert on == off, label


# -- the slot's branches, driven directly ---------------------------------------------


class _Reports:
    def __init__(self) -> None:
        self.got: list[Any] = []

    def __call__(self, report: Any) -> None:
        self.got.append(report)


def _item(
    fn: Any, name: str, stop: Flag, *, timeout: float | None = None, args: tuple[Any, ...] = ()
) -> tuple[Any, ...]:
    call = IsolatedCall(fn, name, "process", timeout, False, ())
    attempt = Attempt(call, CurrentTask(name, 1, threading.Event()))
    return (_Reports(), 0, attempt, args, 0, stop, None)


@pytest.fixture
def slot() -> Iterator[ChildSlot]:
    s = ChildSlot()
    try:
        yield s
    finally:
        s.end()


def _warm(slot: ChildSlot, stop: Flag) -> int:
    """Start ``slot``'s child with one call of run ``stop``; its pid."""
    first = _item(pt.pid, "first", stop)
    pid: int = slot.run(first[2].fn, (), first[2].info, stop)
    return pid


def test_a_withdraw_after_the_child_began_leaves_a_running_call(slot: ChildSlot) -> None:
    """The branch "may have begun": BEGAN is in the pipe before the withdraw goes."""
    stop = Flag()
    child = _warm(slot, stop)
    item = _item(pt.pid, "b", stop)
    sent = early.send_early(slot, item)
    assert sent is not None
    slot.early = sent
    assert slot.poller is not None and slot.poller.poll(WAIT * 1000)  # BEGAN is there
    assert early.withdraw(slot, sent) is True  # it began: it runs as any call
    assert sent.began is not None and not sent.dropped
    assert early.run_sent(slot, sent, (), stop) == child


def test_a_complete_answer_after_the_deadline_counted_from_began_is_never_used(
    slot: ChildSlot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child's BEGAN stamp is made old: the answer, complete in the pipe, comes
    after the deadline, so the call times out and its child is killed."""
    stop = Flag()
    child = _warm(slot, stop)
    note = early.note

    def aged(s: Any, meta: Any) -> None:
        if meta[0] == "began":
            meta = (meta[0], meta[1], meta[2] - 60.0)
        note(s, meta)

    monkeypatch.setattr(early, "note", aged)
    item = _item(pt.pid, "b", stop, timeout=1.0)
    sent = early.send_early(slot, item)
    assert sent is not None
    slot.early = sent
    with pytest.raises(dagexec.TaskTimeout):
        early.run_sent(slot, sent, (), stop)
    assert slot.proc is None and not pt.alive(child)


# -- the inbox's side -----------------------------------------------------------------


def test_inbox_watch_writes_once_when_an_item_comes_and_take_first_asks_first() -> None:
    inbox: Inbox[int] = Inbox(2)
    r, w = os.pipe2(os.O_NONBLOCK)
    try:
        assert inbox.watch(w) is False
        inbox.put_nowait(1)
        assert os.read(r, 8) == b"\0"
        inbox.put_nowait(2)  # written once per watch
        with pytest.raises(BlockingIOError):
            os.read(r, 8)
        assert inbox.watch(w) is True  # items there already: nothing watched
        assert inbox.take_first(lambda first: first == 2) is None
        assert inbox.take_first(lambda first: first == 1) == 1
        assert inbox.get_nowait() == 2
        assert inbox.watch(w) is False
        inbox.unwatch()
        inbox.put_nowait(3)  # not watched any more: nothing written, nobody woken
        with pytest.raises(BlockingIOError):
            os.read(r, 8)
        assert inbox.get(timeout=WAIT) == 3
    finally:
        os.close(r)
        os.close(w)


def test_live_children_are_the_same_before_and_after_early_runs(watch: Watch) -> None:
    with dagexec.Executor(workers=1, max_in_flight=2) as ex:
        first = set(ex.run(_pids(1)).values())
        g = dagexec.Graph()
        for i in range(5):
            g.add(i, time.sleep, args=(0.05,), isolate="process")
        g.add("pid", pt.pid, isolate="process")
        after = ex.run(g)["pid"]
    assert first == {after} and after in live_children()
