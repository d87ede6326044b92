"""The run state machine with real task functions, and no threads.

A serial "world" plays the scheduler and the workers in one loop: it hands
tasks out, runs each item's functions itself (a chain member by member, as a
worker does, and reports it through ``chain_ended``), and reports the ends in
random batches. So maps, chains, failures, stops, retries and cleanup tasks go
through the very methods the engine calls, and every test here can compare the
run's values and states with what the graph must give.

Both ways a batch of returned jobs can take through :meth:`RunState.ended`, the
plain run's inline loop and the general one (``_returned``), are run on the same
plans and must leave the same states and values (issue 20: a fast path is kept
only with a test that compares it with its general path).
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagexec import MISSING, Graph
from dagexec._core.plan import Plan, plan_run
from dagexec._core.result import CANCELLED, DONE, FAILED, SKIPPED
from dagexec._state.events import END, LET_GO, RELEASE, RETURNED, TAKEN_BACK, ChainEnd
from dagexec._state.moves import MoveChecker
from dagexec._state.runstate import RunState


def plan_of(g: Graph, targets: list[Hashable] | None = None) -> Plan:
    return plan_run(g._compile(), targets)


def members_of(state: RunState, head: int) -> list[int]:
    members = [head]
    while state.chain_next[members[-1]] >= 0:
        members.append(state.chain_next[members[-1]])
    return members


def world(
    plan: Plan,
    *,
    seed: int = 0,
    on_error: str = "raise",
    general: bool = False,
    observed: bool = False,
    stop_after: int = -1,
    capacity: dict[str, float] | None = None,
) -> RunState:
    """Run ``plan`` to its end on the machine alone; return the machine.

    ``general`` turns the plain run's inline loop off, so that every batch takes
    the general path. ``stop_after``: stop the run (as an abort does) once that
    many items have ended. ``capacity``: the resources' (none by default).
    After every step the machine is checked against the
    table of legal moves and its invariants (``dagexec._state.moves``).
    """
    rng = random.Random(seed)
    state = RunState(plan, on_error=on_error, workers=2, observed=observed, capacity=capacity)
    if general:
        state.plain = False
    running: list[tuple[int, tuple[Any, ...]]] = []
    checker = MoveChecker(state)  # checks the roots made ready
    ended_items = 0
    while state.unfinished:
        # After a stop only cleanup tasks are ready: they still run.
        if state.has_ready() and (not running or rng.random() < 0.5):
            tasks, arguments = state.hand_out(rng.randint(1, 3), rng.randrange(2))
            running.extend(zip(tasks, arguments, strict=True))
            checker.check([head for head, _ in running])
            if tasks:
                continue
        if not running:
            if not state.timers:
                raise state.stuck_error()
            state.wake(state.timers[0][0])  # a retry's timer: the world's clock jumps
            checker.check([])
            continue
        batch: list[tuple[Any, ...]] = []
        for _ in range(rng.randint(1, len(running))):
            head, args = running.pop(rng.randrange(len(running)))
            worker = rng.randrange(2)
            members = members_of(state, head)
            if len(members) > 1:
                state.chain_ended(tuple(members), run_chain(state, members, args), worker)
            else:
                try:
                    value = state.fns[head](*args)
                except Exception as exc:
                    number = state.attempt.get(head, 1)
                    state.finish(head, FAILED, exc, worker)
                    checker.check()
                    state.release(head, number)
                else:
                    batch.append((worker, head, 0, value, 0.0, 0.0))
            checker.check()
            ended_items += 1
            if ended_items == stop_after:
                state.ended(batch)
                batch = []
                checker.check()
                state.stop()
                checker.check()
        state.ended(batch)
        checker.check([head for head, _ in running])
    assert state.in_flight == 0
    return state


def run_chain(state: RunState, members: list[int], args: tuple[Any, ...]) -> ChainEnd:
    """What a worker does with a chain: each member on the previous one's value."""
    value: Any = None
    for k, member in enumerate(members):
        try:
            value = state.fns[member](*args)
        except Exception as exc:
            return ChainEnd(k, False, exc, None)
        args = (value,)
    return ChainEnd(len(members), True, value, None)


def value(state: RunState, name: Hashable) -> Any:
    return state.values[state.index[name]]


def final(state: RunState, name: Hashable) -> int:
    return state.state[state.index[name]]


# ------------------------------------------------------------------------ maps
def test_a_map_over_a_map_gathers_the_items_in_order() -> None:
    g = Graph()
    g.add("src", lambda: [1, 2, 3, 4])
    g.add("k", lambda: 10)
    g.map("sq", lambda x, k: x * x + k, over="src", deps=["k"])
    g.map("plus", lambda x: x + 1, over="sq")
    g.add("total", lambda xs: sum(xs), deps=["plus"])
    for seed in range(20):
        state = world(plan_of(g), seed=seed)
        assert value(state, "total") == sum(x * x + 11 for x in [1, 2, 3, 4])
        assert all(s == DONE for s in state.state)
        assert state.items == {}  # each element let go at its item's dispatch


