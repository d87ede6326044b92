"""``logs=``: keep the ``logging`` records each task's attempt emits, by task.

How a record is tied to its task: a worker thread's :class:`~dagexec._core.current.Running`
names the task it runs and carries the run's stop flag; a run with ``logs=``
hangs its :class:`Capture` on that flag (as it hangs ``name_of`` there for
``current_task()``). So a worker pays nothing per task for the feature: the
cost is paid by a logging call made while a captured task runs.

How records are taken without changing what the user's handlers see: while any
run captures, ``logging.Logger.isEnabledFor`` and ``logging.Logger.handle`` are
wrapped (:func:`start`, :func:`release`), for every logger of the process:

* ``isEnabledFor`` answers as before, except on a captured task's thread for a
  record the capture wants: then True, so that an INFO record is made even where
  the user's levels (WARNING by default) would not make it;
* ``handle``, on a captured task's thread, for a record the capture wants: the
  user's loggers get it only if their own ``isEnabledFor`` says so (as before),
  and the capture keeps a copy with its message formatted. A record the user's
  levels would have dropped goes to the capture only: the capture never makes
  the user's handlers print more, and a record they would print still reaches
  them, unchanged (they may read its ``args``).

What is captured: records at the capture's level and above (INFO by default),
from any logger, or from one logger and its children with ``logs="name"``,
made on the task's own thread (not on threads the task starts), from the
attempt's start to its end. The user's logger levels, ``disabled`` flags and
``logging.disable`` do not narrow it; a logger subclass that overrides
``isEnabledFor`` or ``handle`` is not wrapped, and is captured only at the
levels it enables itself.

A timed-out attempt that runs on keeps logging into its own attempt, capped; once
its run has ended its records are only counted (``TaskLogs.dropped``), and the
wrapping stays until it returns.
"""

from __future__ import annotations

import logging
import pickle
import threading
from collections.abc import Hashable, Iterable, Mapping, Sequence
from threading import get_ident

from .._core.current import running_by_thread
from .._core.policy import attempt_here
from .._core.task_logs import AttemptLog, LogsMap

__all__ = ["Capture", "child_wanted", "from_child", "release", "start"]

# The attributes every LogRecord has; any other was added by ``extra=`` and is
# kept only if it is plain data (it may not pickle, like ``args``).
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
}
_PLAIN = (str, int, float, bool, type(None))
_formatter = logging.Formatter()


class Capture:
    """One run's ``logs=``: which records it wants, and each attempt's log by task.

    ``by_task`` is written by the tasks' threads (an entry per task that logs,
    then an :class:`AttemptLog` per attempt: list appends, atomic on their own)
    and read by the driver at the run's end (:meth:`close`).
    """

    __slots__ = ("by_task", "closed", "dotted", "level", "logger")

    def __init__(self, level: int, logger: str | None) -> None:
        self.level = level
        self.logger = logger
        self.dotted = "" if logger is None else logger + "."
        self.by_task: dict[int, list[AttemptLog]] = {}
        self.closed = False

    def wants(self, name: str, level: int) -> bool:
        if level < self.level:
            return False
        logger = self.logger
        return logger is None or name == logger or name.startswith(self.dotted)

    def add(self, task: int, record: logging.LogRecord) -> None:
        """Keep ``record`` (already made safe to keep) in ``task``'s current attempt."""
        attempt = attempt_here()
        attempts = self.by_task.get(task)
        if attempts is None:
            attempts = self.by_task.setdefault(task, [])
        for log in reversed(attempts):  # the newest first: usually the only one
            if log.attempt == attempt:
                break
        else:
            log = AttemptLog(attempt)
            log.closed = self.closed
            attempts.append(log)
        log.add(record)

    def close(self, names: Sequence[Hashable], index: Mapping[Hashable, int]) -> LogsMap:
        """End the run's capture: later records are only counted. ``result.logs``."""
        self.closed = True
        for attempts in list(self.by_task.values()):
            for log in list(attempts):
                log.closed = True
        return LogsMap(names, index, self.by_task)


