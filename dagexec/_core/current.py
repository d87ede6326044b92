"""Which task the current worker thread runs: what ``dagexec.current_task()`` reads.

Written by the engine's workers (one per thread) and by the scheduler (how to name
a run's tasks); read by :func:`dagexec.current_task` on the task's own thread. It
lives in the lowest layer because the public ``current_task()`` does, and the
engine writes into it rather than the core reaching up into the engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["Running", "running_by_thread", "running_here"]


class Running:
    """What one worker runs right now, for ``dagexec.current_task()`` in a plain task.

    Written only by its own worker (two attribute stores per task, ~12 ns), read
    only by code running on that same worker thread: no lock is needed.
    """

    __slots__ = ("child", "early", "inbox", "next", "refuse", "stop", "task")

    def __init__(self) -> None:
        self.task = -1
        self.stop: threading.Event | None = None
        # This worker's child process for isolate="process" tasks, started by the
        # first of them (dagexec._engine.process.process_pool.ChildSlot); closed when the
        # worker exits, so children go with their executor's workers.
        self.child: Any = None
        # For a call sent early (dagexec._engine.process.early): its inbox, how to
        # report an item it took but will not start (NOT_STARTED), and that
        # module's Sender, made by the first process task while it is on.
        self.inbox: Any = None
        self.refuse: Callable[[Any], None] | None = None
        self.early: Any = None
        self.next: Any = None  # an item taken off the inbox early: run before the rest


# Each worker thread's Running, by thread ident: set when the worker starts and
# removed when it exits; read through running_here() on the same thread.
running_by_thread: dict[int, Running] = {}


def running_here() -> tuple[Hashable, threading.Event] | None:
    """The name and the run's stop flag of the task this worker thread runs, or None."""
    here = running_by_thread.get(threading.get_ident())
    if here is None or here.stop is None:
        return None
    # How to name the run's tasks: its stop flag holds that (Flag.name_of), set
    # before the run handed out its first task; a plain Event names none.
    name_of: Callable[[int], Hashable] | None = getattr(here.stop, "name_of", None)
    name: Hashable = name_of(here.task) if name_of is not None else here.task
    return name, here.stop
