"""Flag: a ``threading.Event`` that is cheaper to make, for the few made per run.

``threading.Event()`` builds a ``Condition`` over a plain ``Lock``, and
``Condition.__init__`` looks up three methods a plain lock lacks
(``_release_save``, ``_acquire_restore``, ``_is_owned``), raising and catching
an ``AttributeError`` for each: ~4-6 us per Event on the project machine
(CPython 3.11), where the same ``Condition`` over an ``RLock``, which has all
three, costs ~1.5-2 us. A run makes four (``finished``, ``stop``,
``hard_stop``, ``cancelled``), which was about a tenth of a 10-task run's
Python work on the calling thread (``python benchmarks/small_runs.py --count``).

The lock being reentrant changes nothing an Event user can see: the lock is
held only inside ``set``/``clear``/``wait``/``is_set``'s own code, never
across a call out. (A signal handler that sets an Event on the thread already
inside one of them would deadlock on a plain lock and re-enter here; the run
never does that either way, see ``Driver.request_abort``.)

A worker checks the stop flag of every item it takes, so it reads ``_flag``,
the field ``is_set()`` returns, without the call (``worker._loop``): the call
was a Python frame per task, ~260 instructions per task of the speed gate's
one-worker run of the wide graph (1.7%; docs/speed-gate.md). The field is
``threading.Event``'s own, written under the condition's lock by ``set`` and
``clear``; a read without the lock is what ``is_set()`` does too.
"""

from __future__ import annotations

import threading

__all__ = ["Flag"]


class Flag(threading.Event):
    """A ``threading.Event`` whose condition sits on an ``RLock``: same behaviour, made faster."""

    def __init__(self) -> None:  # no super().__init__(): it would build the slow Condition
        self._cond = threading.Condition(threading.RLock())
        self._flag = False
