"""The run state machine on its own: no threads, driven by a seeded random 'world'.

Every test here drives :class:`dagexec._state.runstate.RunState` the way the scheduler
does (take, dispatch, finish, release), but completes items in a random order
chosen by the test, and compares the outcome with a serial reference.
"""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from dagexec import Graph
from dagexec._core.plan import Plan, plan_run
from dagexec._core.result import CANCELLED, DONE, FAILED, IN_FLIGHT, READY, SKIPPED
from dagexec._state import resources as resource_module
from dagexec._state.resources import _PATIENCE
from dagexec._state.runstate import RunState

MOD = 1_000_003


def value_of(task: int, args: tuple[int, ...]) -> int:
    return (task * 7 + sum(args)) % MOD


def random_plan(
    draw: st.DrawFn, *, priorities: bool, resources: bool
) -> tuple[Plan, dict[str, float]]:
    """A random DAG (edges from lower to higher index) as a plan, with options."""
    n = draw(st.integers(1, 30))
    capacity: dict[str, float] = {}
    if resources:
        capacity = {"gpu": draw(st.integers(1, 3)), "mem": float(draw(st.integers(2, 6)))}
    g = Graph()
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        need: dict[str, float] = {}
        if resources and draw(st.booleans()):
            need["gpu"] = draw(st.integers(1, int(capacity["gpu"])))
        if resources and draw(st.booleans()):
            need["mem"] = float(draw(st.integers(1, int(capacity["mem"]))))
        priority = draw(st.integers(-3, 3)) if priorities else 0
        g.add(i, lambda *a: None, deps=deps, priority=priority, resources=need)
    targets = draw(st.none() | st.lists(st.integers(0, n - 1), min_size=1, max_size=4))
    return plan_run(g._compile(), targets), capacity


def serial(plan: Plan, failing: set[int]) -> tuple[list[int | None], list[int]]:
    """Reference for on_error="continue": values and final states, one task at a time."""
    values: list[int | None] = [None] * len(plan)
    states = [DONE] * len(plan)
    for task in range(len(plan)):  # plan order is a topological order here
        deps = plan.deps[task]
        if any(states[d] != DONE for d in deps):
            states[task] = SKIPPED
        elif task in failing:
            states[task] = FAILED
        else:
            values[task] = value_of(task, tuple(values[d] for d in deps))  # type: ignore[misc]
    return values, states


def chain_of(plan: Plan, head: int) -> list[int]:
    members = [head]
    while plan.chain_next[members[-1]] >= 0:
        members.append(plan.chain_next[members[-1]])
    return members


# Over ruff's complexity limit on purpose: a random driver, one branch per engine
# call it may make.
def drive(  # noqa: C901
    plan: Plan,
    rng: random.Random,
    *,
    cap: int,
    on_error: str,
    failing: set[int],
    capacity: dict[str, float] | None = None,
    batched: bool = False,
) -> tuple[RunState, list[int]]:
    """Run the machine with items completed in a random order; check invariants.

    ``batched`` drives it as the scheduler does on its fast path: a random number
    of tasks at a time through ``hand_out``, and random batches of jobs that
    returned through ``returned``, besides the one-at-a-time calls."""
    state = RunState(plan, on_error=on_error, workers=1, capacity=capacity)
    running: list[tuple[list[int], tuple[int, ...]]] = []
    ran: list[int] = []
    holding: dict[str, float] = dict.fromkeys(capacity or {}, 0.0)
    while state.unfinished:
        if state.ready and state.in_flight < cap and (not running or rng.random() < 0.6):
            if batched and rng.random() < 0.7:
                tasks, arguments = state.hand_out(rng.randint(1, cap - state.in_flight), 0)
                assert state.in_flight <= cap
                for task, args in zip(tasks, arguments, strict=True):
                    for name, amount in plan.needs[task] if plan.needs else ():
                        holding[name] += amount
                    running.append((chain_of(plan, task), args))
                for name, amount in holding.items():
                    assert amount <= (capacity or {})[name], f"{name} over capacity"
                if tasks:
                    continue
            ready_before = [t for t in range(len(plan)) if state.state[t] == READY]
            task = state.take()
            if task >= 0:
                if plan.priority is not None and plan.needs is None:
                    best = max(plan.priority[t] for t in ready_before)
                    assert plan.priority[task] == best, "a lower priority went first"
                assert state.state[task] == READY
                args = state.dispatch(task, 0)
                assert state.in_flight <= cap
                for name, amount in plan.needs[task] if plan.needs else ():
                    holding[name] += amount
                for name, amount in holding.items():
                    assert amount <= (capacity or {})[name], f"{name} over capacity"
                running.append((chain_of(plan, task), args))
                continue
        assert running, "nothing in flight, yet tasks are unfinished"
        jobs = [i for i, (m, _) in enumerate(running) if len(m) == 1 and m[0] not in failing]
        if batched and jobs and rng.random() < 0.7:
            reports = []
            for i in sorted(rng.sample(jobs, rng.randint(1, len(jobs))), reverse=True):
                (member,), args = running.pop(i)
                assert all(state.state[d] == DONE for d in plan.deps[member])
                ran.append(member)
                reports.append((0, member, DONE, value_of(member, args), 0.0, 0.0))
                for name, amount in plan.needs[member] if plan.needs else ():
                    holding[name] -= amount
            state.ended(reports)  # each DONE, and off its worker
            continue
        members, args = running.pop(rng.randrange(len(running)))
        for k, member in enumerate(members):
            if k and state.stopping and rng.random() < 0.5:
                break  # the worker saw the stop flag between members
            assert all(state.state[d] == DONE for d in plan.deps[member])
            assert state.state[member] in (IN_FLIGHT, 7)  # in flight, or HELD while stopping
            ran.append(member)
            if member in failing:
                state.finish(member, FAILED, ValueError(member), 0)
                break
            value = value_of(member, args)
            state.finish(member, DONE, value if k == len(members) - 1 else None, 0)
            args = (value,)
        state.release(members[0])
        for name, amount in plan.needs[members[0]] if plan.needs else ():
            holding[name] -= amount
    assert state.in_flight == 0
    assert all(s in (DONE, FAILED, SKIPPED, CANCELLED) for s in state.state)
    return state, ran