def _kept(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` made safe to keep, in place: message formatted, nothing unpicklable."""
    try:
        message = record.getMessage()
    except Exception as exc:  # the user's handler would report it; we keep what we can
        message = f"{record.msg!r} % {record.args!r} (could not format: {exc!r})"
    record.msg = record.message = message
    record.args = None
    if record.exc_info:
        if not record.exc_text:
            record.exc_text = _formatter.formatException(record.exc_info)
        record.exc_info = None  # its traceback would keep the task's frames alive
    fields = record.__dict__
    if len(fields) > len(_STANDARD) or not fields.keys() <= _STANDARD:
        for key, value in list(fields.items()):
            if key not in _STANDARD and not isinstance(value, _PLAIN):
                fields[key] = repr(value)
    return record


def _copy(record: logging.LogRecord) -> logging.LogRecord:
    new = object.__new__(type(record))
    new.__dict__.update(record.__dict__)
    return new


_original_enabled = logging.Logger.isEnabledFor
_original_handle = logging.Logger.handle


def _is_enabled_for(self: logging.Logger, level: int) -> bool:
    if _original_enabled(self, level):
        return True
    here = running_by_thread.get(get_ident())
    if here is None:
        return False
    capture: Capture | None = getattr(here.stop, "capture", None)
    return capture is not None and capture.wants(self.name, level)


def _handle(self: logging.Logger, record: logging.LogRecord) -> None:
    here = running_by_thread.get(get_ident())
    capture: Capture | None = None if here is None else getattr(here.stop, "capture", None)
    if here is None or capture is None or not capture.wants(record.name, record.levelno):
        _original_handle(self, record)
    elif _original_enabled(self, record.levelno):
        _original_handle(self, record)  # the user's handlers first, the record as made
        capture.add(here.task, _kept(_copy(record)))
    else:
        capture.add(here.task, _kept(record))  # only made for the capture: no copy


def child_wanted() -> tuple[int, str | None] | None:
    """What the child process of the task this worker thread runs must stream back
    (``isolate="process"``): (level, logger or None), or None."""
    here = running_by_thread.get(get_ident())
    capture: Capture | None = None if here is None else getattr(here.stop, "capture", None)
    return None if capture is None else (capture.level, capture.logger)


def from_child(data: bytes | memoryview) -> None:
    """Keep a record the child process of this worker thread's task sent (its
    fields pickled, message formatted: ``_engine/process/child.py``)."""
    here = running_by_thread.get(get_ident())
    capture: Capture | None = None if here is None else getattr(here.stop, "capture", None)
    if here is not None and capture is not None:
        capture.add(here.task, _kept(logging.makeLogRecord(pickle.loads(data))))


# How many runs capture now, and the done flags of captured attempts that outlived
# their run: the wrapping stays while either is there. Guarded by _lock.
_lock = threading.Lock()
_runs = 0
_lingering: list[threading.Event] = []


def start() -> None:
    """A run that captures starts: wrap ``logging.Logger`` if no other run has."""
    global _runs
    with _lock:
        _runs += 1
        if logging.Logger.isEnabledFor is not _is_enabled_for:
            logging.Logger.isEnabledFor = _is_enabled_for  # type: ignore[method-assign]
            logging.Logger.handle = _handle  # type: ignore[method-assign]


def release(lingering: Iterable[threading.Event] = ()) -> None:
    """A run that captured has ended; ``lingering``: its attempts still running.

    The last one out unwraps ``logging.Logger``, unless an attempt that outlived
    its run still runs (its records are counted until it returns): then a later
    release does, once they have all returned.
    """
    global _runs
    with _lock:
        _runs -= 1
        _lingering.extend(lingering)
        _lingering[:] = [done for done in _lingering if not done.is_set()]
        if _runs == 0 and not _lingering:
            logging.Logger.isEnabledFor = _original_enabled  # type: ignore[method-assign]
            logging.Logger.handle = _original_handle  # type: ignore[method-assign]
