"""An attempt's own events: it began on its worker, or ran past its timeout.

Part of the run state machine, and as pure: a layer of ``RunState`` over
:mod:`dagexec._state.ending` (a timed-out attempt failed). With
:mod:`dagexec._state.dispatch` (DISPATCH, RELEASE), :mod:`dagexec._state.retries`
(RETRY) and :mod:`dagexec._state.ending` (END), these are the only places that
append events: the engine tells the machine what it heard, the machine says
what happened. Every event about an attempt carries its task and its number
(``RunState.attempt``), so every observer (trace, callbacks, recorders,
progress, the command line) counts the same attempts.
"""

from __future__ import annotations

from .._core.result import FAILED
from .ending import Ending
from .events import KILLED, START, TIMEOUT, Event

__all__ = ["Attempts"]


class Attempts(Ending):
    """A run told of its attempts' own events: begun, or timed out."""

    __slots__ = ()

    def started(self, task: int, worker: int) -> None:
        """``worker`` began the current attempt of ``task`` (its STARTED report).

        Only observed runs ask their workers for start reports, so this appends
        unconditionally when there is a stream to append to.
        """
        events = self.events
        if events is not None:
            events.append(Event(START, task, worker, 0, 0.0, 0.0, self.attempt.get(task, 1)))

    def timed_out(
        self,
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
        self.timeouts += 1
        if self.events is not None:
            self.events.append(
                Event(TIMEOUT, task, worker, KILLED if killed else 0, 0.0, 0.0, attempt)
            )
        self.finish(task, FAILED, exc, worker, started, ended)
