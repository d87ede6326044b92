"""The legal moves of a task's state, as data (``dagexec._state.moves``).

The table lists every state and every move; the checker holds a run to it and
to the run's invariants. Random graphs with every kind of task the state
machine knows (priorities, resources, retries, failures, cleanup tasks, chains,
stops) run through the serial world of tests/test_runstate_world.py, which
calls the checker after every step, and end as a serial reference says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_layers import graph
from test_runstate_world import plan_of, world

from dagexec import Graph
from dagexec._core import result
from dagexec._state.moves import FINAL, MOVES, STATE_NAMES, BrokenRun, MoveChecker
from dagexec._state.runstate import RunState

DONE, FAILED, SKIPPED, CANCELLED = result.DONE, result.FAILED, result.SKIPPED, result.CANCELLED


def test_the_table_names_every_task_state_and_no_other() -> None:
    codes = {
        getattr(result, name)
        for name in ("WAITING", "READY", "IN_FLIGHT", "HELD", "DONE", "FAILED", "SKIPPED")
    } | {CANCELLED}
    assert set(STATE_NAMES) == codes
    assert {code for move in MOVES for code in move} == codes
    # A final state never moves; every other state has somewhere to go.
    assert not [move for move in MOVES if move[0] in FINAL]
    assert {move[0] for move in MOVES} == codes - FINAL
    assert all(why for why in MOVES.values())


def test_nothing_on_a_runs_path_imports_the_table() -> None:
    # Free at run time: only the tests use the checker.
    importers = [module for module, targets in graph().items() if "_state.moves" in targets]
    assert importers == []


def _three_tasks() -> RunState:
    """a and c, then b on both (no chain: b has two dependencies)."""
    g = Graph()
    g.add("a", lambda: 1)
    g.add("c", lambda: 2)
    g.add("b", lambda a, c: a + c, deps=["a", "c"])
    return RunState(plan_of(g))


def test_the_checker_refuses_a_move_not_in_the_table() -> None:
    state = _three_tasks()
    checker = MoveChecker(state)
    state.state[state.index["a"]] = DONE  # READY -> DONE: it never ran
    state.unfinished -= 1
    with pytest.raises(BrokenRun, match="task 'a' moved READY -> DONE"):
        checker.check()


def test_the_checker_refuses_a_value_kept_with_no_consumer_waiting() -> None:
    state = _three_tasks()
    checker = MoveChecker(state)
    a, b, c = (state.index[name] for name in "abc")
    tasks, _ = state.hand_out(2, 0)
    checker.check(tasks)  # a step at a time: READY -> IN_FLIGHT, then -> DONE
    state.ended([(0, a, 0, 1, 0.0, 0.0), (0, c, 0, 2, 0.0, 0.0)])
    checker.check([])
    state.consumers[a] = 0  # as if b had read it: the value must be gone
    with pytest.raises(BrokenRun, match="task 'a' keeps its value with no consumer left"):
        checker.check([])
    state.consumers[a] = 1
    state.hand_out(1, 0)
    checker.check([b])
    state.consumers[a] = 1
    state.values[a] = 1  # counted, but b has its arguments: nobody waits for it
    with pytest.raises(BrokenRun, match="task 'a' keeps its value, but no consumer waits"):
        checker.check([b])


def test_the_checker_refuses_counts_that_do_not_add_up() -> None:
    state = _three_tasks()
    checker = MoveChecker(state)
    tasks, _ = state.hand_out(1, 0)
    with pytest.raises(BrokenRun, match="the driver holds 0 items"):
        checker.check([])
    state.unfinished += 1
    with pytest.raises(BrokenRun, match="unfinished is 4, but 3 tasks are not final"):
        checker.check(tasks)


def test_the_checker_refuses_resources_that_do_not_add_up() -> None:
    g = Graph()
    g.add("a", lambda: 1, resources={"gpu": 1})
    state = RunState(plan_of(g), capacity={"gpu": 2})
    checker = MoveChecker(state)
    tasks, _ = state.hand_out(1, 0)
    checker.check(tasks)
    assert state.resources is not None
    state.resources.free[0] += 1  # a unit freed twice
    with pytest.raises(BrokenRun, match="resource 'gpu': 2 free, 1 held"):
        checker.check(tasks)


# ------------------------------------------ random runs of every kind, checked
KINDS = ("plain", "plain", "plain", "fails", "fails_once", "cleanup")


def _task(i: int, kind: str) -> Callable[..., Any]:
    if kind == "fails":

        def fails(*_: Any) -> Any:
            raise ValueError(i)

        return fails
    if kind == "cleanup":
        return lambda *_: i  # whatever its dependencies left
    tries = [0]

    def compute(*args: Any) -> Any:
        tries[0] += 1
        if kind == "fails_once" and tries[0] == 1:
            raise ValueError(i)
        return (i * 7 + sum(args)) % 1009

    return compute


@st.composite
def runs(draw: st.DrawFn) -> tuple[Graph, dict[int, str], dict[int, list[int]]]:
    n = draw(st.integers(1, 20))
    g = Graph()
    kinds: dict[int, str] = {}
    deps: dict[int, list[int]] = {}
    for i in range(n):
        deps[i] = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        kinds[i] = kind = draw(st.sampled_from(KINDS))
        options: dict[str, Any] = {}
        if draw(st.booleans()):
            options["priority"] = draw(st.integers(0, 3))
        if draw(st.integers(0, 3)) == 0:
            options["resources"] = {"gpu": draw(st.sampled_from([0.5, 1, 2]))}
        if kind == "fails_once":
            options["retries"] = 1
        if kind == "cleanup":
            options["run_if"] = "all_done"
        g.add(i, _task(i, kind), deps=deps[i], **options)
    return g, kinds, deps


def _reference(kinds: dict[int, str], deps: dict[int, list[int]]) -> dict[int, tuple[int, Any]]:
    """What each task ends as, serially, with on_error="continue"."""
    ends: dict[int, tuple[int, Any]] = {}
    for i, kind in kinds.items():
        if kind == "cleanup":
            ends[i] = (DONE, i)
        elif any(ends[d][0] != DONE for d in deps[i]):
            ends[i] = (SKIPPED, None)
        elif kind == "fails":
            ends[i] = (FAILED, None)
        else:
            ends[i] = (DONE, (i * 7 + sum(ends[d][1] for d in deps[i])) % 1009)
    return ends


@settings(max_examples=50, deadline=None)
@given(runs(), st.integers(0, 2**32), st.integers(-1, 12))
def test_random_runs_of_every_kind_keep_to_the_table_and_end_as_the_reference(
    drawn: tuple[Graph, dict[int, str], dict[int, list[int]]], seed: int, stop_after: int
) -> None:
    g, kinds, deps = drawn
    plan = plan_of(g)
    # world() checks every step against the table and the invariants.
    state = world(plan, seed=seed, on_error="continue", stop_after=stop_after, capacity={"gpu": 2})
    ends = _reference(kinds, deps)
    for i, (end, value) in ends.items():
        got = state.state[state.index[i]]
        assert got in FINAL
        if stop_after < 0:
            assert got == end, f"task {i}: {STATE_NAMES[got]}, not {STATE_NAMES[end]}"
            if end == DONE and state.is_target[state.index[i]]:
                assert state.values[state.index[i]] == value
        else:  # a stop cancels what was not handed out yet, and retries nothing
            assert got != DONE or end == DONE
            assert got != FAILED or kinds[i] in ("fails", "fails_once")
