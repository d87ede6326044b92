"""``progress=True``: a one-line progress bar on stderr, driven by run callbacks.

This module decides when to draw and where the text goes; what the line says
is :mod:`dagexec._observation.progress_line`'s.

Every hook runs on the scheduler thread, so the counts need no lock, and the
bar must cost the scheduler next to nothing: a redraw (string formatting and a
write to a terminal) happens at most once per ``min_interval`` seconds, checked
with one :func:`time.monotonic` call per event, plus a final draw at the end.
No event redraws sooner, a task start included (a start used to redraw at once
when the line showed its worker idle, so redraws came in pairs 0.1 ms apart).
A change the rate keeps off the screen is drawn ``min_interval`` after the last
redraw by a one-shot timer (at most one pending), so a line never stays stale
when no further event comes (a burst of long tasks at the start shows them
running within ``min_interval``). A bar given its own ``clock`` (a test) has no
timer: the test drives time.

The total grows while the run does: a map's items are tasks of the run, known
only when it expands. Until every map has expanded the count reads ``2/7+``
and the ETA is a lower bound (``ETA >0:05``); the filled part of the bar never
shrinks when the total grows, it holds still until the work done catches up.
The time left is the tasks still to run at their own group's rate (a map's
items at theirs: :mod:`dagexec._observation.progress_eta`), and reads
``ETA unknown`` until every group with tasks left has had a task end.

On a terminal the line is redrawn in place (``\\r``, then erase to end of line)
and left showing the final state, followed by a newline. When the stream is not
a terminal (a log file, CI, a pipe) redraws would only fill the log with
carriage returns, so nothing is written during the run and one summary line is
written at its end.

Tasks that log or print to the same terminal while the line shows would write
into the middle of it. So on a terminal, for the length of a run, the bar puts
a small proxy (:mod:`dagexec._observation.progress_streams`) in front of the terminal streams: in
``sys.stdout``/``sys.stderr`` and in the ``logging.StreamHandler`` objects
that write to them. A write through a proxy takes the bar's lock, erases the
bar, writes, and redraws the bar below a completed line, so log lines scroll
up whole and the bar stays at the bottom. The proxies are taken out again when
the run ends (or :meth:`ProgressBar.close` is called, or the first write after
an interrupted run notices that its scheduler has gone).

A progress bar must never fail a run: when the stream is missing
(``sys.stderr is None`` under pythonw or a service) or a write to it fails,
the bar goes quiet.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TextIO

from .._core.hooks import PlanInfo
from .._core.result import TaskState
from .groups import LOADED_GROUP, _unwrap, function_group, task_group
from .progress_eta import Estimate
from .progress_line import Shown, bar_line, end_state, summary_line
from .progress_streams import LineSafeStream, StreamSwaps

if TYPE_CHECKING:
    from .._core.result import RunResult

__all__ = ["ProgressBar"]

_ERASE_TO_EOL = "\x1b[K"


class ProgressBar:
    """Show a run's progress on ``stream`` (default: ``sys.stderr``).

    Args:
        stream: where to write; ``sys.stderr`` as it is when the bar is made
            (``progress=True`` makes it as the run starts) when None. With no
            stream at all (``sys.stderr is None``) the bar writes nothing.
        is_tty: force terminal mode on or off; None asks ``stream.isatty()``,
            once, here.
        min_interval: least seconds between two redraws on a terminal.
        keep_logs_apart: on a terminal, route writes to ``sys.stdout``,
            ``sys.stderr`` and logging stream handlers through the bar during a
            run, so they appear as whole lines above it (see the module doc).
            False leaves every stream alone.
        clock: the time source, :func:`time.monotonic` unless a test injects one.

    The line reads ``finished/total`` (every final state counts as finished,
    so the bar reaches the end even when tasks fail or are skipped), then
    failed, skipped and cancelled counts, tasks running, the rate of tasks run
    per second and an ETA from each group's own rate (``ETA unknown`` until it
    can know). One instance can serve several runs
    in turn; each run start resets it.

    Terminal-ness is decided when the bar is made, not at each run start,
    because it decides which hooks the bar has: only a terminal shows the
    running count, so only then does the bar implement ``on_task_start`` (a
    run asks its workers for start reports only when some callback has that
    hook). That is also why this is not a :class:`dagexec.Callback` subclass:
    the hooks are set per instance.
    """

    on_task_start: Callable[[Hashable, int], None]
    on_task_end: Callable[[Hashable, TaskState, float], None]

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        is_tty: bool | None = None,
        min_interval: float = 0.1,
        keep_logs_apart: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_interval = min_interval
        self.keep_logs_apart = keep_logs_apart
        self._clock = clock
        self._stream: TextIO | None = stream if stream is not None else sys.stderr
        while isinstance(self._stream, LineSafeStream):  # another bar's, left by Ctrl-C
            self._stream._close_if_abandoned()
            self._stream = self._stream._target
        if self._stream is None:
            is_tty = False
        elif is_tty is None:
            try:
                is_tty = bool(self._stream.isatty())
            except Exception:  # no isatty, a closed stream, a hostile object
                is_tty = False
        self.is_tty = is_tty
        # Serialises every write to the terminal: the bar's (scheduler thread) and
        # the proxied ones (any thread). Re-entrant: a proxy redraws under it.
        self._lock = threading.RLock()
        self._quiet = self._stream is None  # no stream, or a write to it failed
        self._swaps = StreamSwaps()
        self._run_thread: threading.Thread | None = None
        self._running = False  # between a run's start and its end (or close())
        self._showing = False  # a bar line is on screen and not yet ended
        self._partial = False  # a proxied write left the cursor mid-line
        if is_tty:
            self.on_task_start = self._task_started
            self.on_task_end = self._task_ended_drawing
        else:
            self.on_task_end = self._task_ended
        # Draws a change the rate kept off the screen, later: a one-shot timer in a
        # real run; none with an injected clock (a test moves its own time).
        self._later: Callable[[float, Callable[[], None]], Callable[[], None]] | None = (
            _timer if clock is time.monotonic else None
        )
        self._pending: Callable[[], None] | None = None  # cancels the timer set
        self._reset(0)

    def _reset(self, total: int, maps: int = 0) -> None:
        self.total = total
        self.counts = dict.fromkeys(TaskState, 0)
        self.interrupted = False
        self.maps_pending = maps  # maps not expanded yet: the total will grow
        self.retries = 0  # retry attempts made (retries=)
        self.timed_out = 0  # attempts that ran past their timeout=
        self._retrying: set[Hashable] = set()  # tasks retried and not ended yet
        self._fill = 0.0  # the bar's filled share as last drawn: it never shrinks
        # When the latest redraws happened, to keep to 1/min_interval a second.
        budget = math.floor(1 / self.min_interval + 1e-9) if self.min_interval > 0 else 0
        self._draws: deque[float] | None = deque(maxlen=max(budget, 1)) if budget else None
        # What each worker runs now, and where each started task runs. A fused
        # chain reports each member's start as it happens but all their ends at
        # once, so counting starts minus ends would overcount; a worker runs one
        # task at a time, so its latest start is what it is running.
        self._current: dict[int, Hashable] = {}
        self._worker_of: dict[Hashable, int] = {}
        self._started_at = self._clock()
        self._last_draw = -float("inf")
        self._estimate = Estimate({"": total}, {}, self._started_at)

    # ------------------------------------------------------------ callbacks
    def on_run_start(self, plan: PlanInfo) -> None:
        inner = plan._plan
        self._reset(len(plan.tasks), len(inner.maps) if inner is not None and inner.maps else 0)
        if inner is not None and self.is_tty:
            self._estimate = _estimate(inner, self._started_at)
        self._running = True
        if self.is_tty:
            self._run_thread = threading.current_thread()
            if self.keep_logs_apart and not self._quiet:
                self._install()
            self._draw(self._started_at, final=False)

    def on_map_expand(self, name: Hashable, items: int) -> None:
        with self._lock:  # a proxied write (any thread) may be drawing the line
            self.total += items  # the map's items are tasks of the run too
            self.maps_pending = max(self.maps_pending - 1, 0)
            self._estimate.added(self._estimate.group((name, 0)), items)

    def on_task_retry(self, name: Hashable, attempt: int) -> None:
        with self._lock:
            self.retries += 1
            self._retrying.add(name)

    def on_task_timeout(self, name: Hashable, attempt: int) -> None:
        with self._lock:
            self.timed_out += 1

    def _task_started(self, name: Hashable, worker: int) -> None:
        with self._lock:  # a proxied write (any thread) may be drawing the line
            self._current[worker] = name
            self._worker_of[name] = worker
        self._maybe_draw(self.min_interval)

    def _task_ended(self, name: Hashable, state: TaskState, seconds: float) -> None:
        self.counts[state] += 1
        if self._retrying:
            self._retrying.discard(name)

    def _task_ended_drawing(self, name: Hashable, state: TaskState, seconds: float) -> None:
        with self._lock:  # a proxied write (any thread) may be drawing the line
            ran = state is TaskState.DONE or state is TaskState.FAILED
            self._estimate.ended(name, ran, self._clock(), seconds)
            self.counts[state] += 1
            if self._retrying:
                self._retrying.discard(name)
            worker = self._worker_of.pop(name, None)
            if worker is not None and self._current.get(worker) == name:
                del self._current[worker]
        self._maybe_draw(self.min_interval)

    def on_run_end(self, result: RunResult) -> None:
        self._finish(interrupted=False)

    def close(self, *, interrupted: bool = True) -> None:
        """End a run the bar saw start but not end (Ctrl-C): final line, streams back.

        Safe to call at any time and more than once; does nothing when no run is
        showing. The command line calls it when a run is interrupted.
        """
        if self._running:
            self._finish(interrupted=interrupted)

    def _finish(self, *, interrupted: bool) -> None:
        with self._lock:
            if self._pending is not None:
                self._pending()
                self._pending = None
            self._swaps.uninstall()
            now = self._clock()
            self._current.clear()
            self._worker_of.clear()
            self.interrupted = interrupted
            if self.is_tty:
                self._draw(now, final=True)
                self._write("\n")
            else:
                self._write(self.summary(now) + "\n")
            self._showing = False
            self._running = False

    # ------------------------------------------------------ log separation
    def _install(self) -> None:
        """Put proxies in front of the terminal streams, for this run only."""
        self._swaps.install(
            self._stream,
            lambda target: LineSafeStream(target, self._proxied_write, self._close_if_abandoned),
        )

    def _close_if_abandoned(self) -> None:
        """End the line of a run whose scheduler has gone without a run end (Ctrl-C)."""
        with self._lock:
            thread = self._run_thread
            if self._running and thread is not None and not thread.is_alive():
                self._finish(interrupted=True)

    def _proxied_write(self, target: Any, text: str) -> int:
        """A write through a proxy: bar off, text on, bar back below a full line."""
        with self._lock:
            self._close_if_abandoned()
            if not self._showing or self._quiet:
                return _count(target.write(text), text)
            if not self._partial:
                self._write("\r" + _ERASE_TO_EOL, flush=target is not self._stream)
            written = _count(target.write(text), text)
            target.flush()
            self._partial = not text.endswith("\n")
            if not self._partial:  # the bar back below the line: not a progress redraw
                self._draw(self._clock(), final=False, counted=False)
            return written

    # -------------------------------------------------------------- drawing
    @property
    def running(self) -> int:
        """Workers running a task, as far as the start and end reports have told."""
        return len(self._current)

    @property
    def finished(self) -> int:
        return sum(self.counts.values())

    def _maybe_draw(self, interval: float) -> None:
        """Redraw if ``interval`` passed since the last redraw and the rate allows;
        else have the timer redraw once they do (one timer at a time)."""
        with self._lock:  # the timer's thread comes here too
            now = self._clock()
            # (1 ns of slack: a timer set for exactly ``interval`` must find it due)
            if now - self._last_draw >= interval - 1e-9 and self._within_rate(now):
                self._draw(now, final=False)
            elif self._later is not None and self._pending is None and self._running:
                draws = self._draws
                wait = self._last_draw + interval - now
                if draws is not None and len(draws) >= (draws.maxlen or 0):
                    wait = max(wait, draws[0] + 1.0 - now)
                self._pending = self._later(wait, self._wake)

    def _wake(self) -> None:
        """The timer: draw what the rate kept off the screen, if the run still shows."""
        with self._lock:
            self._pending = None
            if self._running:
                self._maybe_draw(self.min_interval)

    def _within_rate(self, now: float) -> bool:
        """Fewer than ``1/min_interval`` redraws in the second before ``now``."""
        draws = self._draws
        return draws is None or len(draws) < (draws.maxlen or 0) or now - draws[0] >= 1.0

    def _draw(self, now: float, *, final: bool, counted: bool = True) -> None:
        with self._lock:
            self._last_draw = now
            if counted and not final and self._draws is not None:
                self._draws.append(now)
            if self._quiet:
                return
            # Text a task left mid-line stays: the bar starts on the next line.
            start = "\n" if self._partial else "\r"
            self._partial = False
            self._showing = not final
            # A line that wraps cannot be redrawn in place with \r.
            line = self.line(now, final=final, width=self._columns())
            self._write(start + line + _ERASE_TO_EOL)

    def _columns(self) -> int | None:
        """The terminal's width, or None when unknown (then the line is not cut)."""
        try:
            columns = os.get_terminal_size(self._stream.fileno()).columns  # type: ignore[union-attr]
        except Exception:  # not a real terminal (tests, IDEs)
            columns = 0
        if columns <= 0:  # a pty nobody sized reports 0
            try:
                columns = int(os.environ.get("COLUMNS", ""))
            except ValueError:
                return None
        return columns if columns > 0 else None

    def _write(self, text: str, *, flush: bool = True) -> None:
        if self._quiet:
            return
        try:
            self._stream.write(text)  # type: ignore[union-attr]
            if flush:
                self._stream.flush()  # type: ignore[union-attr]
        except Exception:  # a closed, missing or broken stream: never fail the run
            self._quiet = True
            self._swaps.uninstall()

    def line(self, now: float, *, final: bool = False, width: int | None = None) -> str:
        """The bar as it reads at time ``now`` (of ``clock``), fitted into ``width``.

        To fit, the bar shrinks first, then the least useful parts go (rate,
        running, zero counts), and only then is the line cut
        (:func:`dagexec._observation.progress_line.bar_line`).
        """
        if not final:
            # A grown total must not move the bar back: it holds still until
            # the work done catches up.
            finished = self.finished
            total = max(self.total, finished)
            self._fill = max(self._fill, 1.0 if total == 0 else finished / total)
        return bar_line(self._shown(now), final=final, width=width)

    def end_state(self) -> str:
        """How the run ended: ``done``, ``failed``, ``interrupted`` or ``stopped``.

        ``stopped``: tasks were cancelled without a failure (a callback raised).
        """
        return end_state(self.counts, self.total, self.interrupted)

    def summary(self, now: float) -> str:
        """The one line written at the end when the stream is not a terminal."""
        return summary_line(self._shown(now))

    def _shown(self, now: float) -> Shown:
        return Shown(
            total=self.total,
            counts=self.counts,
            more=self.maps_pending > 0,
            elapsed=now - self._started_at,
            retrying=len(self._retrying),
            retries=self.retries,
            timed_out=self.timed_out,
            running=self.running,
            interrupted=self.interrupted,
            fill=self._fill,
            left=self._estimate.seconds_left(now),
        )


