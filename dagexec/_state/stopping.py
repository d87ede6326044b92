"""Stopping a run: nothing more is handed out, and what was not handed out is cancelled.

Part of the run state machine, and as pure; functions of the run, bound as
``RunState.fail``, ``RunState.stop`` and ``RunState.stuck_error``. A stop (a
failure with on_error="raise", a fatal exception, an abort) cancels everything
not yet handed out; what is on workers ends through ``RunState.ended``. Cleanup
tasks (run_if="all_done") are kept, unless the stop is a hard one (a second
Ctrl-C).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from .._core.result import CANCELLED, HELD, READY, WAITING
from .._core.safe import task_for_message

if TYPE_CHECKING:
    from .runstate import RunState

__all__ = ["fail", "stop", "stuck_error"]


def fail(run: RunState, exc: BaseException) -> None:
    """Stop the run; ``exc`` is what the caller gets unless an earlier error is.

    A fatal exception (``KeyboardInterrupt``, ``SystemExit``: not an
    ``Exception``) outranks an ordinary one that came first, since the caller
    must not lose it.
    """
    first = run.first_error
    if first is None or (isinstance(first, Exception) and not isinstance(exc, Exception)):
        run.first_error = exc
    run.stop()


def stop(run: RunState, hard: bool = False) -> None:
    """Hand nothing more out; cancel every task not handed out yet.

    Cleanup tasks (run_if="all_done") are kept, and run once their
    dependencies ended, unless ``hard`` (a second Ctrl-C: the caller has gone).
    """
    if run.stopping and (run.hard or not hard):
        return
    run.stopping = True
    run.hard = hard
    if not run.unfinished:
        return  # every task has ended (a run's normal end): nothing to scan for
    cleanup, state = run.cleanup, run.state
    keep: list[int] = []
    if cleanup is not None and not hard:
        keep = [t for t in range(len(cleanup)) if cleanup[t] and state[t] == READY]
    run.ready.clear()
    if run.resources is not None:
        run.resources.clear_waiting()
    for task in range(len(state)):
        if state[task] <= READY:
            if cleanup is not None and not hard and task < len(cleanup) and cleanup[task]:
                continue
            run.finish(task, CANCELLED)
    if run.timers:  # tasks cancelled while waiting for a retry wait no more
        run.timers = [t for t in run.timers if state[t[2]] == WAITING]
        heapq.heapify(run.timers)
    for task in keep:  # ready before the stop: still ready
        run._push_ready(task)


def stuck_error(run: RunState) -> RuntimeError:
    """The error for a run with unfinished tasks, none in flight and none that
    can be handed out: a bug (the run could never end), never to be hidden as a
    cancel. Names the first stuck tasks, their states and what they wait for."""
    words = {WAITING: "waiting", READY: "ready", HELD: "held in a chain"}
    stuck = [t for t, code in enumerate(run.state) if code in words]
    described = []
    for t in stuck[:5]:
        text = f"{task_for_message(run.names[t])} ({words[run.state[t]]}"
        if run.resources is not None:
            text += run.resources.waits_for(t)
        described.append(text + ")")
    more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
    return RuntimeError(
        f"dagexec internal error: {run.unfinished} tasks can never start, though "
        f"nothing is running: {', '.join(described)}{more}; the run was stopped. "
        "Please report this bug with the graph that shows it"
    )