def test_a_map_of_nothing_gathers_an_empty_list() -> None:
    g = Graph()
    g.add("src", list)
    g.map("m", lambda x: x, over="src")
    g.map("m2", lambda x: x, over="m")
    state = world(plan_of(g, ["m", "m2"]))
    assert value(state, "m") == [] and value(state, "m2") == []


def test_a_map_whose_source_cannot_be_iterated_fails_with_a_note() -> None:
    g = Graph()
    g.add("src", lambda: 5)
    g.map("m", lambda x: x, over="src")
    g.add("after", lambda xs: xs, deps=["m"])
    state = world(plan_of(g), on_error="continue")
    assert final(state, "m") == FAILED and final(state, "after") == SKIPPED
    (exc,) = state.errors.values()
    assert isinstance(exc, TypeError)
    assert any("iterates the value of 'src'" in n for n in exc.__notes__)


def test_a_failed_item_skips_its_gather_and_the_items_chained_to_it() -> None:
    g = Graph()
    g.add("src", lambda: [1, 0, 2])
    g.map("inv", lambda x: 1 / x, over="src")
    g.map("twice", lambda x: 2 * x, over="inv")
    g.add("total", lambda xs: sum(xs), deps=["twice"])
    for seed in range(20):
        state = world(plan_of(g), seed=seed, on_error="continue")
        assert final(state, ("inv", 1)) == FAILED
        assert final(state, ("twice", 1)) == SKIPPED
        assert final(state, ("twice", 0)) == DONE and final(state, ("twice", 2)) == DONE
        assert final(state, "twice") == SKIPPED and final(state, "total") == SKIPPED
        assert value(state, ("twice", 0)) is None  # nobody will read it: let go


def test_a_map_over_a_failed_map_is_skipped() -> None:
    g = Graph()
    g.add("src", lambda: 1 / 0)
    g.map("a", lambda x: x, over="src")
    g.map("b", lambda x: x, over="a")
    state = world(plan_of(g), on_error="continue")
    assert [final(state, n) for n in ("src", "a", "b")] == [FAILED, SKIPPED, SKIPPED]


def test_a_cleanup_map_runs_on_the_ends_of_its_extra_deps() -> None:
    g = Graph()
    g.add("src", lambda: [1, 2])
    g.add("bad", lambda: 1 / 0)
    g.map("tidy", lambda x, b: (x, b is MISSING or type(b).__name__), over="src",
          deps=["bad"], run_if="all_done")  # fmt: skip
    g.map("tidy_none", lambda x, b: x, over="bad", deps=["src"], run_if="all_done")
    for seed in range(10):
        state = world(plan_of(g), seed=seed, on_error="continue")
        assert value(state, "tidy") == [(1, "ZeroDivisionError"), (2, "ZeroDivisionError")]
        assert final(state, "tidy_none") == SKIPPED  # its over failed: no items


def test_a_map_with_priorities_retries_and_events_goes_through_the_general_path() -> None:
    g = Graph()
    tries: dict[int, int] = {}

    def flaky(x: int) -> int:
        tries[x] = tries.get(x, 0) + 1
        if tries[x] == 1:
            raise OSError(x)
        return x

    g.add("src", lambda: [3, 4], priority=2)
    g.map("m", flaky, over="src", retries=1)
    state = world(plan_of(g), observed=True)
    assert value(state, "m") == [3, 4] and tries == {3: 2, 4: 2}
    assert state.retries == 2 and state.events


def test_a_stopped_map_cancels_what_was_not_handed_out() -> None:
    g = Graph()
    g.add("src", lambda: list(range(8)))
    g.map("m", lambda x: x, over="src")
    state = world(plan_of(g), stop_after=2)
    assert final(state, "m") == CANCELLED
    assert CANCELLED in {final(state, ("m", i)) for i in range(8)}


# ---------------------------------------------------------------------- chains
def test_a_chain_ends_through_chain_ended_with_every_member_done() -> None:
    g = Graph()
    g.add(0, lambda: 1)
    for i in range(1, 6):
        g.add(i, lambda x: x + 1, deps=[i - 1])
    plan = plan_of(g)
    assert plan.chain_next[0] >= 0  # fused into one chain
    for general in (False, True):
        state = world(plan, general=general)
        assert value(state, 5) == 6 and all(s == DONE for s in state.state)
        assert state.ran_on[0] + state.ran_on[1] == 6