@st.composite
def scenarios(draw: st.DrawFn, priorities: bool = False, resources: bool = False) -> tuple:
    plan, capacity = random_plan(draw, priorities=priorities, resources=resources)
    failing = set(draw(st.lists(st.integers(0, len(plan) - 1), max_size=2)))
    return plan, capacity, failing, draw(st.integers(1, 5)), draw(st.integers(0, 2**32))


def check_against_serial(state: RunState, ran: list[int], plan: Plan, failing: set[int]) -> None:
    assert len(ran) == len(set(ran)), "a task ran twice"
    values, states = serial(plan, failing)
    if state.on_error == "continue":
        assert list(state.state) == states
        assert sorted(ran) == [t for t in range(len(plan)) if states[t] in (DONE, FAILED)]
    else:
        for t in range(len(plan)):
            assert state.state[t] in (states[t], CANCELLED)
        assert (state.first_error is None) == (not any(s == FAILED for s in state.state))
    for t in plan.targets:
        if state.state[t] == DONE:
            assert state.values[t] == values[t]


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.sampled_from(["raise", "continue"]))
def test_random_completion_order_matches_serial(scenario: tuple, on_error: str) -> None:
    plan, _, failing, cap, seed = scenario
    state, ran = drive(plan, random.Random(seed), cap=cap, on_error=on_error, failing=failing)
    check_against_serial(state, ran, plan, failing)


@settings(max_examples=300, deadline=None)
@given(
    scenarios(priorities=True, resources=True),
    st.sampled_from(["raise", "continue"]),
)
def test_batches_in_and_out_match_serial(scenario: tuple, on_error: str) -> None:
    """hand_out and returned, the scheduler's batch calls, keep every invariant."""
    plan, capacity, failing, cap, seed = scenario
    state, ran = drive(
        plan,
        random.Random(seed),
        cap=cap,
        on_error=on_error,
        failing=failing,
        capacity=capacity,
        batched=True,
    )
    check_against_serial(state, ran, plan, failing)
    for name, peak in state.peak_resources(capacity).items():
        assert peak <= capacity[name]


@settings(max_examples=300, deadline=None)
@given(scenarios(priorities=True), st.sampled_from(["raise", "continue"]))
def test_priorities_go_first_among_ready_tasks(scenario: tuple, on_error: str) -> None:
    plan, _, failing, cap, seed = scenario
    state, ran = drive(plan, random.Random(seed), cap=cap, on_error=on_error, failing=failing)
    check_against_serial(state, ran, plan, failing)


@settings(max_examples=400, deadline=None)
@given(
    scenarios(priorities=True, resources=True),
    st.sampled_from(["raise", "continue"]),
    st.sampled_from([0, 1, 3, _PATIENCE]),
)
def test_resources_never_exceed_capacity(scenario: tuple, on_error: str, patience: int) -> None:
    plan, capacity, failing, cap, seed = scenario
    resource_module._PATIENCE = patience  # hypothesis forbids function-scoped fixtures
    try:
        _drive_and_check(plan, capacity, failing, cap, seed, on_error)
    finally:
        resource_module._PATIENCE = _PATIENCE


def _drive_and_check(
    plan: Plan, capacity: dict[str, float], failing: set[int], cap: int, seed: int, on_error: str
) -> None:
    state, ran = drive(
        plan, random.Random(seed), cap=cap, on_error=on_error, failing=failing, capacity=capacity
    )
    check_against_serial(state, ran, plan, failing)
    for name, peak in state.peak_resources(capacity).items():
        assert peak <= capacity[name]


