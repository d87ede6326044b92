"""The text of the progress bar: one line from the counts a :class:`ProgressBar` keeps.

Pure: no streams, no clock, no threads. :class:`dagexec.ProgressBar` decides
when to draw and where the text goes; this module decides what the line says
and how it shrinks to fit a narrow terminal, so the wording can be tested (and
changed) without a terminal or a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from .._core.result import TaskState

__all__ = ["BAR_CELLS", "Shown", "bar_line", "end_state", "format_duration", "summary_line"]

BAR_CELLS = 24


class Shown(NamedTuple):
    """What one line shows: the bar's counts at the moment it draws."""

    total: int
    counts: Mapping[TaskState, int]
    more: bool  # maps not expanded yet: the total will grow
    elapsed: float
    retrying: int  # tasks retried and not ended yet
    retries: int  # retry attempts made (retries=)
    timed_out: int  # attempts that ran past their timeout=
    running: int
    interrupted: bool
    fill: float  # the bar's filled share as last drawn: it never shrinks
    left: float | None = None  # seconds left, per group (progress_eta.py); None: unknown


def format_duration(seconds: float) -> str:
    """``h:mm:ss`` or ``m:ss``, the way a person reads a countdown."""
    whole = max(round(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def end_state(counts: Mapping[TaskState, int], total: int, interrupted: bool) -> str:
    """How the run ended: ``done``, ``failed``, ``interrupted`` or ``stopped``.

    ``stopped``: tasks were cancelled without a failure (a callback raised).
    """
    if interrupted:
        return "interrupted"
    if counts[TaskState.FAILED] or counts[TaskState.SKIPPED]:
        return "failed"
    if counts[TaskState.CANCELLED] or sum(counts.values()) < total:
        return "stopped"
    return "done"


def bar_line(shown: Shown, *, final: bool, width: int | None) -> str:
    """The bar as ``shown`` reads, fitted into ``width`` (None: not cut).

    To fit, the bar shrinks first, then the least useful parts go (rate,
    running, zero counts), and only then is the line cut.
    """
    counts = shown.counts
    total = max(shown.total, sum(counts.values()))  # never past full, whatever was counted
    # Maps yet to expand will add tasks: the total is a lower bound until then.
    more = "+" if shown.more and not final else ""
    elapsed = shown.elapsed
    ran = counts[TaskState.DONE] + counts[TaskState.FAILED]
    rate = ran / elapsed if elapsed > 0 else 0.0
    parts = _parts(shown, final)
    parts.append((f"{rate:.1f} tasks/s", 1))
    parts.append((_eta(shown, final, more), 6))
    status = end_state(counts, shown.total, shown.interrupted) if final else ""
    text = ""
    for cells in (BAR_CELLS, BAR_CELLS // 2):
        head = _head(shown, cells, total, status, more)
        text = "  ".join([head, *(t for t, _ in parts)])
        if width is None or len(text) < width:
            return text
        if cells != BAR_CELLS:  # a shorter bar before anything else goes
            text = _dropped_to_fit(head, parts, width)
    return text[: max(width - 1, 0)] if width is not None else text


def _eta(shown: Shown, final: bool, more: str) -> str:
    """How long the run took (at its end), or how long it has left."""
    if final:
        return f"in {format_duration(shown.elapsed)}"
    if shown.left is not None:
        return f"ETA {'>' if more else ''}{format_duration(shown.left)}"
    return "ETA unknown"  # a group with tasks left has no rate yet


def _head(shown: Shown, cells: int, total: int, status: str, more: str) -> str:
    """The bar, ``cells`` wide, and the count after it; ``status`` is the end
    state of a final line, empty while the run goes on."""
    counts = shown.counts
    digits = len(str(total))
    if status and status != "done":
        # The end of a run that did not complete must not look like success: the
        # bar fills only for what is done ('x' for failed and skipped), and a word
        # says what happened.
        done = counts[TaskState.DONE]
        bar = _unfinished_bar(counts, cells, total)
        return f"dagexec [{bar}] {status.upper()} {done:>{digits}}/{total} done"
    # While running, the share as last drawn: a grown total must not
    # move the bar back (the ProgressBar keeps it from shrinking).
    finished = sum(counts.values())
    share = shown.fill if not status else 1.0 if total == 0 else finished / total
    filled = cells if status == "done" else int(cells * share)
    return f"dagexec [{'#' * filled + '-' * (cells - filled)}] {finished:>{digits}}/{total}{more}"


def _unfinished_bar(counts: Mapping[TaskState, int], cells: int, total: int) -> str:
    """The bar of a run that ended without completing: '#' for done, 'x' for failed
    and skipped (at least one cell when any, so a failure is never invisible)."""
    done = counts[TaskState.DONE]
    bad = counts[TaskState.FAILED] + counts[TaskState.SKIPPED]
    filled = 0 if total == 0 else cells * done // total
    crossed = 0 if total == 0 else cells * (done + bad) // total - filled
    if bad and not crossed:
        crossed = 1 if filled < cells else 0
    return "#" * filled + "x" * crossed + "-" * (cells - filled - crossed)


def _dropped_to_fit(head: str, parts: list[tuple[str, int]], width: int) -> str:
    """The line with the least useful parts dropped, one by one, until it fits
    in ``width`` or none is left (then the caller cuts it)."""
    kept = list(parts)
    text = "  ".join([head, *(t for t, _ in kept)])
    while kept and len(text) >= width:
        kept.remove(min(kept, key=lambda part: part[1]))
        text = "  ".join([head, *(t for t, _ in kept)])
    return text


def _parts(shown: Shown, final: bool) -> list[tuple[str, int]]:
    """The counts after the bar: (what to show, how much it matters: the least goes first)."""
    counts = shown.counts
    parts = [
        (f"failed {counts[TaskState.FAILED]}", 5 if counts[TaskState.FAILED] else 2),
        (f"skipped {counts[TaskState.SKIPPED]}", 4 if counts[TaskState.SKIPPED] else 2),
    ]
    if counts[TaskState.CANCELLED]:
        parts.append((f"cancelled {counts[TaskState.CANCELLED]}", 4))
    if shown.retrying and not final:
        parts.append((f"retrying {shown.retrying}", 4))
    elif shown.retries and final:
        parts.append((f"retries {shown.retries}", 4))
    if shown.timed_out:
        parts.append((f"timed out {shown.timed_out}", 4))
    if not final:
        parts.append((f"running {shown.running}", 3))
    return parts


def summary_line(shown: Shown) -> str:
    """The one line written at the end when the stream is not a terminal."""
    counts = shown.counts
    state = "" if not shown.interrupted else "interrupted: "
    # A stopped run does not report the tasks it left running: named, so the
    # counts still add up to the total.
    unfinished = shown.total - sum(counts.values())
    left = f", {unfinished} unfinished" if unfinished > 0 else ""
    text = f", {shown.retries} retries" if shown.retries else ""
    policy = text + (f", {shown.timed_out} timed out" if shown.timed_out else "")
    return (
        f"dagexec: {state}{shown.total} tasks: {counts[TaskState.DONE]} done, "
        f"{counts[TaskState.FAILED]} failed, {counts[TaskState.SKIPPED]} skipped, "
        f"{counts[TaskState.CANCELLED]} cancelled{left}{policy} "
        f"in {shown.elapsed:.3f} s"
    )
