"""How tasks end: the one place a task reaches a final state, and what follows.

Part of the run state machine, and as pure. These are functions of the run,
bound in :class:`~dagexec._state.runstate.RunState`'s class body as its methods
(``RunState.ended`` is :func:`ended`): a method is a function of its instance,
so the split adds no call on the per-task path (docs/performance.md, "The speed gate"), and the
rules stay in one place each (docs/design.md, "One place per rule"):

* :func:`ended` is the only writer of DONE, FAILED, SKIPPED and CANCELLED;
  :func:`finish` is it for one task, :func:`chain_ended` hands a chain's members
  to it;
* :func:`_returned` is what follows a DONE outside a plain run, and
  :func:`_ended_without_value` what follows any other end;
* :func:`_ended` counts an end for the cleanup tasks that wait on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._core.policy import MISSING
from .._core.result import DONE, FAILED, HELD, IN_FLIGHT, READY, SKIPPED, WAITING
from .._core.safe import add_note, str_for_message, task_for_message
from .events import END, R_TASK, R_WORKER, RELEASE, RETURNED, ChainEnd, Event, Report
from .retries import retry

if TYPE_CHECKING:
    from .runstate import RunState

__all__ = ["chain_ended", "ended", "finish", "skip_downstream"]


# Over ruff's complexity limit on purpose: the per-task hot path: a split adds
# a call per task (docs/performance.md, "The speed gate").
def ended(  # noqa: C901
    run: RunState,
    reports: list[Report],
    outcome: int = DONE,
    release: bool = True,
    passed_on: Sequence[int] = (),
) -> None:
    """Tasks ended as ``outcome``: the one place a task ends (the only writer of
    a final state). ``reports`` are end records ``(worker, task, kind, payload,
    started, ended)`` in order, as workers send them (``kind`` is the sender's
    and not read here); ``payload`` is the value (DONE) or the exception
    (FAILED). A DONE task keeps its value if anyone needs it and brings its
    dependents one dependency nearer to ready; with ``release``, each was a job
    (one task, not a chain) and is off its worker as well.

    DONE comes in batches, a call per batch and not per task: on graphs of
    tiny tasks the calls were a good part of the scheduler's time. Any other
    outcome comes one task at a time (:meth:`finish`); with a retry policy a
    failed attempt may instead send the task back to wait for its retry.

    ``passed_on``: in a plain run, the members of a chain before the one
    reported, which returned on the reporting worker and passed their values
    on there: DONE, with no value to keep and nobody to make ready (see
    :meth:`chain_ended`).
    """
    state = run.state
    if outcome != DONE:
        ((worker, task, _, payload, started, ended_at),) = reports
        if run.policy is not None and run.policy[task] is not None:
            if outcome == FAILED and retry(run, task, payload, worker, started, ended_at):
                return
            run.kept_args.pop(task, None)
        state[task] = outcome
        run.unfinished -= 1
        _ended_without_value(run, task, outcome, payload, worker, started, ended_at)
        return
    if run.plain and not run.stopping:
        # A plain run (see ``plain``) that is not stopping: the steps of
        # _returned() without the tests such a run always passes (no policy,
        # resources, maps or events; nothing to clean up after), inline.
        ran_on, values, consumers = run.ran_on, run.values, run.consumers
        chain_next, dependents, remaining = run.chain_next, run.dependents, run.remaining
        ready, depth_first = run.ready, run.depth_first
        push = ready.append
        if passed_on:
            for member in passed_on:
                state[member] = DONE
            passed = len(passed_on)  # (each len() is a call the speed gate counts)
            ran_on[reports[0][R_WORKER]] += passed
            run.unfinished -= passed
        for worker, task, _, value, _, _ in reports:
            state[task] = DONE
            if worker >= 0:
                ran_on[worker] += 1
            if consumers[task]:
                values[task] = value
            follower = chain_next[task]
            if follower >= 0:  # a chain member: the next one, on its worker, runs now
                state[follower] = IN_FLIGHT
                continue
            pushed = 0
            for d in dependents[task]:
                left = remaining[d] - 1
                remaining[d] = left
                if not left and state[d] == WAITING:
                    state[d] = READY
                    push(d)
                    pushed += 1
            if pushed > 1 and depth_first:
                # Last-first, as push_order() says, so that depth-first order
                # takes the first one first: the few just pushed are turned
                # around in place. Most tasks make at most one user ready, so
                # this beats reversing every task's users up front (a new tuple
                # each: ~5% of the scheduler's samples on the million-task graph).
                ready[-pushed:] = ready[: -pushed - 1 : -1]
        count = len(reports)
        run.unfinished -= count
        if release:
            run.in_flight -= count
        return
    assert not passed_on, "passed_on is for a plain run that is not stopping"
    for report in reports:
        state[report[R_TASK]] = DONE
    _returned(run, reports, release)


# Over ruff's complexity limit on purpose: the per-task hot path: a split adds
# a call per task (docs/performance.md, "The speed gate").
def _returned(run: RunState, reports: list[Report], release: bool) -> None:  # noqa: C901
    """What follows for tasks that :meth:`ended` DONE (their state is written),
    in a run that is not plain or is stopping."""
    policy, kept, state, ran_on = run.policy, run.kept_args, run.state, run.ran_on
    values, consumers, events = run.values, run.consumers, run.events
    chain_next, dependents, remaining = run.chain_next, run.dependents, run.remaining
    needs, became_ready, depth_first = run.needs, run.became_ready, run.depth_first
    resources = run.resources
    for worker, task, _, value, started, ended in reports:
        if policy is not None and policy[task] is not None:
            kept.pop(task, None)
        if worker >= 0:  # not a map assembled by the scheduler
            ran_on[worker] += 1
        if consumers[task]:
            values[task] = value
        if events is not None:
            events.append(Event(END, task, worker, DONE, started, ended))
        follower = chain_next[task]  # -1 for a job (a chain goes out whole)
        if run.stopping:
            if run.cleanup is not None:
                _ended(run, task, values[task])
        elif follower >= 0:  # a chain member: the next one, on its worker, runs now
            if state[follower] == HELD:  # not DONE in this same batch
                state[follower] = IN_FLIGHT
        else:
            users = dependents[task]
            if depth_first and len(users) > 1:
                users = run.push_order(users)
            for d in users:
                left = remaining[d] - 1
                remaining[d] = left
                if not left and state[d] == WAITING:
                    became_ready(d)
        if release and needs is not None and needs[task]:
            assert resources is not None
            resources.unhold(needs[task])
        if release and run.gate is not None:
            run.gate.attempt_returned(task)
    count = len(reports)
    run.unfinished -= count
    if release:
        run.in_flight -= count
        if run.tell_release:
            assert events is not None
            number = run.attempt.get
            events.extend(
                [
                    Event(RELEASE, r[R_TASK], -1, RETURNED, 0.0, 0.0, number(r[R_TASK], 1))
                    for r in reports
                ]
            )
    if run.gate is not None:
        run.gate.recheck()


def finish(
    run: RunState,
    task: int,
    outcome: int,
    payload: Any = None,
    worker: int = -1,
    started: float = 0.0,
    ended: float = 0.0,
) -> None:
    """``task`` ended as ``outcome`` (DONE, FAILED, SKIPPED or CANCELLED):
    :meth:`ended` for one task. ``payload`` is the value (DONE) or the exception
    (FAILED); ``worker`` and the stamps are the worker's, for tasks that ran."""
    run.ended([(worker, task, outcome, payload, started, ended)], outcome, False)


