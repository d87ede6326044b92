"""What the two ways of driving a run read and write of their executor.

:mod:`.caller_drives` and :mod:`.queued` share the executor's slot, locks and
queue of runs with :class:`~dagexec._engine.front.executor.Executor`, which calls
them. They name those fields through this protocol, not through the class: the
executor imports them, and an import back would make a cycle (tests/test_layers.py).
"""

from __future__ import annotations

import contextvars
import queue
import threading
import weakref
from collections.abc import Mapping
from typing import Protocol

from ..._core.plan import Plan
from ..run.scheduler import Run
from .future import RunFuture
from .run_checks import Job
from .stopper import _Stopper
from .submission import _Ending, _Submission

__all__ = ["Host"]


class Host(Protocol):
    """The executor's fields a run's driving path shares with it (see executor.py)."""

    _run_lock: threading.Lock  # held to queue a run and to shut down
    _closed: bool
    _pending: list[RunFuture]  # submitted and maybe not done; lock held
    _last: tuple[threading.Thread, weakref.ref[_Ending]] | None  # the run queued last
    _slot: threading.Lock  # held by whoever drives a run
    _driver: int | None  # ident of a caller driving its own run
    _slot_passed: bool  # run_here handed the slot to _take_over
    _runs: queue.SimpleQueue[_Submission | None]  # runs for the scheduler thread
    _scheduler: threading.Thread | None
    _stopper: _Stopper

    @property
    def _abandoned(self) -> tuple[threading.Thread, _Ending] | None: ...

    @_abandoned.setter
    def _abandoned(self, value: tuple[threading.Thread, _Ending] | None) -> None: ...

    def _new_run(
        self, job: Job, plan: Plan, capacity: Mapping[str, float], context: contextvars.Context
    ) -> Run: ...

    def _on_own_thread(self, here: threading.Thread | None = None) -> bool: ...

    def _wait_for_abandoned(self) -> None: ...
