"""Tasks see the caller's contextvars, each in its own copy (issue 8, item 15).

Logging and tracing libraries keep request ids and spans in contextvars, and
peers (``asyncio.to_thread``, dask's threads) forward them to the code they
run. Graph used by most tests::

    single                  (a task on its own)
    head --> middle --> tail    (a linear run dispatched as one unit)
"""

from __future__ import annotations

import contextvars
import gc
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import pytest

import dagexec

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


def seen() -> str:
    return request_id.get()


def graph_reading_the_var() -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("single", seen)
    g.add("head", lambda: [seen()])
    g.add("middle", lambda xs: [*xs, seen()], deps=["head"])
    g.add("tail", lambda xs: [*xs, seen()], deps=["middle"])
    return g


class Dispatches(dagexec.Callback):
    def __init__(self) -> None:
        self.names: list[Hashable] = []

    def on_task_dispatch(self, name: Hashable, worker: int) -> None:
        self.names.append(name)


def run_with_executor(g: dagexec.Graph, **kwargs: Any) -> dagexec.RunResult:
    with dagexec.Executor(workers=2) as ex:
        return ex.run(g, **kwargs)


ENTRY_POINTS: list[Callable[..., dagexec.RunResult]] = [
    lambda g, **kw: dagexec.run(g, workers=2, **kw),
    run_with_executor,
]


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=["run", "Executor.run"])
def test_tasks_and_fused_chain_members_see_the_callers_contextvars(
    entry: Callable[..., dagexec.RunResult],
) -> None:
    dispatches = Dispatches()

    def in_caller() -> dagexec.RunResult:
        request_id.set("req-42")
        return entry(graph_reading_the_var(), callbacks=[dispatches])

    result = contextvars.Context().run(in_caller)  # the test's own context stays clean
    assert result["single"] == "req-42"
    assert result["tail"] == ["req-42"] * 3
    assert sorted(dispatches.names) == ["head", "single"]  # the chain ran as one unit


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=["run", "Executor.run"])
def test_a_tasks_set_does_not_leak_into_other_tasks_or_the_caller(
    entry: Callable[..., dagexec.RunResult],
) -> None:
    """One worker runs everything in turn, so a leak would reach the next task."""

    def set_then_read(value: str) -> Callable[..., list[str]]:
        def task(*before: list[str]) -> list[str]:
            seen_first = seen()
            request_id.set(value)
            return [*(before[0] if before else []), seen_first]

        return task

    g = dagexec.Graph()
    for i in range(5):
        g.add(f"solo{i}", set_then_read(f"solo{i}"))
    g.add("head", set_then_read("head"))
    g.add("middle", set_then_read("middle"), deps=["head"])
    g.add("tail", set_then_read("tail"), deps=["middle"])

    def in_caller() -> tuple[dagexec.RunResult, str]:
        request_id.set("caller")
        if entry is run_with_executor:
            with dagexec.Executor(workers=1) as ex:
                result = ex.run(g)
        else:
            result = dagexec.run(g, workers=1)
        return result, seen()

    result, after = contextvars.Context().run(in_caller)
    assert after == "caller"
    assert [result[f"solo{i}"] for i in range(5)] == [["caller"]] * 5
    assert result["tail"] == ["caller"] * 3


def test_a_second_run_sees_its_own_callers_value_on_the_same_workers() -> None:
    g = dagexec.Graph()
    g.add("x", seen)
    with dagexec.Executor(workers=1) as ex:

        def run_as(value: str) -> Any:
            request_id.set(value)
            return ex.run(g)["x"]

        assert contextvars.Context().run(run_as, "first") == "first"
        assert contextvars.Context().run(run_as, "second") == "second"


def test_a_failing_tasks_traceback_still_starts_at_the_task() -> None:
    def explode() -> None:
        raise ValueError("boom")

    g = dagexec.Graph()
    g.add("explode", explode)

    def in_caller() -> None:
        request_id.set("set")
        dagexec.run(g, workers=1)

    with pytest.raises(ValueError, match="boom") as info:
        contextvars.Context().run(in_caller)
    frames = [entry.name for entry in info.traceback]
    assert frames[-1] == "explode"
    assert "worker_loop" not in frames


def test_a_value_a_task_sets_does_not_leak_into_later_tasks_even_from_an_empty_context() -> None:
    """One worker runs both tasks, in order; the caller's context is empty."""

    def setter() -> str:
        request_id.set("leaked")
        return "set"

    g = dagexec.Graph()
    g.add("setter", setter)
    g.add("reader", lambda _: request_id.get(), deps=["setter"])
    g.add("other", lambda: request_id.get())
    with dagexec.Executor(workers=1) as ex:
        first = contextvars.Context().run(ex.run, g, ["reader"])
        second = contextvars.Context().run(ex.run, g, ["other"])
    assert first["reader"] == "unset"
    assert second["other"] == "unset"


class _Big:
    """A value whose release the tests watch (by weak reference)."""


