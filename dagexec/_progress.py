"""``progress=True``: a one-line progress bar on stderr, driven by run callbacks.

Every hook runs on the scheduler thread, so the counts need no lock, and the
bar must cost the scheduler next to nothing: a redraw (string formatting and a
write to a terminal) happens at most once per ``min_interval`` seconds, checked
with one :func:`time.monotonic` call per event, plus a final draw at the end.
The one exception: a task start on a worker that the line on screen shows idle
redraws at once, at most once per worker per line (see ``_task_started``).

On a terminal the line is redrawn in place (``\\r``, then erase to end of line)
and left showing the final counts, followed by a newline. When the stream is not
a terminal (a log file, CI, a pipe) redraws would only fill the log with
carriage returns, so nothing is written during the run and one summary line is
written at its end.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, TextIO

from ._events import PlanInfo
from ._result import TaskState

if TYPE_CHECKING:
    from ._result import RunResult

__all__ = ["ProgressBar"]

_BAR_CELLS = 24
_ERASE_TO_EOL = "\x1b[K"


def format_duration(seconds: float) -> str:
    """``h:mm:ss`` or ``m:ss``, the way a person reads a countdown."""
    whole = max(round(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


class ProgressBar:
    """Show a run's progress on ``stream`` (default: ``sys.stderr``).

    Args:
        stream: where to write; ``sys.stderr`` as it is when the bar is made
            (``progress=True`` makes it as the run starts) when None.
        is_tty: force terminal mode on or off; None asks ``stream.isatty()``,
            once, here.
        min_interval: least seconds between two redraws on a terminal.
        clock: the time source, :func:`time.monotonic` unless a test injects one.

    The line reads ``finished/total`` (every final state counts as finished,
    so the bar reaches the end even when tasks fail or are skipped), then
    failed, skipped and cancelled counts, tasks running, the rate of tasks run
    per second and an ETA from that rate. One instance can serve several runs
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_interval = min_interval
        self._clock = clock
        self._stream: TextIO = stream if stream is not None else sys.stderr
        if is_tty is None:
            try:
                is_tty = self._stream.isatty()
            except (AttributeError, ValueError):  # no isatty, or a closed stream
                is_tty = False
        self.is_tty = is_tty
        if is_tty:
            self.on_task_start = self._task_started
            self.on_task_end = self._task_ended_drawing
        else:
            self.on_task_end = self._task_ended
        self._reset(0)

    def _reset(self, total: int) -> None:
        self.total = total
        self.counts = dict.fromkeys(TaskState, 0)
        # What each worker runs now, and where each started task runs. A fused
        # chain reports each member's start as it happens but all their ends at
        # once, so counting starts minus ends would overcount; a worker runs one
        # task at a time, so its latest start is what it is running.
        self._current: dict[int, Hashable] = {}
        self._worker_of: dict[Hashable, int] = {}
        self._started_at = self._clock()
        self._last_draw = -float("inf")
        self._drawn_busy: set[int] = set()  # workers the line on screen shows running

    # ------------------------------------------------------------ callbacks
    def on_run_start(self, plan: PlanInfo) -> None:
        self._reset(len(plan.tasks))
        if self.is_tty:
            self._draw(self._started_at, final=False)

    def _task_started(self, name: Hashable, worker: int) -> None:
        self._current[worker] = name
        self._worker_of[name] = worker
        if worker not in self._drawn_busy:
            # The screen shows this worker idle: either the line was drawn in the
            # moment between two of its tasks (its next start is usually queued
            # right behind the end that triggered the redraw), or it is the run's
            # first start. Left alone, a run of long tasks would show "running 0"
            # until the next end, so correct the line now: once per worker per
            # line, since the corrected line shows it busy.
            self._draw(self._clock(), final=False)
        else:
            self._maybe_draw(self.min_interval)

    def _task_ended(self, name: Hashable, state: TaskState, seconds: float) -> None:
        self.counts[state] += 1

    def _task_ended_drawing(self, name: Hashable, state: TaskState, seconds: float) -> None:
        self.counts[state] += 1
        worker = self._worker_of.pop(name, None)
        if worker is not None and self._current.get(worker) == name:
            del self._current[worker]
        self._maybe_draw(self.min_interval)

    def on_run_end(self, result: RunResult) -> None:
        now = self._clock()
        self._current.clear()
        self._worker_of.clear()
        if self.is_tty:
            self._draw(now, final=True)
            self._write("\n")
        else:
            self._write(self.summary(now) + "\n")

    # -------------------------------------------------------------- drawing
    @property
    def running(self) -> int:
        """Workers running a task, as far as the start and end reports have told."""
        return len(self._current)

    @property
    def finished(self) -> int:
        return sum(self.counts.values())

    def _maybe_draw(self, interval: float) -> None:
        now = self._clock()
        if now - self._last_draw >= interval:
            self._draw(now, final=False)

    def _draw(self, now: float, *, final: bool) -> None:
        self._last_draw = now
        self._drawn_busy = set(self._current)  # at most one entry per worker
        # A line that wraps cannot be redrawn in place with \r.
        self._write("\r" + self.line(now, final=final, width=self._columns()) + _ERASE_TO_EOL)

    def _columns(self) -> int | None:
        """The terminal's width, or None when unknown (then the line is not cut)."""
        try:
            columns = os.get_terminal_size(self._stream.fileno()).columns
        except (AttributeError, ValueError, OSError):  # not a real terminal (tests, IDEs)
            columns = 0
        if columns <= 0:  # a pty nobody sized reports 0
            try:
                columns = int(os.environ.get("COLUMNS", ""))
            except ValueError:
                return None
        return columns if columns > 0 else None

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()

    def line(self, now: float, *, final: bool = False, width: int | None = None) -> str:
        """The bar as it reads at time ``now`` (of ``clock``), fitted into ``width``.

        To fit, the bar shrinks first, then the least useful parts go (rate,
        running, zero counts), and only then is the line cut.
        """
        total, finished, counts = self.total, self.finished, self.counts
        elapsed = now - self._started_at
        ran = counts[TaskState.DONE] + counts[TaskState.FAILED]
        rate = ran / elapsed if elapsed > 0 else 0.0
        if final:
            eta = f"in {format_duration(elapsed)}"
        elif rate > 0:
            eta = f"ETA {format_duration((total - finished) / rate)}"
        else:
            eta = "ETA ?"
        # (what to show, how much it matters: the least is dropped first)
        parts = [
            (f"failed {counts[TaskState.FAILED]}", 5 if counts[TaskState.FAILED] else 2),
            (f"skipped {counts[TaskState.SKIPPED]}", 4 if counts[TaskState.SKIPPED] else 2),
        ]
        if counts[TaskState.CANCELLED]:
            parts.append((f"cancelled {counts[TaskState.CANCELLED]}", 4))
        if not final:
            parts.append((f"running {self.running}", 3))
        parts.append((f"{rate:.1f} tasks/s", 1))
        parts.append((eta, 6))
        digits = len(str(total))
        text = ""
        for cells in (_BAR_CELLS, _BAR_CELLS // 2):
            filled = cells if total == 0 else cells * finished // total
            head = f"dagexec [{'#' * filled}{'-' * (cells - filled)}] {finished:>{digits}}/{total}"
            kept = list(parts)
            text = "  ".join([head, *(t for t, _ in kept)])
            if width is None or len(text) < width:
                return text
            if cells == _BAR_CELLS:
                continue  # a shorter bar before anything else goes
            while kept and len(text) >= width:
                kept.remove(min(kept, key=lambda part: part[1]))
                text = "  ".join([head, *(t for t, _ in kept)])
        return text[: max(width - 1, 0)] if width is not None else text

    def summary(self, now: float) -> str:
        """The one line written at the end when the stream is not a terminal."""
        counts = self.counts
        elapsed = now - self._started_at
        return (
            f"dagexec: {self.total} tasks: {counts[TaskState.DONE]} done, "
            f"{counts[TaskState.FAILED]} failed, {counts[TaskState.SKIPPED]} skipped, "
            f"{counts[TaskState.CANCELLED]} cancelled in {elapsed:.3f} s"
        )
