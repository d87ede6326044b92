"""An attempt's own events: it began on its worker, or ran past its timeout.

Part of the run state machine, and as pure; functions of the run, bound in
:class:`~dagexec._state.runstate.RunState`'s class body as its methods. With
:mod:`dagexec._state.dispatch` (DISPATCH, RELEASE), :mod:`dagexec._state.retries`
(RETRY) and :mod:`dagexec._state.ending` (END), these are the only places that
append events: the engine tells the machine what it heard, the machine says
what happened. Every event about an attempt carries its task and its number
(``RunState.attempt``), so every observer (trace, callbacks, recorders,
progress, the command line) counts the same attempts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core.result import FAILED
from .events import KILLED, START, TIMEOUT, Event

if TYPE_CHECKING:
    from .runstate import RunState

__all__ = ["started", "timed_out"]


def started(run: RunState, task: int, worker: int) -> None:
    """``worker`` began the current attempt of ``task`` (its STARTED report).

    Only observed runs ask their workers for start reports, so this appends
    unconditionally when there is a stream to append to.
    """
    events = run.events
    if events is not None:
        events.append(Event(START, task, worker, 0, 0.0, 0.0, run.attempt.get(task, 1)))


def timed_out(
    run: RunState,
    task: int,
    attempt: int,
    exc: BaseException,
    worker: int,
    started: float,
    ended: float,
    killed: bool = False,
) -> None:
    """Attempt ``attempt`` of ``task`` ran past its timeout: the one place a
    timeout is told (TIMEOUT, before the RETRY or END that ``finish`` adds) and
    counted (``RunState.timeouts``, ``RunStats.timeouts``). ``killed``: its
    child process was killed for it (``isolate="process"``); else its thread
    runs on. The caller releases the attempt (``how`` KILLED for a killed one).
    """
    run.timeouts += 1
    if run.events is not None:
        run.events.append(Event(TIMEOUT, task, worker, KILLED if killed else 0, 0.0, 0.0, attempt))
    run.finish(task, FAILED, exc, worker, started, ended)