def test_jobs_from_an_empty_context_see_nothing_set_by_earlier_tasks_on_their_worker() -> None:
    """The caller's context is empty, so each task runs in its worker's own Context
    (not a copy): a task that sets a var there must leave the next one a fresh,
    empty Context. One worker; the four tasks are separate jobs (no chain: each
    setter has more than one user), run in the order of their dependencies."""

    def setter() -> str:
        first = request_id.get()
        request_id.set("leaked")
        return first

    g = dagexec.Graph()
    g.add("setter", setter)
    g.add("setter_again", lambda _: setter(), deps=["setter"])
    g.add("reader", lambda *_: request_id.get(), deps=["setter", "setter_again"])
    g.add("reader_too", lambda *_: request_id.get(), deps=["setter", "setter_again"])
    with dagexec.Executor(workers=1) as ex:
        everything = ["setter", "setter_again", "reader", "reader_too"]
        result = contextvars.Context().run(ex.run, g, everything)
        again = contextvars.Context().run(ex.run, g, everything)
    for r in (result, again):
        assert [r[k] for k in ("setter", "setter_again", "reader", "reader_too")] == ["unset"] * 4


def test_a_value_set_in_the_workers_own_context_is_let_go_after_its_task() -> None:
    """What a task sets in its worker's own Context must not outlive the task (an
    idle worker keeps nothing alive)."""
    holder: contextvars.ContextVar[_Big] = contextvars.ContextVar("holder")
    refs: list[weakref.ref[_Big]] = []

    def keep() -> int:
        big = _Big()
        refs.append(weakref.ref(big))
        holder.set(big)
        return 1

    g = dagexec.Graph()
    g.add("keep", keep)
    after = dagexec.Graph()
    after.add("next", lambda: 2)
    with dagexec.Executor(workers=1) as ex:
        assert contextvars.Context().run(ex.run, g)["keep"] == 1
        # The gate: the only worker took this run's task, so it has looked at its
        # own Context since "keep" ended (the run above may return a moment before).
        assert contextvars.Context().run(ex.run, after)["next"] == 2
        gc.collect()
        assert refs[0]() is None  # gone while the worker waits for more work


def test_a_task_that_resets_what_it_set_leaves_the_context_as_it_found_it() -> None:
    def set_and_reset() -> str:
        token = request_id.set("for a moment")
        request_id.reset(token)
        return request_id.get()

    g = dagexec.Graph()
    g.add("a", set_and_reset)
    g.add("b", lambda _: request_id.get(), deps=["a"])
    g.add("c", lambda _: request_id.get(), deps=["a"])
    with dagexec.Executor(workers=1) as ex:
        r = contextvars.Context().run(ex.run, g, ["a", "b", "c"])
    assert (r["a"], r["b"], r["c"]) == ("unset", "unset", "unset")


class _SetsOnDel:
    """Sets ``request_id`` when let go of: a finalizer that runs on the worker."""

    def __init__(self, refs: list[weakref.ref[_Big]]) -> None:
        self.refs = refs

    def __del__(self) -> None:
        big = _Big()
        self.refs.append(weakref.ref(big))
        request_id.set(big)  # type: ignore[arg-type]  # any value will do


def test_a_finalizer_run_between_a_chains_members_reaches_no_later_task() -> None:
    """A chain member's input is let go of by the worker between members, outside
    any task: its finalizer's contextvar must reach neither the plain jobs that
    run next on that worker nor outlive the worker's next look (the gate: a
    second run on the only worker). Found by an outside review."""
    refs: list[weakref.ref[_Big]] = []
    g = dagexec.Graph()
    g.add("head", lambda: _SetsOnDel(refs))
    g.add("middle", lambda x: 1, deps=["head"])  # drops its input: the chain lets it go
    g.add("tail", lambda x: x + 1, deps=["middle"])
    g.add("r1", lambda x: request_id.get(), deps=["tail"])  # two users: plain jobs
    g.add("r2", lambda x: request_id.get(), deps=["tail"])
    after = dagexec.Graph()
    after.add("next", lambda: request_id.get())
    with dagexec.Executor(workers=1) as ex:
        r = contextvars.Context().run(ex.run, g, ["r1", "r2"])
        assert refs, "the finalizer ran"
        assert (r["r1"], r["r2"]) == ("unset", "unset")
        assert contextvars.Context().run(ex.run, after)["next"] == "unset"
        gc.collect()
        assert refs[0]() is None


def set_in_child(tag: str, *_: Any) -> str:
    """Read, then set, a contextvar in the child process (module level: picklable)."""
    before = request_id.get()
    request_id.set(tag)
    return before


def test_process_calls_in_one_child_do_not_see_each_others_contextvars() -> None:
    """One worker, so one child runs all three calls in turn."""
    g = dagexec.Graph()
    g.add("a", set_in_child, args=["a"], isolate="process")
    g.add("b", set_in_child, args=["b"], deps=["a"], isolate="process")
    g.add("c", set_in_child, args=["c"], deps=["b"], isolate="process")
    with dagexec.Executor(workers=1) as ex:
        r = contextvars.Context().run(ex.run, g, ["a", "b", "c"])
    assert [r[k] for k in "abc"] == ["unset"] * 3
