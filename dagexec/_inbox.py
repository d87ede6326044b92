"""A worker's bounded inbox: ``queue.Queue`` with the two hot calls made shorter.

Every task passes through one ``put_nowait`` (scheduler) and one ``get``
(worker). ``queue.Queue`` routes both through general code: ``put_nowait`` calls
``put(block=False)``, which enters the ``not_full`` condition (a Python-level
``__enter__``) and counts ``unfinished_tasks`` for ``join()``. On no-op graphs
that bookkeeping was about a fifth of all the time per task
(benchmarks/run.py, wide and layered, 2 workers). The fast paths below take the
shared mutex directly and skip the ``join()`` count; the queue is still bounded
(``put_nowait`` raises ``queue.Full`` at ``maxsize``) and every waiter is still
notified exactly as ``queue.Queue`` would. ``join()``/``task_done()`` are not
used by dagexec and are not supported on an inbox.
"""

from __future__ import annotations

import queue
from typing import TypeVar

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox(queue.Queue[T]):
    """A bounded ``queue.Queue`` with short non-blocking put and blocking get."""

    def put_nowait(self, item: T) -> None:
        """Append ``item`` or raise ``queue.Full``; never blocks."""
        with self.mutex:
            if len(self.queue) >= self.maxsize:
                raise queue.Full
            self.queue.append(item)
            self.not_empty.notify()

    def get(self, block: bool = True, timeout: float | None = None) -> T:
        """Remove and return the oldest item, waiting for one if ``block``."""
        if not block or timeout is not None:
            return super().get(block, timeout)
        with self.not_empty:
            while not self.queue:
                self.not_empty.wait()
            item: T = self.queue.popleft()
            self.not_full.notify()
            return item

    def get_nowait(self) -> T:
        """Remove and return the oldest item, or raise ``queue.Empty``."""
        with self.mutex:
            if not self.queue:
                raise queue.Empty
            item: T = self.queue.popleft()
            self.not_full.notify()
            return item
