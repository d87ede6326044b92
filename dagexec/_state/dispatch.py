"""Handing tasks out and taking their items back: the run's in-flight side.

Part of the run state machine, and as pure; functions of the run, bound in
:class:`~dagexec._state.runstate.RunState`'s class body as its methods
(``RunState.hand_out`` *is* :func:`hand_out`), so the split adds no call on the
per-task path. :func:`dispatch_all` marks tasks handed out (a chain's members
HELD) and returns their arguments, letting go inline of values nobody else
needs (the rule is ``RunState.let_go``'s); :func:`release` frees an item's
in-flight slot and resources when it is off its worker, whatever its end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core.result import CANCELLED, HELD, IN_FLIGHT
from .events import DISPATCH, LET_GO, RELEASE, RETURNED, TAKEN_BACK, Event

if TYPE_CHECKING:
    from .runstate import RunState

__all__ = [
    "dispatch",
    "dispatch_all",
    "hand_out",
    "let_go_returned",
    "put_back",
    "release",
    "take_back",
]


def dispatch(run: RunState, task: int, worker: int) -> tuple[Any, ...]:
    """Mark ``task`` (and its chain, if it heads one) handed out; return its arguments.

    Each dependency now has one consumer fewer; a value nobody else needs is
    dropped here, so only the returned tuple holds it.
    """
    return dispatch_all(run, [task], worker)[0]


def hand_out(
    run: RunState, n: int, worker: int, idle: bool = True
) -> tuple[list[int], list[tuple[Any, ...]]]:
    """Take up to ``n`` tasks for ``worker`` and dispatch them: the tasks, in the
    order taken, and their arguments. Fewer than ``n`` only if the rest of the
    ready tasks wait for resources (or fewer are ready).

    Resources are held while tasks run, not while they wait in an inbox: a
    task that needs any goes out only first in the batch of an ``idle`` worker
    (nothing queued or running on it), so it starts at once; the ones behind
    it hold nothing. A busy worker gets tasks only until the next to go needs
    a resource, which keeps the run's order.
    """
    take, ready = run.take, run.ready
    tasks: list[int]
    if run.stacked:
        # The top n, last pushed first: what n pops would take, in two C-level
        # slices instead of a Python loop per task.
        if n <= 0:
            return [], []
        tasks = ready[-n:]
        del ready[-n:]
        tasks.reverse()
        return tasks, dispatch_all(run, tasks, worker)
    tasks = []
    if run.needs is not None:  # see above: held while running
        while len(tasks) < n and ready:
            task = run._take_ranked(idle and not tasks)
            if task < 0:
                break
            tasks.append(task)
        return tasks, dispatch_all(run, tasks, worker)
    while len(tasks) < n and ready:
        task = take()
        if task < 0:
            break
        tasks.append(task)
    return tasks, dispatch_all(run, tasks, worker)


def dispatch_all(run: RunState, tasks: list[int], worker: int) -> list[tuple[Any, ...]]:
    """:meth:`dispatch` for several tasks at once (one call for a worker's batch):
    mark them handed out, and return their arguments in order."""
    values, consumers = run.values, run.consumers
    deps, state, chain_next = run.deps, run.state, run.chain_next
    kept = run.kept_args  # empty unless a task with retries= was handed out
    out: list[tuple[Any, ...]] = []
    for task in tasks:
        state[task] = IN_FLIGHT
        follower = chain_next[task]
        while follower >= 0:
            state[follower] = HELD
            follower = chain_next[follower]
        if kept and task in kept:  # a retry: the same arguments again
            out.append(kept[task])
            continue
        task_deps = deps[task]
        # One or two dependencies are the commonest cases: a loop costs an
        # iterator and a comprehension a frame (3.11); measured ~3% of the
        # instructions per task on the layered scale graph.
        # The values read are let go of here, inline: let_go's loop, without
        # a call per task (measured: a call per batch is +1.0 scheduler call
        # per task on the wide graph, whose batches are mostly of one task).
        if len(task_deps) == 1:
            d = task_deps[0]
            out.append((values[d],))
            left = consumers[d] - 1
            consumers[d] = left
            if not left:
                values[d] = None
        else:
            if len(task_deps) == 2:
                out.append((values[task_deps[0]], values[task_deps[1]]))
            else:
                out.append(tuple([values[d] for d in task_deps]))
            for d in task_deps:
                left = consumers[d] - 1
                consumers[d] = left
                if not left:
                    values[d] = None
    # Map items and retries, in a pass of their own: tested in the loop above,
    # they cost ~6 bytecodes per task of every run (~0.5% of the instructions
    # per task of the speed gate's workloads, which have neither).
    if run.items is not None or run.policy is not None:
        _add_elements_and_keep(run, tasks, out)
    run.in_flight += len(tasks)
    if run.in_flight > run.peak_in_flight:
        run.peak_in_flight = run.in_flight
    if run.gate is not None:
        for task in tasks:
            run.gate.attempt_began(task)
    if run.events is not None:
        attempt = run.attempt.get
        run.events.extend(
            [Event(DISPATCH, task, worker, 0, 0.0, 0.0, attempt(task, 1)) for task in tasks]
        )
    return out


def _add_elements_and_keep(run: RunState, tasks: list[int], out: list[tuple[Any, ...]]) -> None:
    """:func:`dispatch_all`'s last step in a run with maps or task policies: a
    map item's element goes first in its arguments, and a task that may be
    retried keeps its arguments (``out[i]`` is ``tasks[i]``'s)."""
    items, policy, kept = run.items, run.policy, run.kept_args
    for i, task in enumerate(tasks):
        if items is not None and task in items:
            out[i] = (items.pop(task), *out[i])
        if policy is not None:
            task_policy = policy[task]
            if task_policy is not None and task_policy.retries:
                kept[task] = out[i]  # a retry needs them again (a retry's own: the same)


def release(run: RunState, task: int, attempt: int = 0, how: int = RETURNED) -> None:
    """The item headed by ``task`` is off its worker: free its slot and resources.

    Chain members that never ran are cancelled here. ``attempt`` is the number
    of the attempt let go (0: the task's current one); ``how`` is a RELEASE
    event's state, for the observers.
    """
    if run.tell_release:
        assert run.events is not None
        number = attempt or run.attempt.get(task, 1)
        run.events.append(Event(RELEASE, task, -1, how, 0.0, 0.0, number))
    run.in_flight -= 1
    if run.needs is not None and run.needs[task]:
        assert run.resources is not None
        run.resources.unhold(run.needs[task])
    follower = run.chain_next[task]
    while follower >= 0:
        # Reported ends came first: a member not final now never ran.
        if run.state[follower] == HELD or run.state[follower] == IN_FLIGHT:
            run.finish(follower, CANCELLED)
        follower = run.chain_next[follower]
    if run.gate is not None and how != LET_GO:  # a let-go attempt still runs
        run.gate.attempt_returned(task)


def let_go_returned(run: RunState, task: int) -> None:
    """An attempt of ``task`` that the run let go of at its timeout (LET_GO) has
    returned on its own thread: for the cleanup gate, it runs no more."""
    if run.gate is not None:
        run.gate.attempt_returned(task)
        run.gate.recheck()


def put_back(run: RunState, task: int, args: tuple[Any, ...]) -> bool:
    """The item headed by ``task`` was taken back before it started, in a stop
    that is not an abort's hard one: a cleanup task goes back to the ready
    set with its arguments, to run all the same (True). Anything else is
    not put back (False): cancel it with :meth:`take_back`."""
    cleanup = run.cleanup
    if cleanup is None or run.hard or task >= len(cleanup) or not cleanup[task]:
        return False
    run.kept_args[task] = args
    release(run, task)
    run.make_ready(task)  # it passed the gate already: it is not held again
    return True


def take_back(run: RunState, task: int) -> None:
    """The item headed by ``task`` was taken back before it started: cancel it."""
    run.finish(task, CANCELLED)
    release(run, task, how=TAKEN_BACK)
