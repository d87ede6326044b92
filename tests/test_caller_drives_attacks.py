"""A caller driving its own run, attacked where a first version of it broke (a
hostile review): Ctrl-C right after the run slot is taken, shutdown and submit
racing a run's start, a run made but never driven, a shutdown from another
thread, and a task error pinning the run. No sleeps: gates, and interrupts
injected at a chosen point."""

from __future__ import annotations

import gc
import threading
import types
from collections.abc import Hashable, Iterator
from typing import Any

import pytest

import dagexec
import dagexec._engine.front.caller_drives as caller_drives_module
import dagexec._engine.front.executor as executor_module
from dagexec._engine.run.scheduler import Run
from dagexec.testing import Gate


def fan() -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("root", lambda: 1)
    for i in range(4):
        g.add(i, lambda r, i=i: r + i, deps=["root"])
    g.add("sink", lambda *xs: sum(xs), deps=list(range(4)))
    return g


SINK = 4 + 6


@pytest.fixture
def ex() -> Iterator[dagexec.Executor]:
    with dagexec.Executor(workers=2) as executor:
        yield executor


# --- 1. Ctrl-C between taking _slot and the try that lets it go ------------------


def test_ctrl_c_just_after_the_slot_is_taken_leaves_the_executor_usable(
    ex: dagexec.Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGINT is handled right after any call returns. On a5e5f23 one right
    after ``threading.get_ident()`` in _run_prepared (the slot is taken, the try
    in _run_here not yet entered) kept _slot and _driver forever: the next run
    was refused as if called from a task, and a run queued behind hung."""
    real = threading
    fired: list[bool] = []

    def get_ident() -> int:
        ident = real.get_ident()
        if not fired and real.current_thread() is real.main_thread():
            fired.append(True)
            raise KeyboardInterrupt  # what Python's own SIGINT handler raises here
        return ident

    proxy = types.SimpleNamespace(
        **{k: getattr(real, k) for k in dir(real) if not k.startswith("__")}
    )
    proxy.get_ident = get_ident
    monkeypatch.setattr(caller_drives_module, "threading", proxy)
    with pytest.raises(KeyboardInterrupt):
        ex.run(fan())
    monkeypatch.undo()
    assert fired == [True]
    assert not ex._slot.locked()
    assert ex._driver is None
    assert ex.run(fan())["sink"] == SINK
    assert ex.submit(fan()).result(30)["sink"] == SINK


# --- 2. _last is set outside _run_lock ---------------------------------------------


class _SpyLock:
    """_run_lock, recording at each release whether _last names the run just made."""

    def __init__(self, ex: dagexec.Executor, made: list[Run], seen: list[bool]) -> None:
        self.lock, self.ex, self.made, self.seen = threading.Lock(), ex, made, seen

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        return self.lock.acquire(*args, **kwargs)

    def release(self) -> None:
        if self.made and len(self.seen) < len(self.made):
            last = self.ex._last
            self.seen.append(last is not None and last[1]() is self.made[-1])
        self.lock.release()

    def locked(self) -> bool:
        return self.lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_caller_driven_run_is_made_and_recorded_under_the_run_lock(
    ex: dagexec.Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """shutdown() and submit() read and write _last under _run_lock. On a5e5f23
    _run_here set it after letting the lock go: a shutdown in between posted
    the STOPs ahead of the run (it hung), a submit in between was overwritten
    (its tasks landed behind the STOPs: repro_last_race*.py)."""
    made: list[Run] = []
    seen: list[bool] = []

    class Recorded(Run):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(executor_module, "Run", Recorded)
    monkeypatch.setattr(ex, "_run_lock", _SpyLock(ex, made, seen))
    assert ex.run(fan())["sink"] == SINK
    assert len(made) == 1
    assert seen == [True]


def test_shutdown_from_another_thread_during_a_caller_driven_run_then_the_with_block_ends() -> None:
    """On a5e5f23 shutdown(wait=False) recorded (caller thread, run) as the
    abandoned run; once the run was over the caller counted as one of the
    executor's own threads: its shutdown() (the with block's end) raised
    RuntimeError "called from one of this executor's own tasks"."""
    gate = Gate()
    g = dagexec.Graph()
    g.add("x", gate.gated(str))

    with dagexec.Executor(workers=2) as executor:

        def stopper() -> None:
            assert gate.wait_for_waiting(1)
            executor.shutdown(wait=False)  # a watchdog, a request handler...
            gate.open()

        t = threading.Thread(target=stopper)
        t.start()
        try:
            assert dict(executor.run(g)) == {"x": ""}
        finally:
            gate.open()
            t.join()
        assert not executor._on_own_thread()


# --- 3. a run made but never driven ---------------------------------------------------


def test_a_run_interrupted_before_its_driver_starts_lets_shutdown_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Anything raising between the run's creation and Run.main (on a5e5f23 a
    Ctrl-C there) left _last naming a run whose ``cancelled`` is never set:
    shutdown's STOP thread waited for it forever and the workers never exited
    (the autouse fixture reports them)."""
    real_main = Run.main
    calls: list[int] = []

    def main(self: Run, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real_main(self, **kwargs)

    monkeypatch.setattr(Run, "main", main)
    with pytest.raises(KeyboardInterrupt), dagexec.Executor(workers=2) as ex:
        ex.run(fan())
    monkeypatch.undo()
    for t in ex._threads:
        if t.ident is None:
            continue  # never given a task, so never started
        t.join(10)
        assert not t.is_alive()


# --- 4. a plain run's error keeps the run alive ----------------------------------------


class Big:
    pass


def _runs_alive(besides: list[Run]) -> list[Run]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, Run) and all(o is not b for b in besides)]


class _Quiet:
    def on_task_end(self, name: Hashable, state: object, seconds: float) -> None:
        pass


@pytest.mark.parametrize("queued", [False, True], ids=["caller-driven", "queued"])
def test_a_task_error_does_not_keep_the_run_alive(queued: bool, ex: dagexec.Executor) -> None:
    """README: neither a task error nor a callback error keeps the run (its
    values) alive. On a5e5f23 _run_here's frame (in the error's traceback) held
    ``sigint``, whose ``abort`` is the bound ``run.abort``."""

    def bad(b: Big) -> None:
        del b
        raise ZeroDivisionError("bad")

    g = dagexec.Graph()
    g.add("big", Big)
    g.add("bad", bad, deps=["big"])
    earlier = _runs_alive([])
    with pytest.raises(ZeroDivisionError) as info:
        ex.run(g, callbacks=[_Quiet()] if queued else [])
    assert info.value.__traceback__ is not None  # the error is held, with its frames...
    assert _runs_alive(earlier) == []  # ...the run is not