def flat_plan(n: int, need: tuple[tuple[str, float], ...]) -> Plan:
    g = Graph()
    for i in range(n):
        g.add(i, lambda: None)
    plan = plan_run(g._compile(), None)
    return dataclasses.replace(plan, needs=(need,) * n)


def test_capacity_is_reached_exactly_when_enough_work_waits() -> None:
    plan = flat_plan(10, (("gpu", 1.0),))
    state = RunState(plan, capacity={"gpu": 3})
    taken = []
    while state.ready:
        task = state.take()
        if task < 0:
            break
        state.dispatch(task, 0)
        taken.append(task)
    assert len(taken) == 3
    assert state.peak_resources({"gpu": 3}) == {"gpu": 3}
    state.finish(taken[0], DONE, None, 0)
    state.release(taken[0])
    assert state.take() >= 0  # the freed unit goes to a waiting task at once


def test_a_big_task_is_not_starved_by_a_stream_of_small_ones() -> None:
    """big needs both gpus; two streams of small tasks (each needing one gpu, with a
    higher priority) would keep one gpu busy forever::

        big        s0 -> s2 -> s4 -> ...
                   s1 -> s3 -> s5 -> ...
    """
    g = Graph()
    g.add("big", lambda: None)
    for i in range(200):
        g.add(i, lambda *a: None, deps=[i - 2] if i >= 2 else [])
    plan = plan_run(g._compile(), None)
    needs = ((("gpu", 2.0),),) + ((("gpu", 1.0),),) * 200
    priority = (0,) + (1,) * 200
    chains = (-1,) * len(plan)
    plan = dataclasses.replace(plan, needs=needs, priority=priority, chain_next=chains)
    state = RunState(plan, capacity={"gpu": 2})
    running: list[int] = []
    dispatched = 0
    big = plan.index["big"]
    while big not in running:
        assert dispatched < 150, "big starved"
        while state.ready and (task := state.take()) >= 0:
            state.dispatch(task, 0)
            running.append(task)
            dispatched += 1
        if big in running:
            break
        done = running.pop(0)  # the oldest small one ends; the next of its stream is ready
        state.finish(done, DONE, None, 0)
        state.release(done)
    assert dispatched <= _PATIENCE + 4
    assert state.peak_resources({"gpu": 2}) == {"gpu": 2}


def test_an_empty_batch_of_returned_jobs_changes_nothing() -> None:
    plan = flat_plan(3, ())
    state = RunState(plan)
    before = (bytes(state.state), state.unfinished, state.in_flight)
    state.ended([])
    assert (bytes(state.state), state.unfinished, state.in_flight) == before


def test_users_one_return_makes_ready_go_out_first_user_first() -> None:
    """Depth-first order hands out the users a task made ready in task order, also
    when users in between still wait for another dependency (the plain path turns
    the ones it pushed around in place, rather than copying the users reversed)."""
    g = Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda: 2)
    for name, deps in [("u1", ["a"]), ("u2", ["a", "b"]), ("u3", ["a"]), ("u4", ["a"])]:
        g.add(name, lambda *args: sum(args), deps=deps)
    plan = plan_run(g._compile(), None)
    state = RunState(plan)
    a, b = plan.index["a"], plan.index["b"]
    roots, _ = state.hand_out(2, 0)
    assert roots == [a, b]
    state.ended([(0, a, DONE, 1, 0.0, 0.0)])
    taken, arguments = state.hand_out(10, 0)
    assert [plan.names[t] for t in taken] == ["u1", "u3", "u4"]
    assert arguments == [(1,), (1,), (1,)]
    state.ended([(0, b, DONE, 2, 0.0, 0.0)])
    taken, arguments = state.hand_out(10, 0)
    assert [plan.names[t] for t in taken] == ["u2"]
    assert arguments == [(1, 2)]


def test_a_target_keeps_its_value_after_its_users_took_it_and_others_do_not() -> None:
    """A value goes once its last user has it, unless it is a target: the caller
    counts as one more consumer of a target."""
    g = Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda: 2)
    g.add("c", lambda x, y: x + y, deps=["a", "b"])
    plan = plan_run(g._compile(), ["a", "c"])
    state = RunState(plan)
    a, b, c = plan.index["a"], plan.index["b"], plan.index["c"]
    state.hand_out(2, 0)
    state.ended([(0, a, DONE, 1, 0.0, 0.0), (0, b, DONE, 2, 0.0, 0.0)])
    assert state.hand_out(1, 0) == ([c], [(1, 2)])
    assert state.values[a] == 1  # a target: kept for the caller
    assert state.values[b] is None  # its one user has it
    state.ended([(0, c, DONE, 3, 0.0, 0.0)])
    assert (state.values[a], state.values[c], state.unfinished) == (1, 3, 0)