def _timer(delay: float, call: Callable[[], None]) -> Callable[[], None]:
    """Call ``call`` in ``delay`` seconds on a daemon thread; returns its cancel."""
    timer = threading.Timer(max(delay, 0.0), call)
    timer.daemon = True
    timer.name = "dagexec-progress"
    timer.start()
    return timer.cancel


def _estimate(plan: Any, started_at: float) -> Estimate:
    """The time-left estimate of a run of ``plan``: its tasks counted by group, as the
    trace groups them (a task loaded from a checkpoint in a group of its own)."""
    by_fn: dict[int, str] = {}
    group_of: dict[Hashable, str] = {}
    left: dict[str, int] = {}
    loaded = plan.loaded or frozenset()
    maps = plan.maps or {}
    for task, (name, fn) in enumerate(zip(plan.names, plan.fns, strict=True)):
        if task in loaded:
            group = LOADED_GROUP
        elif task in maps:  # a map ends once its items have: it goes with them
            group = task_group((name, 0), None, map_item=True)
        else:
            group = by_fn.get(id(fn)) or by_fn.setdefault(id(fn), _group(name, fn))
        group_of[name] = group
        left[group] = left.get(group, 0) + 1
    return Estimate(left, group_of, started_at)


def _group(name: Hashable, fn: Any) -> str:
    """A task's group for the estimate: the trace's, except that lambdas group by
    their code (the tasks one loop added go at one rate), not one group each."""
    if function_group(fn) is None:
        code = getattr(_unwrap(fn), "__code__", None)
        if code is not None:
            return f"<lambda {id(code)}>"
    return task_group(name, fn, map_item=False)


def _count(written: Any, text: str) -> int:
    """What ``write`` returned, or the length written for streams that return None."""
    return written if isinstance(written, int) else len(text)
