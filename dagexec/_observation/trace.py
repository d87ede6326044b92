"""The timeline recorder behind ``trace=True``: fixed columns, fed by run events.

Owned by the scheduler thread, like the run state. It sees the same event
stream the callbacks see (``_messages.Event``); the only thing it adds is a
clock reading for READY and DISPATCH, which the driver passes in, since the
state machine itself reads no clock.
"""

from __future__ import annotations

from collections.abc import Container, Hashable
from typing import TYPE_CHECKING

from .._core.result import FAILED as S_FAILED
from .._core.result import StatusMap, TaskState, TraceRecord
from .._state.events import DISPATCH, END, KILLED, READY, RETRY, TIMED_OUT, TIMEOUT, Event
from .groups import LOADED_GROUP, task_group

if TYPE_CHECKING:
    from .._state.runstate import RunState

__all__ = ["Recorder"]


class Recorder:
    """Per task: when it became ready, was dispatched, started and ended, and where."""

    __slots__ = (
        "attempts",
        "chain_next",
        "ended",
        "fns",
        "killed",
        "loaded",
        "planned",
        "ready",
        "retried",
        "sent",
        "started",
        "started_at",
        "worker",
    )

    def __init__(self, run: RunState, started_at: float) -> None:
        n = len(run.state)
        self.started_at = started_at
        self.chain_next = run.chain_next  # grows with the run's maps, like the columns
        # Columns, seconds since the run started; NaN-free: -1.0 means "not yet".
        self.ready = [-1.0] * n
        self.sent = [-1.0] * n
        self.started = [-1.0] * n
        self.ended = [-1.0] * n
        self.worker = [-1] * n
        self.retried: dict[int, int] = {}  # task -> failed attempts before its last
        self.killed: set[tuple[int, int]] = set()  # (task, attempt): its child was killed
        # For each record's group: the functions (a list that grows with maps, whose
        # items are the tasks past the plan's), and the tasks a checkpoint supplied.
        self.fns = run.fns
        self.planned = len(run.plan.names)
        self.loaded = run.plan.loaded or frozenset()
        # Attempts before a task's last: (task, attempt, worker, ready, sent, started,
        # ended, timed out), seconds since the run started.
        self.attempts: list[tuple[int, int, int, float, float, float, float, bool]] = []

    def record(self, event: Event, now: float) -> None:
        """Note ``event``; ``now`` is the driver's ``perf_counter`` for it."""
        kind, task = event.kind, event.task
        if task >= len(self.ready):  # a map's item, added during the run
            self._grow(task + 1)
        if kind == READY:
            self.ready[task] = now - self.started_at
        elif kind == DISPATCH:
            self.sent[task] = now - self.started_at
        elif kind == END and event.worker >= 0:
            t0 = event.started - self.started_at
            t1 = event.ended - self.started_at
            self.started[task] = t0
            self.ended[task] = t1
            self.worker[task] = event.worker
            follower = self.chain_next[task]
            if follower >= 0:
                if follower >= len(self.ready):
                    self._grow(follower + 1)
                # The next member became ready, and was as good as dispatched,
                # when this one ended, on the same worker.
                self.ready[follower] = self.sent[follower] = t1
        elif kind == TIMEOUT:
            if event.state == KILLED:
                self.killed.add((task, event.attempt))
        elif kind == RETRY:
            self.retried[task] = self.retried.get(task, 0) + 1
            if event.worker >= 0:
                self.attempts.append(
                    (
                        task,
                        event.attempt,
                        event.worker,
                        self.ready[task],
                        self.sent[task],
                        event.started - self.started_at,
                        event.ended - self.started_at,
                        event.state == TIMED_OUT,
                    )
                )

    def _grow(self, n: int) -> None:
        more = n - len(self.ready)
        for column in (self.ready, self.sent, self.started, self.ended):
            column.extend([-1.0] * more)
        self.worker.extend([-1] * more)

    def records(
        self,
        status: StatusMap,
        codes: bytearray,
        timed_out: Container[int] = (),
        abandoned: Container[tuple[int, int]] = (),
    ) -> tuple[TraceRecord, ...]:
        """One record per attempt that ran, in start order.

        ``timed_out``: tasks whose last attempt timed out; ``abandoned``: (task,
        attempt) still running when the run ended.
        """
        groups: dict[int, str] = {}  # by the function's id: one look-up per function
        fns, planned, loaded, killed = self.fns, self.planned, self.loaded, self.killed

        def group(task: int, name: Hashable) -> str:
            if task in loaded:
                return LOADED_GROUP
            if task >= planned:  # a map's item, named (map, i)
                return task_group(name, None, map_item=True)
            fn = fns[task]
            found = groups.get(id(fn))
            if found is None:
                found = groups[id(fn)] = task_group(name, fn, map_item=False)
            return found

        names = list(status)
        out = [
            TraceRecord(
                name=names[task],
                worker=worker,
                state=TaskState.FAILED,
                ready=ready,
                dispatched=sent,
                started=started,
                ended=ended,
                attempt=attempt,
                group=group(task, names[task]),
                outcome="abandoned"
                if (task, attempt) in abandoned
                else "killed"
                if (task, attempt) in killed
                else "timed out"
                if late
                else "retried",
            )
            for task, attempt, worker, ready, sent, started, ended, late in self.attempts
        ]
        for task, name in enumerate(names):
            if task >= len(self.worker) or self.worker[task] < 0:
                continue
            attempt = 1 + self.retried.get(task, 0)
            state = status.state_of(codes[task])
            if (task, attempt) in abandoned:
                outcome = "abandoned"
            elif (task, attempt) in killed:
                outcome = "killed"
            elif codes[task] == S_FAILED and task in timed_out:
                outcome = "timed out"
            else:
                outcome = state.value
            out.append(
                TraceRecord(
                    name=name,
                    worker=self.worker[task],
                    state=state,
                    ready=self.ready[task],
                    dispatched=self.sent[task],
                    started=self.started[task],
                    ended=self.ended[task],
                    attempt=attempt,
                    group=group(task, name),
                    outcome=outcome,
                )
            )
        out.sort(key=lambda r: r.started)
        return tuple(out)
