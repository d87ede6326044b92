"""Property tests: random DAGs, random bounds, random targets, random failures.

DAGs are drawn with edges only from a lower index to a higher one, so they are
acyclic by construction; names are then shuffled so insertion order carries no
hint. For every draw: each task runs at most once and only after all its deps;
exactly the right tasks run; values equal a serial reference; concurrency never
exceeds the caps; every thread is joined at the end. Also with timeouts that
overrun, cancels at random moments, and checkpointed runs cancelled after a random
number of tasks ended and then resumed (stored tasks load, never run again).
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dagexec
from dagexec import TaskState
from dagexec.testing import ConcurrencyProbe, assert_within_bounds, no_leaked_threads


class Planned(Exception):
    """The failure a test asked a task to raise."""


@dataclass
class Case:
    deps: dict[Hashable, list[Hashable]]  # name -> deps, in insertion order
    order: list[Hashable]  # a topological order, for the serial reference
    targets: list[Hashable] | None
    failing: set[Hashable]
    workers: int
    queue_cap: int
    max_in_flight: int
    on_error: str


@st.composite
def cases(draw: st.DrawFn, max_tasks: int = 250) -> Case:
    n = draw(st.integers(1, max_tasks))
    names = draw(st.permutations(range(n)))
    names = [f"t{x}" if x % 3 else x for x in names]  # mixed str and int names
    deps: dict[Hashable, list[Hashable]] = {}
    for i in range(n):
        picks = draw(st.lists(st.integers(0, i - 1), max_size=min(i, 4), unique=True)) if i else []
        deps[names[i]] = [names[j] for j in picks]
    topo = list(names)
    insertion = draw(st.permutations(topo))  # any insertion order must work
    targets = draw(st.none() | st.lists(st.sampled_from(topo), min_size=1, max_size=5, unique=True))
    failing = set(draw(st.lists(st.sampled_from(topo), max_size=3)))
    return Case(
        deps={name: deps[name] for name in insertion},
        order=topo,
        targets=targets,
        failing=failing,
        workers=draw(st.integers(1, 4)),
        queue_cap=draw(st.integers(1, 4)),
        max_in_flight=draw(st.integers(1, 10)),
        on_error=draw(st.sampled_from(["raise", "continue"])),
    )


@dataclass
class Log:
    lock: threading.Lock = field(default_factory=threading.Lock)
    ran: list[Hashable] = field(default_factory=list)
    finished: set[Hashable] = field(default_factory=set)
    early: list[Hashable] = field(default_factory=list)  # started before a dep finished


def ancestors(deps: dict[Hashable, list[Hashable]], targets: list[Hashable]) -> set[Hashable]:
    seen = set(targets)
    stack = list(targets)
    while stack:
        for d in deps[stack.pop()]:
            if d not in seen:
                seen.add(d)
                stack.append(d)
    return seen


def build(case: Case, log: Log, probe: ConcurrencyProbe) -> dagexec.Graph:
    g = dagexec.Graph()
    for name, task_deps in case.deps.items():

        def task(
            *values: object, name: Hashable = name, task_deps: list[Hashable] = task_deps
        ) -> object:
            with probe, log.lock:
                log.ran.append(name)
                if not set(task_deps) <= log.finished:
                    log.early.append(name)
            if name in case.failing:
                raise Planned(name)
            value = (name, values)
            with log.lock:
                log.finished.add(name)
            return value

        g.add(name, task, deps=task_deps)
    return g


def serial_reference(case: Case) -> dict[Hashable, object]:
    values: dict[Hashable, object] = {}
    for name in case.order:
        values[name] = (name, tuple(values[d] for d in case.deps[name]))
    return values


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_dags_respect_order_targets_values_and_bounds(case: Case) -> None:
    log, probe = Log(), ConcurrencyProbe()
    g = build(case, log, probe)
    sinks = [n for n in case.order if not any(n in d for d in case.deps.values())]
    wanted = case.targets if case.targets is not None else sinks
    needed = ancestors(case.deps, wanted)
    failing_needed = case.failing & needed
    # Downstream of a failure (within the plan): can never run.
    doomed = {n for n in needed if ancestors(case.deps, [n]) & failing_needed} - failing_needed
    # A failing task with a failing ancestor never runs, so it cannot fail itself.
    doomed |= {f for f in failing_needed if (ancestors(case.deps, [f]) - {f}) & failing_needed}

    with (
        no_leaked_threads(),
        dagexec.Executor(
            case.workers, queue_cap=case.queue_cap, max_in_flight=case.max_in_flight
        ) as ex,
    ):
        result: dagexec.RunResult | None = None
        raised: BaseException | None = None
        try:
            result = ex.run(g, case.targets, on_error=case.on_error)  # type: ignore[arg-type]
        except Planned as exc:
            raised = exc
        cap = ex.effective_cap

    # Each task at most once, never before its deps, never outside the plan.
    assert len(log.ran) == len(set(log.ran))
    assert log.early == []
    assert set(log.ran) <= needed
    assert probe.peak <= min(case.workers, case.max_in_flight, cap)

    reference = serial_reference(case)
    if not failing_needed:
        assert raised is None and result is not None
        assert set(log.ran) == needed  # exactly the ancestors of the targets ran
        assert dict(result) == {t: reference[t] for t in wanted}
    elif case.on_error == "raise":
        assert result is None and raised is not None
        assert raised.args[0] in failing_needed
        assert f"dagexec: raised by task {raised.args[0]!r}" in raised.__notes__
        assert not set(log.ran) & doomed
    else:
        assert raised is None and result is not None
        expected_status = {
            n: TaskState.SKIPPED
            if n in doomed
            else TaskState.FAILED
            if n in failing_needed
            else TaskState.DONE
            for n in needed
        }
        assert dict(result.status) == expected_status
        assert set(result.errors) == {
            n for n, s in expected_status.items() if s is TaskState.FAILED
        }
        assert dict(result) == {
            t: reference[t] for t in wanted if expected_status[t] is TaskState.DONE
        }
        assert set(log.ran) == {n for n, s in expected_status.items() if s is not TaskState.SKIPPED}
    if result is not None:
        assert result.stats.peak_in_flight <= cap
        assert result.stats.tasks_run == len(log.ran)
        assert_within_bounds(result)


# Long enough that a trivial attempt never overruns it on a loaded machine (the
# worker's own clock decides), short enough for many examples.
OVERRUN_TIMEOUT = 0.3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(max_tasks=40), st.data())
def test_random_dags_with_timeouts_that_overrun(case: Case, data: st.DataObject) -> None:
    """Some tasks hang past their timeout (blocked on a gate opened only at the end):
    the caller still returns, a hung attempt's value is never used, a task whose
    retry answers is done with the serial reference's value, and the bounds hold.
    At most ``workers`` hang in one run, so every hung worker gets a new thread."""
    hanging = set(data.draw(st.lists(st.sampled_from(case.order), max_size=case.workers)))
    recovering = {n for n in hanging if data.draw(st.booleans())}
    case.failing -= hanging
    hard = hanging - recovering  # every attempt of these hangs: they fail with TaskTimeout
    gate = threading.Event()
    log = Log()

    g = dagexec.Graph()
    for name, task_deps in case.deps.items():

        def task(*values: object, name: Hashable = name) -> object:
            if name in hard or (name in recovering and dagexec.current_task().attempt == 1):
                gate.wait(60)
                return "late"
            with log.lock:
                log.ran.append(name)
            if name in case.failing:
                raise Planned(name)
            return (name, values)

        if name in hanging:
            retries = 1 if name in recovering else 0
            g.add(name, task, deps=task_deps, timeout=OVERRUN_TIMEOUT, retries=retries)
        else:
            g.add(name, task, deps=task_deps)

    sinks = [n for n in case.order if not any(n in d for d in case.deps.values())]
    wanted = case.targets if case.targets is not None else sinks
    needed = ancestors(case.deps, wanted)
    bad = (case.failing | hard) & needed
    doomed = {n for n in needed if ancestors(case.deps, [n]) & bad} - bad
    doomed |= {f for f in bad if (ancestors(case.deps, [f]) - {f}) & bad}

    result: dagexec.RunResult | None = None
    raised: BaseException | None = None
    with no_leaked_threads():
        try:
            with dagexec.Executor(
                case.workers, queue_cap=case.queue_cap, max_in_flight=case.max_in_flight
            ) as ex:
                try:
                    result = ex.run(g, case.targets, on_error=case.on_error)  # type: ignore[arg-type]
                except (Planned, dagexec.TaskTimeout) as exc:
                    raised = exc
                cap = ex.effective_cap
            # Both the run and shutdown(wait=True) returned with the gate still shut.
        finally:
            gate.set()  # the hung attempts return; no_leaked_threads waits for their threads

    reference = serial_reference(case)
    assert len(log.ran) == len(set(log.ran))
    assert set(log.ran) <= needed
    if not bad:
        assert raised is None and result is not None
        assert dict(result) == {t: reference[t] for t in wanted}
    elif case.on_error == "raise":
        assert result is None and raised is not None
    else:
        assert raised is None and result is not None
        expected = {
            n: TaskState.SKIPPED
            if n in doomed
            else TaskState.FAILED
            if n in bad
            else TaskState.DONE
            for n in needed
        }
        assert dict(result.status) == expected
        for n in hard & needed - doomed:
            assert isinstance(result.errors[n], dagexec.TaskTimeout)
        assert dict(result) == {t: reference[t] for t in wanted if expected[t] is TaskState.DONE}
        assert result.stats.abandoned == len((hanging & needed) - doomed)
    if result is not None:
        assert "late" not in list(result.values())
        assert result.stats.peak_in_flight <= cap
        assert_within_bounds(result)


# ------------------------------------------------ cancels at random moments (issue 19)
@dataclass
class CancelCase:
    deps: dict[Hashable, list[Hashable]]
    cleanup: set[Hashable]  # run_if="all_done"
    failing: set[Hashable]
    cancel_after: int  # cancel once this many tasks have started (or the run ended)
    workers: int
    queue_cap: int
    on_error: str


@st.composite
def cancel_cases(draw: st.DrawFn, max_tasks: int = 40) -> CancelCase:
    n = draw(st.integers(1, max_tasks))
    names: list[Hashable] = [f"t{i}" for i in range(n)]
    deps: dict[Hashable, list[Hashable]] = {}
    for i in range(n):
        picks = draw(st.lists(st.integers(0, i - 1), max_size=min(i, 3), unique=True)) if i else []
        deps[names[i]] = [names[j] for j in picks]
    return CancelCase(
        deps=deps,
        cleanup=set(draw(st.lists(st.sampled_from(names), max_size=3))),
        failing=set(draw(st.lists(st.sampled_from(names), max_size=2))),
        cancel_after=draw(st.integers(0, n)),
        workers=draw(st.integers(1, 3)),
        queue_cap=draw(st.integers(1, 4)),
        on_error=draw(st.sampled_from(["raise", "continue"])),
    )


@dataclass
class CancelLog:
    cond: threading.Condition = field(default_factory=threading.Condition)
    started: list[Hashable] = field(default_factory=list)
    active: set[Hashable] = field(default_factory=set)
    returned: set[Hashable] = field(default_factory=set)
    cancelled: bool = False  # set right after cancel() returned True
    late: list[Hashable] = field(default_factory=list)  # not cleanup, started after it
    # Cleanup tasks that started while an ancestor ran, or before one that ran returned.
    unsettled: list[tuple[Hashable, set[Hashable]]] = field(default_factory=list)
    ends: dict[Hashable, list[TaskState]] = field(default_factory=dict)


def build_cancel(case: CancelCase, log: CancelLog) -> dagexec.Graph:
    g = dagexec.Graph()
    for name, task_deps in case.deps.items():
        up = ancestors(case.deps, [name]) - {name}

        def task(*values: object, name: Hashable = name, up: set[Hashable] = up) -> object:
            with log.cond:
                log.started.append(name)
                log.active.add(name)
                if log.cancelled and name not in case.cleanup:
                    log.late.append(name)
                if name in case.cleanup:
                    # Every ancestor that ran has returned; none runs now.
                    ran = up & set(log.started)
                    if up & log.active or not ran <= log.returned:
                        log.unsettled.append((name, up & log.active))
                log.cond.notify_all()
            try:
                if name in case.failing:
                    raise Planned(name)
                return name
            finally:
                with log.cond:
                    log.active.discard(name)
                    log.returned.add(name)

        run_if = "all_done" if name in case.cleanup else "all_success"
        g.add(name, task, deps=task_deps, run_if=run_if)
    return g


class _Ends(dagexec.Callback):
    def __init__(self, log: CancelLog) -> None:
        self.log = log

    def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
        self.log.ends.setdefault(name, []).append(state)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cancel_cases())
def test_random_cancels_end_every_task_start_nothing_after_and_run_cleanups_last(
    case: CancelCase,
) -> None:
    log = CancelLog()
    g = build_cancel(case, log)
    with (
        no_leaked_threads(),
        dagexec.Executor(case.workers, queue_cap=case.queue_cap) as ex,
    ):
        future = ex.submit(g, on_error=case.on_error, callbacks=[_Ends(log)])

        def wake(_: object) -> None:
            with log.cond:
                log.cond.notify_all()

        future.add_done_callback(wake)
        with log.cond:
            assert log.cond.wait_for(
                lambda: len(log.started) >= case.cancel_after or future.done(), 30
            )
        with log.cond:  # no task starts between cancel() returning and the flag
            if future.cancel():
                log.cancelled = True
        # Runs on one executor go one at a time: once the next one is over, the
        # cancelled run (its cleanup tasks and running tasks too) is over as well.
        nxt = dagexec.Graph()
        nxt.add("next", lambda: "next")
        assert ex.submit(nxt).result(30)["next"] == "next"

    if not log.ends:  # cancelled before it began: it never does
        assert log.cancelled and log.started == []
        return
    final = {TaskState.DONE, TaskState.FAILED, TaskState.SKIPPED, TaskState.CANCELLED}
    # Every task ended once, in a final state.
    assert set(log.ends) == set(case.deps)
    assert all(len(states) == 1 and states[0] in final for states in log.ends.values())
    # Each task started at most once.
    assert len(log.started) == len(set(log.started))
    # Nothing but cleanup tasks started after cancel() returned, beyond one per
    # worker already past its stop check.
    assert len(log.late) <= case.workers, log.late
    # Cleanup tasks all ran (a cancel or a failure never cancels them), and each
    # only once no ancestor was running any more.
    for name in case.cleanup:
        assert name in log.started, (name, log.ends[name])
        assert log.ends[name][0] in (TaskState.DONE, TaskState.FAILED)
    assert log.unsettled == []


# -- stopped at a random moment, then resumed from the checkpoint ------------------------


PROBE_RESUMES: list[tuple[int, int, int, int]] | None = None  # set by hand to see what ran


@dataclass
class ResumeLog:
    cond: threading.Condition = field(default_factory=threading.Condition)
    calls: list[Hashable] = field(default_factory=list)  # every call of a task's function
    done: list[Hashable] = field(default_factory=list)  # ended DONE, as the scheduler heard
    # Ended DONE before cancel() was called: their value was stored before any stop.
    done_before_cancel: set[Hashable] = field(default_factory=set)


class _DoneEnds(dagexec.Callback):
    def __init__(self, log: ResumeLog) -> None:
        self.log = log

    def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
        if state is TaskState.DONE:
            with self.log.cond:
                self.log.done.append(name)
                self.log.cond.notify_all()


def build_resumable(case: Case, log: ResumeLog, fan: int, joined: Hashable | None) -> dagexec.Graph:
    """The case's DAG, plus (when ``joined`` is a task) the nightly shape beside it:
    ``src`` (checkpoint=False) lists ``fan`` elements, ``items`` maps over them and
    ``agg`` joins the items with ``joined``: tasks decided during the run."""
    g = dagexec.Graph()

    def called(name: Hashable) -> bool:
        with log.cond:
            log.calls.append(name)
        return False

    for name, task_deps in case.deps.items():

        def task(*values: object, name: Hashable = name) -> object:
            return called(name) or (name, values)

        g.add(name, task, deps=task_deps)
    if joined is not None:
        g.add("src", lambda: called("src") or list(range(fan)), checkpoint=False)
        g.map("items", lambda x: called(("items", x)) or x * 2, over="src")
        g.add("agg", lambda xs, v: called("agg") or (tuple(xs), v), deps=["items", joined])
    return g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(max_tasks=30), st.data())
def test_random_dags_stopped_at_a_random_moment_then_resumed(
    case: Case, data: st.DataObject
) -> None:
    joined = data.draw(st.none() | st.sampled_from(list(case.deps)), label="agg joins")
    fan = data.draw(st.integers(0, 6), label="map items")
    extra = 0 if joined is None else 3 + fan
    stop_after = data.draw(st.integers(0, len(case.deps) + extra), label="cancel after k ended")
    log = ResumeLog()
    g = build_resumable(case, log, fan, joined)
    reference: dict[Hashable, object] = dict(serial_reference(case))
    targets = case.targets
    if joined is not None:
        reference["agg"] = (tuple(x * 2 for x in range(fan)), reference[joined])
        targets = None if targets is None else [*targets, "agg"]

    with (
        tempfile.TemporaryDirectory() as tmp,
        no_leaked_threads(),
        dagexec.Executor(
            case.workers, queue_cap=case.queue_cap, max_in_flight=case.max_in_flight
        ) as ex,
    ):
        path = Path(tmp) / "c.sqlite"
        future = ex.submit(g, targets, checkpoint=path, callbacks=[_DoneEnds(log)])

        def wake(_: object) -> None:
            with log.cond:
                log.cond.notify_all()

        future.add_done_callback(wake)
        with log.cond:  # gated on the ends the scheduler reports: no sleep
            assert log.cond.wait_for(lambda: len(log.done) >= stop_after or future.done(), 30)
            log.done_before_cancel = set(log.done)
        future.cancel()
        # Runs on one executor go one at a time: once this one is over, so is the
        # cancelled run, tasks still running then included.
        nxt = dagexec.Graph()
        nxt.add("next", lambda: "next")
        assert ex.submit(nxt).result(30)["next"] == "next"
        with log.cond:
            log.calls.clear()
        again = ex.submit(g, targets, checkpoint=path, callbacks=[_DoneEnds(log)]).result(30)

    # The resumed run's values are the serial reference's.
    used = {d for deps in case.deps.values() for d in deps} | {joined}
    sinks = [n for n in case.deps if n not in used] + ([] if joined is None else ["agg"])
    expected = targets if targets is not None else sinks
    assert {n: again[n] for n in expected} == {n: reference[n] for n in expected}
    # A task (or map item) that ended DONE before the stop was stored: loaded (or
    # spared), never run again. src is checkpoint=False: it runs every time.
    rerun = set(log.calls)
    again_ran = rerun & log.done_before_cancel - {"src"}
    assert not again_ran, (again_ran, stop_after)
    # Each function ran at most once in the resumed run, and it counts the loaded
    # ones as loaded (static or decided during the run), the rest as run. A map's
    # own node is assembled by the scheduler: neither.
    assert len(log.calls) == len(rerun)
    assert again.stats.tasks_run == len(rerun), again.stats
    loaded = [
        n
        for n, state in again.status.items()
        if state is TaskState.DONE and n not in rerun and n != "items"
    ]
    assert again.stats.tasks_loaded == len(loaded), (again.stats, loaded)
    if PROBE_RESUMES is not None:
        dynamic = sum(isinstance(n, tuple) or n == "agg" for n in loaded)
        PROBE_RESUMES.append((len(log.done_before_cancel), len(loaded), len(rerun), dynamic))
    assert_within_bounds(again)