def _ended_without_value(
    run: RunState, task: int, outcome: int, payload: Any, worker: int, started: float, ended: float
) -> None:
    """What follows for a task that :meth:`ended` FAILED, SKIPPED or CANCELLED."""
    if outcome == FAILED:
        if worker >= 0:
            run.ran_on[worker] += 1
        _failed(run, task, payload, worker, started, ended)
    else:
        # A skipped task will never consume its dependencies' values (an
        # expanded map let go of them when it expanded: see Fanout.skipped).
        if outcome == SKIPPED and (run.fanout is None or not run.fanout.skipped(task)):
            run.let_go(run.deps[task])
        if run.events is not None:
            run.events.append(Event(END, task, -1, outcome))
        if run.cleanup is not None:
            _ended(run, task, MISSING)
    if run.gate is not None:
        run.gate.recheck()


def _ended(run: RunState, task: int, value: Any) -> None:
    """``task`` ended without readying its dependents (it failed, was skipped or
    cancelled, or the run is stopping): cleanup tasks count it as ended anyway.

    ``value`` is what they receive for it: its value, its exception, or MISSING.
    """
    cleanup, remaining, state = run.cleanup, run.remaining, run.state
    assert cleanup is not None
    wanted = False
    # A copy: a cleanup map that expands here takes itself out of this list.
    for d in tuple(run.dependents[task]):
        if d < len(cleanup) and cleanup[d] and state[d] == WAITING:
            wanted = True
            left = remaining[d] - 1
            remaining[d] = left
            if not left and not run.hard:
                run.became_ready(d)  # a map (run_if="all_done") expands
    if wanted and run.consumers[task]:
        run.values[task] = value


