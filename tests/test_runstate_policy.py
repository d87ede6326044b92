"""The run state machine with per-task policy: retries on a fake clock, cleanup tasks.

Driven like tests/test_runstate.py (take, dispatch, finish, release), with the
driver's clock in the test's hands: time moves only when the test moves it, to
the next retry that is due, so every backoff wait is checked exactly.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagexec import MISSING, Graph
from dagexec._core.plan import Plan, plan_run
from dagexec._core.policy import backoff
from dagexec._core.result import CANCELLED, DONE, FAILED, IN_FLIGHT, SKIPPED, WAITING
from dagexec._state.runstate import RunState

MOD = 1_000_003


def value_of(task: int, args: tuple[Any, ...]) -> int:
    return (task * 7 + sum(a for a in args if isinstance(a, int))) % MOD


@st.composite
def policy_scenarios(draw: st.DrawFn) -> tuple[Plan, dict[int, int], dict[str, float], int, int]:
    """A random DAG whose tasks have random retries, delays, cleanups and resources;
    ``fails[t]`` is how many attempts of ``t`` fail before one succeeds."""
    n = draw(st.integers(1, 25))
    g = Graph()
    fails: dict[int, int] = {}
    capacity = {"gpu": float(draw(st.integers(1, 3)))}
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        retries = draw(st.integers(0, 3))
        delay = draw(st.sampled_from([0.0, 0.5, 2.0]))
        cleanup = draw(st.integers(0, 5)) == 0
        need = {"gpu": 1} if draw(st.booleans()) else {}
        fails[i] = draw(st.integers(0, 4)) if draw(st.booleans()) else 0
        g.add(
            i,
            lambda *a: None,
            deps=deps,
            retries=retries,
            retry_delay=delay,
            run_if="all_done" if cleanup else "all_success",
            resources=need,
        )
    # drive() hands tasks out one at a time, each ended by finish and release: no
    # chains (a chain goes out whole and ends through chain_ended; releasing its
    # head alone cancels the rest, which the serial reference does not expect).
    plan = dataclasses.replace(plan_run(g._compile(), None), chain_next=(-1,) * n)
    return plan, fails, capacity, draw(st.integers(1, 4)), draw(st.integers(0, 2**32))


def drive(
    plan: Plan,
    fails: dict[int, int],
    rng: random.Random,
    *,
    cap: int,
    on_error: str,
    capacity: dict[str, float],
) -> tuple[RunState, dict[int, int], dict[int, tuple[Any, ...]]]:
    """Run the machine on a fake clock; check the retry invariants as it goes."""
    state = RunState(plan, on_error=on_error, workers=1, capacity=capacity)
    state.rand = rng.random
    policy = plan.policy or (None,) * len(plan)  # None: no task drew a policy
    attempts: dict[int, int] = {}
    failed_at: dict[int, float] = {}  # task -> when its last attempt failed
    running: list[tuple[int, tuple[Any, ...]]] = []
    cleanup_args: dict[int, tuple[Any, ...]] = {}
    now = 0.0
    while state.unfinished:
        if state.ready and state.in_flight < cap and (not running or rng.random() < 0.6):
            task = state.take()
            if task >= 0:
                args = state.dispatch(task, 0)
                assert state.in_flight <= cap
                attempts[task] = attempts.get(task, 0) + 1
                if attempts[task] > 1:  # a retry: not before its backoff
                    p = policy[task]
                    assert p is not None
                    least = p.retry_delay * 2.0 ** (attempts[task] - 2)
                    assert now - failed_at[task] >= least - 1e-9, "retried too early"
                running.append((task, args))
                continue
        if not running:
            # Nothing out: only retries can be waiting. Move the clock to the next.
            assert state.timers, "nothing in flight or waiting, yet tasks are unfinished"
            now = state.timers[0][0]
            state.wake(now)
            continue
        task, args = running.pop(rng.randrange(len(running)))
        assert state.state[task] == IN_FLIGHT
        p = policy[task]
        if p is not None and p.cleanup:
            cleanup_args[task] = args
        if attempts[task] <= fails[task]:
            state.now = now
            state.finish(task, FAILED, ValueError(task), 0)
            failed_at[task] = now
            before = state.in_flight
            state.release(task)
            assert state.in_flight == before - 1  # a waiting retry holds no slot
            if state.state[task] == WAITING and plan.needs is not None:
                assert state.resources.free[0] == capacity["gpu"] - sum(
                    1 for t, _ in running if plan.needs and plan.needs[t]
                ), "a task waiting for its retry holds a resource"
        else:
            state.finish(task, DONE, value_of(task, args), 0)
            state.release(task)
        if rng.random() < 0.3 and state.timers:  # time passes while others run
            now += rng.choice([0.1, 1.0, 5.0])
            state.wake(now)
    assert state.in_flight == 0
    assert all(s in (DONE, FAILED, SKIPPED, CANCELLED) for s in state.state)
    return state, attempts, cleanup_args


def serial(plan: Plan, fails: dict[int, int]) -> tuple[list[int], int]:
    """Reference for on_error="continue": final states and the retries made."""
    policy = plan.policy or (None,) * len(plan)  # None: no task drew a policy
    states = [DONE] * len(plan)
    retries = 0
    for task in range(len(plan)):
        p = policy[task]
        retries_allowed = p.retries if p is not None else 0
        cleanup = p is not None and p.cleanup
        if not cleanup and any(states[d] != DONE for d in plan.deps[task]):
            states[task] = SKIPPED
            continue
        retries += min(fails[task], retries_allowed)
        states[task] = FAILED if fails[task] > retries_allowed else DONE
    return states, retries


@settings(max_examples=300, deadline=None)
@given(policy_scenarios(), st.sampled_from(["raise", "continue"]))
def test_random_retries_and_cleanups_match_serial(scenario: tuple, on_error: str) -> None:
    plan, fails, capacity, cap, seed = scenario
    state, attempts, cleanup_args = drive(
        plan, fails, random.Random(seed), cap=cap, on_error=on_error, capacity=capacity
    )
    states, retries = serial(plan, fails)
    policy = plan.policy or (None,) * len(plan)  # None: no task drew a policy
    if on_error == "continue":
        assert list(state.state) == states
        assert state.retries == retries
        assert sum(attempts.values()) == retries + sum(1 for s in states if s in (DONE, FAILED))
    else:
        for t in range(len(plan)):
            p = policy[t]
            if p is not None and p.cleanup:  # cleanups always run, even when stopping
                assert state.state[t] in (DONE, FAILED), (t, state.state[t])
            elif fails[t] and state.stopping:  # no retry once the run stops
                assert state.state[t] in (states[t], CANCELLED, FAILED)
            else:
                assert state.state[t] in (states[t], CANCELLED)
    for t, args in cleanup_args.items():  # what a cleanup receives for each dependency
        for d, a in zip(plan.deps[t], args, strict=True):
            if state.state[d] == FAILED:
                assert isinstance(a, ValueError)
            elif state.state[d] == DONE:
                assert isinstance(a, int)
            else:
                assert a is MISSING
    assert state.peak_resources(capacity)["gpu"] <= capacity["gpu"]


def test_backoff_doubles_with_bounded_jitter() -> None:
    assert backoff(0.0, 1) == 0.0
    assert backoff(1.0, 1, lambda: 0.0) == 1.0
    assert backoff(1.0, 3, lambda: 0.0) == 4.0
    assert backoff(1.0, 3, lambda: 0.999) == pytest.approx(4.0 * 1.24975)
    assert backoff(1.0, 10_000, lambda: 0.0) == 2.0**40  # no overflow


def test_a_retry_waits_for_its_timer_and_holds_no_slot() -> None:
    g = Graph()
    g.add("a", lambda: 1, retries=2, retry_delay=3.0, resources={"gpu": 1})
    state = RunState(plan_run(g._compile(), None), capacity={"gpu": 1})
    state.rand = lambda: 0.0  # no jitter: waits of exactly 3 s, then 6 s
    for attempt, due in ((1, 3.0), (2, 3.0 + 6.0)):
        task = state.take()
        state.dispatch(task, 0)
        state.finish(task, FAILED, OSError(attempt), 0)
        state.release(task)
        assert (state.in_flight, state.resources.free, state.state[task]) == (0, [1.0], WAITING)
        assert not state.ready
        assert state.wake(due - 0.001) == due  # not yet
        assert not state.ready
        state.now = due
        assert state.wake(due) is None
        assert state.ready
    task = state.take()
    state.dispatch(task, 0)
    state.finish(task, DONE, 1, 0)
    state.release(task)
    assert (state.state[task], state.retries, state.values[task]) == (DONE, 2, 1)


def test_only_retry_on_types_and_never_base_exceptions() -> None:
    g = Graph()
    g.add("io", lambda: 1, retries=5, retry_on=OSError)
    g.add("stop", lambda: 1, retries=5)
    state = RunState(plan_run(g._compile(), None), on_error="continue")
    while state.ready:
        task = state.take()
        state.dispatch(task, 0)
        exc: BaseException = ValueError() if task == 0 else KeyboardInterrupt()
        state.finish(task, FAILED, exc, 0)
        state.release(task)
    assert state.retries == 0
    assert list(state.state) == [FAILED, FAILED]


def test_a_stop_cancels_a_task_waiting_for_its_retry() -> None:
    g = Graph()
    g.add("a", lambda: 1, retries=1, retry_delay=10.0)
    g.add("b", lambda: 1)
    state = RunState(plan_run(g._compile(), None))
    a, b = state.take(), state.take()
    state.dispatch(a, 0)
    state.dispatch(b, 0)
    state.finish(a, FAILED, OSError(), 0)
    state.release(a)
    state.finish(b, FAILED, ValueError("b"), 0)
    state.release(b)
    assert state.state[a] == CANCELLED
    assert state.timers == []  # nothing left to wait for
    assert state.unfinished == 0


# ------------------------------------------------------------ the cleanup gate
def test_the_gate_holds_a_cleanup_until_the_attempt_of_a_finished_dependency_returns() -> None:
    # 'a' timed out: the machine ended it FAILED while its item is still out.
    g = Graph()
    g.add("a", lambda: 1, timeout=1.0)
    g.add("clean", lambda a: None, deps=["a"], run_if="all_done")
    state = RunState(plan_run(g._compile(), None), on_error="continue")
    a = state.take()
    state.dispatch(a, 0)
    state.finish(a, FAILED, TimeoutError("a"), 0)  # its thread runs on
    assert not state.ready and state.state[1] == WAITING
    state.release(a)  # its function returned
    assert state.take() == 1


def test_the_gate_holds_a_cleanup_for_an_ancestor_beside_a_failure() -> None:
    g = Graph()
    g.add("x", lambda: 1)
    g.add("slow", lambda: 1)
    g.add("join", lambda x, s: 1, deps=["x", "slow"])
    g.add("clean", lambda j: None, deps=["join"], run_if="all_done")
    state = RunState(plan_run(g._compile(), None), on_error="continue", workers=2)
    first, second = state.take(), state.take()
    state.dispatch(first, 0)
    state.dispatch(second, 1)
    x, slow = sorted((first, second))
    state.finish(x, FAILED, ValueError("x"), 0)
    state.release(x)
    assert state.state[2] == SKIPPED  # 'join': the cleanup's only dependency ended
    assert not state.ready  # but 'slow', an ancestor, still runs
    state.finish(slow, DONE, 1, 1)
    assert not state.ready  # ended, but its item is not back yet
    state.release(slow)
    assert state.take() == 3


def test_the_gate_lets_a_held_cleanup_go_when_its_own_timeout_passes() -> None:
    g = Graph()
    g.add("a", lambda: 1, timeout=1.0)
    g.add("clean", lambda a: None, deps=["a"], run_if="all_done", timeout=5.0)
    state = RunState(plan_run(g._compile(), None), on_error="continue")
    a = state.take()
    state.dispatch(a, 0)
    state.now = 10.0
    state.finish(a, FAILED, TimeoutError("a"), 0)
    assert state.gate is not None and state.gate.next_deadline() == 15.0
    state.wake(14.9)
    assert not state.ready
    state.wake(15.0)
    assert state.take() == 1  # runs although 'a' never returned


def test_a_hard_stop_cancels_a_held_cleanup() -> None:
    g = Graph()
    g.add("a", lambda: 1)
    g.add("clean", lambda a: None, deps=["a"], run_if="all_done")
    state = RunState(plan_run(g._compile(), None))
    a = state.take()
    state.dispatch(a, 0)
    state.stop()  # soft: the cleanup waits for 'a'
    assert state.state[1] == WAITING and state.cleanup_pending()
    state.stop(hard=True)
    assert state.state[1] == CANCELLED and not state.cleanup_pending()
    state.finish(a, DONE, 1, 0)
    state.release(a)
    assert not state.ready and state.unfinished == 0
