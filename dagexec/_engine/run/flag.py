"""Flag: a ``threading.Event`` that is cheap to make and to set: a run's own flags, and
the token of each attempt of a task with a policy (``timers.py``), which a task may wait on.

``threading.Event()`` builds a ``Condition`` over a plain ``Lock``, and
``Condition.__init__`` looks up three methods a plain lock lacks
(``_release_save``, ``_acquire_restore``, ``_is_owned``), raising and catching
an ``AttributeError`` for each: ~4-6 us per Event on the project machine
(CPython 3.11). A run made four (``finished``, ``stop``, ``hard_stop``,
``cancelled``; ``hard_stop`` now only in a plan with cleanup tasks), which was
about a tenth of a 10-task run's Python work on the calling thread (``python
benchmarks/small_runs.py --count``), and sets two of them at its end, each
``set`` six Python calls into the ``Condition``.

Most of a run's flags are set and read, and never waited on: a plain run's
caller drives it itself, and its workers only read ``stop``. So a Flag is a
bool and a plain lock, and makes the ``Condition`` only for its first
``wait``; ``set`` notifies through it only if one was made. Why that is safe:
the flag is written, and the condition made, under ``_guard``; a waiter
checks the flag again under the condition's own lock before it sleeps, and a
``set`` that saw no condition happened before the waiter made one, so that
waiter sees the flag set and does not sleep. A waiter also notes how many
sets there were when it looked: a ``set`` and a ``clear`` both landing between
its two checks still wake it (``threading.Event`` holds one lock across both).

``_guard`` is a plain lock, as ``threading.Event``'s is: a signal handler that
sets a Flag on a thread already inside one of its methods would deadlock. The
run's own handler never does (``RunStop.request_abort`` sets a bool and puts a
message on the results queue).

A worker checks the stop flag of every item it takes, so it reads ``_flag``,
the field ``is_set()`` returns, without the call (``worker._loop``): the call
was a Python frame per task, ~260 instructions per task of the speed gate's
one-worker run of the wide graph (1.7%; docs/performance.md, "The speed gate"). Likewise before
each member of a chain (``worker._run_chain``: 4.5% of the chain graph's
instructions per task). The field has ``threading.Event``'s name and meaning,
so reading it works on any Event.
"""

from __future__ import annotations

import threading
from _thread import allocate_lock
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["Flag"]


class Flag(threading.Event):
    """A ``threading.Event`` whose condition is made by its first ``wait``: same behaviour.

    A run's stop flag, which every item of the run carries, also says how to name
    the run's tasks (``name_of``, read by ``current_task()`` on a worker): set by
    the scheduler before the run hands out its first task, so the put of that
    task into an inbox, which the worker's take follows (the deque: the GIL, or
    its own lock on 3.13t), orders the write before any worker's read. Not a
    registry keyed by the flag: adding and removing an entry was two calls, a
    lock and a weak reference per run (~2% of a small run's Python work). The
    namer must not hold its run (a task may keep ``current_task().cancelled``,
    this flag, long after the run).
    """

    # The two fields every flag has, as slots: a flag nothing else is stored on (a
    # run's finished and cancelled) then never makes an instance dict (threading.Event
    # has no __slots__, so any other field still goes to one, made when first set).
    __slots__ = ("_flag", "_guard")

    # Class-level default: the three flags of a run that name nothing pay no store.
    name_of: Callable[[int], Hashable] | None = None
    # A run with logs= hangs its Capture here too, on stop and hard_stop: what a
    # logging call on a task's thread reads to find its run (_observation/capture.py).
    capture: Any = None
    # The hard stop's mate is a weak reference to its run's stop (the run's one key,
    # for a child sent calls of both; dagexec._engine.process.early); None on every
    # other flag.
    mate: Callable[[], Any] | None = None

    # Never set, nobody waiting: class-level, so that a new flag stores only its
    # lock and its state (set() and wait() write their own, under _guard). Not
    # _flag: a worker reads it for every item, and a miss on the instance's
    # dict then a look-up on the class cost more per task than the store per run.
    _sets = 0  # set() calls since the first wait(): a wait() sees one it raced, even if cleared
    _waiting: threading.Condition | None = None  # made by the first wait()

    def __init__(self) -> None:  # no super().__init__(): it would build the slow Condition
        self._flag = False
        self._guard = allocate_lock()  # held to write _flag and _sets, and to make _waiting

    def _at_fork_reinit(self) -> None:
        """A fresh lock and no waiters, as ``threading.Event`` does in a forked child."""
        self._guard = allocate_lock()
        self._waiting = None

    def set(self) -> None:
        """Set the flag and wake every thread waiting for it."""
        with self._guard:
            self._flag = True
            waiting = self._waiting
            # Counted for a waiter only: one that has not made the condition yet
            # takes _guard after this and sees the flag. Not a store per set: a
            # new key in the flag's instance dict (~1,500 instructions a set,
            # two sets a run; cachegrind, small_runs.py --count).
            if waiting is not None:
                self._sets += 1
        if waiting is not None:
            with waiting:
                waiting.notify_all()

    def clear(self) -> None:
        """Unset the flag: ``wait`` blocks again until the next ``set``."""
        with self._guard:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the flag is set or ``timeout`` seconds pass; the flag's state
        then, as ``threading.Event.wait`` returns it."""
        with self._guard:
            if self._flag:
                return True
            sets = self._sets
            waiting = self._waiting
            if waiting is None:
                # Over an RLock: a Condition over a plain Lock raises and catches
                # three AttributeErrors to be made (see above).
                waiting = self._waiting = threading.Condition(threading.RLock())
        with waiting:
            # Set since the check above, before we took this lock: True, as
            # threading.Event returns for a set after the wait began, even if a
            # clear() followed it at once (the set's notify found no sleeper).
            if self._flag or self._sets != sets:
                return True
            return waiting.wait(timeout)
