"""Ctrl-C as a message while the calling thread drives its own run.

Python raises ``KeyboardInterrupt`` in the main thread between any two
bytecodes. Inside the scheduler driver that could leave the run state, or a
worker's inbox, half updated (an inbox whose sleeping worker is never woken).
So while the main thread drives a run, SIGINT goes to a handler that only asks
the run to stop (``Run.request_abort``: a flag and a message on the results
queue, both safe from a signal handler); the driver handles that at its next step, leaves
the running tasks to another thread, and the caller raises ``KeyboardInterrupt``
itself, at once. The previous handler is put back afterwards.

Only Python's own handler is swapped. A program that installed its own SIGINT
handler keeps it: :attr:`SigintToAbort.stops_runs` is then False and its runs go to
the executor's scheduler thread, as every run did before, where no signal
handler ever runs.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stubs
import signal
from collections.abc import Callable
from types import FrameType, TracebackType

__all__ = ["SigintToAbort"]

# The C module under ``signal``: its ``signal`` and ``getsignal`` are the same
# calls without ``signal``'s enum conversions, which cost ~4-6 us a call here
# (they raise and catch a ValueError for a handler that is a function), against
# ~0.7 and ~0.2 us; a run swaps the handler twice. Same on 3.11 to 3.13t.
_getsignal: Callable[[int], object] = _signal.getsignal
_setsignal: Callable[[int, object], object] = _signal.signal

# How long the driver may block before it looks for an interrupt. A real SIGINT
# wakes its wait at once; ``_thread.interrupt_main()`` wakes nothing, so its
# handler runs only when the wait times out. The same as Executor.run's
# waiting caller (submission._INTERRUPT_POLL_SECONDS).
_WAKE_EVERY_SECONDS = 0.05


class SigintToAbort:
    """While in the ``with`` block, a SIGINT calls ``abort`` instead of raising.

    ``fired`` says whether one came. ``wake_every`` is how long the driver may
    block (None: forever, off the main thread, where no handler runs).

    ``stops_runs``: whether a Ctrl-C can be turned into a stop while this thread
    drives a run (``on_main``: this is the main thread; the caller knows, and
    asks once). Threads other than the main thread never see a SIGINT. In the
    main thread it raises only through Python's default handler, which is ours
    to swap; a SIGINT that is ignored or kills the process needs nothing. If
    False, the block must not be entered: the run goes to the scheduler thread.
    """

    __slots__ = ("abort", "fired", "on_main", "previous", "stops_runs", "wake_every")

    def __init__(self, on_main: bool) -> None:
        self.on_main = on_main  # the main thread, where SIGINT lands
        self.stops_runs = True
        if on_main:
            handler = _getsignal(signal.SIGINT)
            self.stops_runs = handler is signal.default_int_handler or handler in (
                signal.SIG_IGN,
                signal.SIG_DFL,
            )
        # Set once the run exists; a Ctrl-C before that is only ``fired``.
        # ``Run.request_abort`` (signal-safe); its argument: a second Ctrl-C.
        self.abort: Callable[[bool], None] | None = None
        self.fired = False
        self.previous: object = None
        self.wake_every: float | None = None

    def __enter__(self) -> SigintToAbort:
        # Only Python's own handler is swapped (stops_runs was checked by
        # the caller on this thread, and only code on this thread can change it).
        if self.on_main and _getsignal(signal.SIGINT) is signal.default_int_handler:
            self.wake_every = _WAKE_EVERY_SECONDS
            self.previous = _setsignal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        again = self.fired  # a second Ctrl-C abandons the run's cleanup tasks too
        self.fired = True
        if self.abort is not None:
            self.abort(again)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.previous is not None:
            # A SIGINT still pending now runs the handler put back: it raises
            # KeyboardInterrupt, as it would have without us.
            _setsignal(signal.SIGINT, self.previous)
            self.previous = None
        # A bound Run.abort would keep the run (its values) alive from the
        # caller's frame, which a task error's traceback holds.
        self.abort = None
