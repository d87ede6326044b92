"""Where a process task's call enters the backend: which child it goes to.

:func:`call_in_child` is the runner ``isolate="process"`` registers
(:func:`dagexec._engine.process.register`). On a dagexec worker thread the call
goes to that worker's :class:`~.process_pool.ChildSlot` (checked out of the
program's pool of idle children by its first process task); if the worker sent
this very call early (:mod:`.early`), its answer is waited for instead of
sending it again. On any other thread (a caller running tasks itself) each
thread gets a child of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

from ..._core.current import running_by_thread, running_here
from ..._core.isolate import IsolatedCall
from ..._core.policy import CurrentTask, _local
from . import early
from .process_pool import ChildSlot
from .sharing import check_out

__all__ = ["call_in_child"]

_other_threads = threading.local()  # slots of threads that are not dagexec workers


def call_in_child(call: IsolatedCall, dep_values: tuple[Any, ...]) -> Any:
    """Run ``call`` on ``dep_values`` in this worker thread's child; its value or error.

    Called on the worker thread, by the task's function.
    """
    info = _current(call.name)
    here = running_by_thread.get(threading.get_ident())
    if here is not None:
        slot = here.child
        if slot is None:
            slot = here.child = check_out(ChildSlot)
        slot.sender = early.sender_for(here)
        sent = slot.early
        if sent is not None and sent.info is info and sent.call is call:
            return early.run_sent(slot, sent, dep_values, here.stop)
        return slot.run(call, dep_values, info, here.stop)
    slot = getattr(_other_threads, "slot", None)
    if slot is None:
        slot = _other_threads.slot = ChildSlot()
    return slot.run(call, dep_values, info)


def _current(default_name: Hashable) -> CurrentTask:
    info: CurrentTask | None = getattr(_local, "task", None)
    if info is not None:
        return info
    running = running_here()
    if running is not None:
        return CurrentTask(running[0], 1, running[1])
    return CurrentTask(default_name, 1, threading.Event())