def _failed(
    run: RunState, task: int, exc: BaseException, worker: int, started: float, ended: float
) -> None:
    # The task's own exception must reach the caller even when its name or
    # the exception itself is hostile (a raising __repr__ or __str__, odd
    # __notes__): nothing here may raise.
    name = task_for_message(run.names[task])
    add_note(exc, f"dagexec: raised by task {name}")
    run.errors[task] = exc
    if run.log is not None:
        run.log("task %s failed: %s: %s", name, type(exc).__name__, str_for_message(exc))
    # Its end is reported before the ends its failure causes (skips, cancels).
    if run.events is not None:
        run.events.append(Event(END, task, worker, FAILED, started, ended))
    if run.cleanup is not None:
        _ended(run, task, exc)
    if run.on_error == "raise" or not isinstance(exc, Exception):
        run.fail(exc)
    else:
        skip_downstream(run, task)


def skip_downstream(run: RunState, failed: int) -> None:
    state, dependents = run.state, run.dependents
    stack = list(dependents[failed])
    while stack:
        d = stack.pop()
        if state[d] != WAITING and state[d] != HELD:
            continue
        if run.cleanup is not None and d < len(run.cleanup) and run.cleanup[d]:
            continue  # it runs anyway, once all its dependencies ended
        finish(run, d, SKIPPED)
        stack.extend(dependents[d])


def chain_ended(run: RunState, members: tuple[int, ...], end: ChainEnd, worker: int) -> None:
    """A chain is off its worker: finish each member that ran and was not
    reported yet (a timed chain reports members as they end), then release it."""
    done, ok, outcome, times = end
    last = len(members) - 1
    if done > last and times is None and run.plain and not run.stopping:
        # The usual chain in a plain run: every member returned, and reports
        # only now (untimed). A member before the last passed its value on, on
        # the worker, so it keeps none and readies nobody; no resources to
        # free, no member left to cancel: ended() in one call, released (the
        # chain is one item in flight). Measured: without this path the chain
        # workload makes 1.9x the scheduler calls per task.
        last_report = [(worker, members[last], DONE, outcome, 0.0, 0.0)]
        ended(run, last_report, DONE, True, members[:last])
        return
    returned = []  # one batch for the members that returned, as for jobs
    for k in range(done):
        member = members[k]
        if run.state[member] == DONE:  # reported as it ended
            continue
        t0, t1 = (times[2 * k], times[2 * k + 1]) if times is not None else (0.0, 0.0)
        returned.append((worker, member, DONE, outcome if k == last else None, t0, t1))
    if returned:
        ended(run, returned, DONE, release=False)
    if not ok:
        t0, t1 = (times[2 * done], times[2 * done + 1]) if times is not None else (0.0, 0.0)
        finish(run, members[done], FAILED, outcome, worker, t0, t1)
    del outcome
    run.release(members[0])
