"""The engine survives hostile user objects, and drains a run if it fails anyway."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import dagexec
from dagexec import Graph
from dagexec._core.result import DONE as S_DONE
from dagexec._state.runstate import RunState
from dagexec.testing import Gate, run_in_thread


class BadName:
    """A task name whose repr raises."""

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return other is self


def test_a_failing_task_with_a_hostile_name_raises_its_own_exception() -> None:
    g = Graph()
    name = BadName()
    g.add(name, lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError) as info:
        dagexec.run(g, workers=1)
    assert any(n.startswith("dagexec: raised by task ") for n in info.value.__notes__)


def test_a_task_exception_with_tuple_notes_still_gets_its_note() -> None:
    def fail() -> None:
        exc = ValueError("x")
        exc.__notes__ = ("theirs",)  # type: ignore[assignment]
        raise exc

    g = Graph()
    g.add("f", fail)
    with pytest.raises(ValueError) as info:
        dagexec.run(g, workers=1)
    assert list(info.value.__notes__) == ["theirs", "dagexec: raised by task 'f'"]


def test_an_internal_error_returns_only_after_the_runs_tasks_drained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine breaks after 'a' returned; 'slow' is still running: the caller must
    not get the error before 'slow' is done, and the executor stays usable."""
    gate = Gate()
    ended = threading.Event()
    g = Graph()
    slow_started, a_ran = threading.Event(), threading.Event()
    g.add("slow", lambda: (slow_started.set(), gate.wait(), ended.set()))
    # 'a' ends only once 'slow' runs, so 'slow' cannot be taken back from its inbox.
    g.add("a", lambda: (slow_started.wait(10), a_ran.set(), 1)[-1])
    real = RunState.ended

    def broken(
        self: RunState, reports: list[tuple[Any, ...]], outcome: int = S_DONE, release: bool = True
    ) -> None:
        if outcome == S_DONE and any(
            self.names[report[1]] == "a" for report in reports
        ):  # 'a' returned
            raise RuntimeError("engine bug")
        real(self, reports, outcome, release)

    monkeypatch.setattr(RunState, "ended", broken)
    with dagexec.Executor(workers=2) as ex:
        future = run_in_thread(ex.run, g)
        assert gate.wait_for_waiting(1)
        assert a_ran.wait(10)  # the engine fails on its report while 'slow' runs
        gate.open()
        with pytest.raises(RuntimeError, match="engine bug") as info:
            future.result(timeout=30)
        assert ended.is_set()  # the caller got the error only after 'slow' ended
        assert "dagexec: internal error in the scheduler" in info.value.__notes__[0]
        monkeypatch.setattr(RunState, "ended", real)
        assert ex.run(g)["a"] == 1


@pytest.mark.parametrize("theirs", ["not a list", "(dagexec: raised by task 'f')"])
def test_a_task_exception_with_string_notes_keeps_them_as_one_note(theirs: str) -> None:
    """A str __notes__ was split into characters ([*notes, note]), and a note that
    is a substring of it ("in") was taken as present already."""

    class Odd(Exception):
        __notes__ = theirs

    def f() -> None:
        raise Odd()

    g = dagexec.Graph()
    g.add("f", f)
    with pytest.raises(Odd) as info:
        dagexec.run(g)
    assert list(info.value.__notes__) == [theirs, "dagexec: raised by task 'f'"]


@pytest.mark.parametrize("fail_at", [1, 5, 40])
def test_a_dispatch_callback_raising_mid_batch_sends_none_of_that_batch(fail_at: int) -> None:
    """Tasks go to a worker in batches, and on_task_dispatch is called for each
    before the batch is put. When it raises for one of them, no task of that batch
    may run (they are taken back), none runs twice, and the caller gets the error."""
    ran: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            ran.append(i)
        return i

    g = Graph()
    for i in range(60):
        g.add(i, work, args=(i,))
    seen: list[Any] = []

    class Boom:
        def on_task_dispatch(self, name: Any, worker: int) -> None:
            seen.append(name)
            if len(seen) == fail_at:
                raise LookupError(f"dispatch callback gave up at {name!r}")

    with dagexec.Executor(workers=2, queue_cap=16) as ex:
        with pytest.raises(LookupError, match="gave up at") as info:
            ex.run(g, callbacks=[Boom()])
        culprit = seen[fail_at - 1]
        assert culprit not in ran  # its batch was taken back before anyone saw it
        assert len(ran) == len(set(ran))
        assert any("callback" in note for note in info.value.__notes__)
        assert dict(ex.run(g, targets=[0])) == {0: 0}  # the executor is fine
