"""What ``logs=`` keeps of a run: each attempt's records, and the map of them by task.

Pure data, no logging machinery: the capture that fills these (which records,
from which thread, how they are made safe to keep) is
:mod:`dagexec._observation.capture`. Here is only what a :class:`RunResult`
holds and hands out, so that a result loads without the capture.

The cap: each attempt keeps at most :data:`RECORDS_PER_ATTEMPT` records, the
first half and the last half of what it logged (the start says what it was
doing, the end what went wrong); ``dropped`` counts those in between, and the
records an attempt logged after its run had ended (an abandoned attempt, still
running: see docs/attempts.md). The cap bounds the memory a chatty task can
take: a thousand records of ~500 bytes each is ~0.5 MB per attempt.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import NamedTuple

from .errors import describe

__all__ = ["NO_LOGS", "RECORDS_PER_ATTEMPT", "AttemptLog", "LogsMap", "TaskLogs"]

# Most records kept per attempt: half from its start, half from its end. More
# keeps more of a chatty task's story and costs memory per task (a record with
# its formatted message is some hundreds of bytes); fewer risks losing the lines
# just before a failure, which the tail keeps whatever the middle held.
RECORDS_PER_ATTEMPT = 1000
_HALF = RECORDS_PER_ATTEMPT // 2


class TaskLogs(NamedTuple):
    """What one attempt of a task logged, with ``logs=`` on (``result.logs[name]``).

    ``attempt`` is 1 for the first attempt. ``records`` are ``logging.LogRecord``
    objects whose message is already formatted (``msg`` is the message, ``args``
    is None, an exception's traceback is text in ``exc_text``), so they pickle and
    can be handed to any handler or formatter. ``dropped`` counts the records the
    per-attempt cap left out (see :data:`RECORDS_PER_ATTEMPT`) and those logged
    after the run ended.
    """

    attempt: int
    records: tuple[logging.LogRecord, ...]
    dropped: int


class AttemptLog:
    """One attempt's records while it runs: the first half kept, the last half ringed.

    Written only by the thread running the attempt (a task's own thread); the
    driver sets ``closed`` once at the run's end, after which every record is
    only counted. Read through :meth:`snapshot`.
    """

    __slots__ = ("attempt", "closed", "dropped", "head", "tail")

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self.closed = False
        self.dropped = 0
        self.head: list[logging.LogRecord] = []
        self.tail: deque[logging.LogRecord] = deque(maxlen=_HALF)

    def add(self, record: logging.LogRecord) -> None:
        if self.closed:
            self.dropped += 1
        elif len(self.head) < _HALF:
            self.head.append(record)
        else:
            if len(self.tail) == _HALF:
                self.dropped += 1  # the ring lets its oldest go
            self.tail.append(record)

    def snapshot(self) -> TaskLogs:
        return TaskLogs(self.attempt, (*self.head, *self.tail), self.dropped)


class LogsMap(Mapping[Hashable, tuple[TaskLogs, ...]]):
    """``result.logs``: every task that logged something captured, to its attempts' logs.

    A task that logged nothing (at the captured level) is not here, so
    ``result.logs.get(name, ())`` is the way to ask of any task. Built from the
    run's attempt logs when read, so that an abandoned attempt still logging after
    the run shows in its ``dropped`` count; a pickled result keeps what it held.
    """

    __slots__ = ("_by_task", "_enabled", "_index", "_names")

    def __init__(
        self,
        names: Sequence[Hashable],
        index: Mapping[Hashable, int],
        by_task: Mapping[int, Sequence[AttemptLog | TaskLogs]],
        enabled: bool = True,
    ) -> None:
        self._names = names
        self._index = index
        self._by_task = by_task
        self._enabled = enabled

    def __getitem__(self, name: Hashable) -> tuple[TaskLogs, ...]:
        try:
            task = self._index[name]
            attempts = self._by_task[task]
        except (KeyError, TypeError):
            raise KeyError(self._why_none(name)) from None
        out = [a if isinstance(a, TaskLogs) else a.snapshot() for a in list(attempts)]
        out.sort(key=lambda logs: logs.attempt)
        return tuple(out)

    def _why_none(self, name: Hashable) -> str:
        if not self._enabled:
            return (
                f"no logs of task {describe(name)}: the run did not capture any; "
                "pass logs=True to run() to keep each task's log records"
            )
        return (
            f"task {describe(name)} logged nothing that was captured (or is not a task "
            "of this run); result.logs.get(name, ()) asks without raising"
        )

    def __iter__(self) -> Iterator[Hashable]:
        names = self._names
        return iter([names[t] for t in list(self._by_task)])

    def __len__(self) -> int:
        return len(self._by_task)

    def __contains__(self, name: object) -> bool:
        try:
            return self._index[name] in self._by_task
        except (KeyError, TypeError):
            return False

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # What it holds now, as plain data: names and TaskLogs tuples.
        by_name = {name: self[name] for name in self}
        return _frozen_logs, (by_name, self._enabled)

    def __repr__(self) -> str:
        return f"<dagexec logs of {len(self)} tasks>"


def _frozen_logs(by_name: dict[Hashable, tuple[TaskLogs, ...]], enabled: bool) -> LogsMap:
    names = list(by_name)
    index = {name: k for k, name in enumerate(names)}
    return LogsMap(names, index, dict(enumerate(by_name.values())), enabled)


NO_LOGS = LogsMap((), {}, {}, enabled=False)
"""``result.logs`` of a run without ``logs=``."""