def test_a_chain_member_that_raises_fails_and_the_rest_is_cancelled_or_skipped() -> None:
    g = Graph()
    g.add(0, lambda: 1)
    g.add(1, lambda x: 1 / 0, deps=[0])
    g.add(2, lambda x: x, deps=[1])
    g.add(3, lambda x: x, deps=[2])
    for on_error, after in (("raise", CANCELLED), ("continue", SKIPPED)):
        state = world(plan_of(g), on_error=on_error)
        assert [final(state, t) for t in range(4)] == [DONE, FAILED, after, after]
        assert isinstance(state.first_error or state.errors[1], ZeroDivisionError)


# ----------------------------------------------- the plain loop vs the general one
@st.composite
def plans(draw: st.DrawFn) -> Plan:
    """A random DAG of small sums, with chains wherever the shape makes them."""
    n = draw(st.integers(1, 25))
    g = Graph()
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        g.add(i, lambda *a, i=i: (i * 7 + sum(a)) % 1009, deps=deps)
    targets = draw(st.none() | st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
    return plan_of(g, targets)


@settings(max_examples=60, deadline=None)
@given(plans(), st.integers(0, 2**32))
def test_the_plain_loop_and_the_general_one_leave_the_same_run(plan: Plan, seed: int) -> None:
    plain = world(plan, seed=seed)
    assert plain.plain  # the inline loop was taken
    general = world(plan, seed=seed, general=True)
    assert plain.state == general.state
    assert plain.values == general.values
    assert plain.consumers == general.consumers and plain.remaining == general.remaining
    assert plain.ran_on == general.ran_on and plain.unfinished == general.unfinished == 0


@pytest.mark.parametrize(
    "option",
    [{}, {"priority": 2}, {"resources": {"cpu": 1}}, {"retries": 1}, {"run_if": "all_done"}],
)
@pytest.mark.parametrize("with_map", [False, True])
def test_only_a_run_that_is_not_plain_has_parts_to_close(
    option: dict[str, Any], with_map: bool
) -> None:
    # The driver skips close() for a plain run (scheduler.Run._let_go): no part
    # of such a state may refer back to it.
    g = Graph()
    g.add("a", lambda: [1, 2])
    g.add("b", lambda a: a, deps=["a"], **option)
    if with_map:
        g.map("m", lambda x: x, over="a")
    state = RunState(plan_of(g), capacity={"cpu": 2})
    parts = (state.gate, state.resources, state.fanout)
    assert state.plain == (not option and not with_map)
    assert not state.plain or parts == (None, None, None)


@settings(max_examples=60, deadline=None)
@given(plans())
def test_a_plain_runs_roots_start_as_make_ready_would_make_them_ready(plan: Plan) -> None:
    plain = RunState(plan)
    assert plain.plain  # its roots took the inline loop
    general = RunState(plan)
    general.ready.clear()
    general.state[:] = bytes(len(general.state))  # every task WAITING again
    for root in general.push_order(plan.roots):
        general.make_ready(root)
    assert plain.state == general.state
    assert list(plain.ready) == list(general.ready)
    taken = [plain.take() for _ in plan.roots]
    assert taken == list(plan.roots)  # taken in their own order (depth first)


@pytest.mark.parametrize("general", [False, True])
def test_a_stop_midway_ends_every_task_either_way(general: bool) -> None:
    g = Graph()
    for i in range(40):
        g.add(i, lambda *a: 1, deps=[i - 1] if i % 4 else [])  # chains of 4
    state = world(plan_of(g), general=general, stop_after=1)
    assert all(s in (DONE, CANCELLED) for s in state.state)
    assert CANCELLED in state.state


# ------------------------------------------- the engine's other calls, one by one
def test_a_taken_back_item_is_cancelled_and_a_cleanup_task_is_put_back() -> None:
    g = Graph()
    g.add("a", lambda: 1)
    g.add("tidy", lambda: 2, run_if="all_done")
    state = RunState(plan_of(g), on_error="continue", observed=True)
    state.tell_release = True
    tasks, arguments = state.hand_out(2, 0)
    assert sorted(state.names[t] for t in tasks) == ["a", "tidy"]
    state.stop()
    for task, args in zip(tasks, arguments, strict=True):
        if not state.put_back(task, args):
            state.take_back(task)
    a, tidy = state.index["a"], state.index["tidy"]
    assert state.state[a] == CANCELLED and state.cleanup_pending()
    ((task,), (args,)) = state.hand_out(1, 0)
    assert task == tidy and args == ()
    state.finish(tidy, DONE, 2, 0)
    state.release(tidy)
    assert not state.cleanup_pending() and state.unfinished == 0 and state.in_flight == 0
    releases = [e for e in state.events or () if e.kind == RELEASE]
    # The cleanup task's first attempt is off its worker when it is put back.
    expected = [(a, TAKEN_BACK), (tidy, RETURNED), (tidy, RETURNED)]
    assert [(e.task, e.state) for e in releases] == expected


def test_a_let_go_attempt_holds_its_cleanup_task_until_it_returns() -> None:
    g = Graph()
    g.add("slow", lambda: 1, timeout=1.0)
    g.add("tidy", lambda x: x, deps=["slow"], run_if="all_done")
    state = RunState(plan_of(g), on_error="continue")
    slow, tidy = state.index["slow"], state.index["tidy"]
    state.hand_out(1, 0)
    state.finish(slow, FAILED, TimeoutError("slow"), 0)  # its thread runs on
    state.release(slow, how=LET_GO)
    assert not state.has_ready()  # the cleanup task waits for the attempt
    state.let_go_returned(slow)
    assert state.has_ready() and state.take() == tidy


def test_resources_lent_to_an_earlier_run_are_not_free_until_given_back() -> None:
    g = Graph()
    g.add("a", lambda: 1, resources={"gpu": 0.5})
    plan = plan_of(g)
    state = RunState(plan, capacity={"gpu": 0.75})
    lent = state.lend([("gpu", 0.5), ("other", 1.0)])
    assert state.hand_out(1, 0) == ([], [])  # 0.25 free: 'a' waits
    state.give_back(lent)
    assert state.hand_out(1, 0)[0] == [0]
    assert RunState(plan_of(Graph())).lend([("gpu", 1.0)]) == ()


def test_a_stuck_run_is_named_with_what_each_task_waits_for() -> None:
    g = Graph()
    for i in range(7):
        g.add(i, lambda: 1, resources={"gpu": 2})
    state = RunState(plan_of(g), capacity={"gpu": 1})
    assert state.take() == -1  # nothing fits: the world would be stuck
    message = str(state.stuck_error())
    assert "7 tasks can never start" in message and "and 2 more" in message
    assert "waits for 2 of resource 'gpu', 1 free of 1" in message


def test_a_timed_chain_reports_members_as_they_end_and_the_rest_at_its_end() -> None:
    g = Graph()
    g.add(0, lambda: 1)
    g.add(1, lambda x: x + 1, deps=[0])
    g.add(2, lambda x: x + 1, deps=[1])
    plan = plan_of(g)
    state = RunState(plan, observed=True)
    (head,), _ = state.hand_out(1, 0)
    members = tuple(members_of(state, head))
    assert len(members) == 3
    state.finish(members[0], DONE, None, 0, 1.0, 2.0)  # reported as it ended
    state.chain_ended(members, ChainEnd(3, True, 3, [1.0, 2.0, 2.0, 3.0, 3.0, 4.0]), 0)
    assert list(state.state) == [DONE] * 3 and state.values[2] == 3
    ends = [(e.task, e.started) for e in state.events or () if e.kind == END]
    assert ends == [(0, 1.0), (1, 2.0), (2, 3.0)]


def test_log_lines_name_the_failed_and_the_retried_task() -> None:
    g = Graph()
    g.add("a", lambda: 1, retries=1)
    lines: list[str] = []
    state = RunState(plan_of(g), log=lambda fmt, *args: lines.append(fmt % args))
    a = state.index["a"]
    for _ in range(2):
        state.hand_out(1, 0)
        state.finish(a, FAILED, OSError("disk"), 0)
        state.release(a)
        state.wake(state.timers[0][0] if state.timers else 0.0)
    assert "task 'a' failed (attempt 1 of 2: OSError: disk); retrying" in lines[0]
    assert lines[1] == "task 'a' failed: OSError: disk"


def test_fractional_resources_add_up_exactly() -> None:
    g = Graph()
    for i in range(3):
        g.add(i, lambda: 1, resources={"mem": 0.1})
    state = RunState(plan_of(g), capacity={"mem": 0.3})
    taken = [state.hand_out(1, 0)[0] for _ in range(3)]
    assert all(len(t) == 1 for t in taken)  # three of 0.1 fit in 0.3
    assert state.peak_resources({"mem": 0.3}) == {"mem": 0.3}


def test_a_map_of_resource_needing_items_keeps_to_the_capacity() -> None:
    g = Graph()
    g.add("src", lambda: [1, 2, 3])
    g.map("m", lambda x: x, over="src", resources={"gpu": 1})
    g.map("m2", lambda x: x, over="m")
    state = RunState(plan_of(g), capacity={"gpu": 1})
    order = []
    while state.unfinished:
        tasks, arguments = state.hand_out(3, 0)
        assert len(tasks) <= 1
        for task, args in zip(tasks, arguments, strict=True):
            order.append(state.names[task])
            state.ended([(0, task, 0, state.fns[task](*args), 0.0, 0.0)])
    assert state.values[state.index["m2"]] == [1, 2, 3]
