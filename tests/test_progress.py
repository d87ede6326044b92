"""ProgressBar: counts, redraw rate, terminal vs log output, and progress=True."""

from __future__ import annotations

import io
import logging
import sys
import threading
from collections.abc import Callable

import pytest

import dagexec
from dagexec import Graph, PlanInfo, ProgressBar, TaskState
from dagexec._observation.progress_line import BAR_CELLS, format_duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _plan(n: int) -> PlanInfo:
    names = tuple(f"t{i}" for i in range(n))
    return PlanInfo(
        tasks=names, targets=names, workers=2, queue_cap=2, max_in_flight=4, effective_cap=4
    )


def _lines(text: str) -> list[str]:
    """What a terminal shows for each redraw: the text between carriage returns."""
    return [part.replace("\x1b[K", "") for part in text.split("\r") if part]


def test_format_duration() -> None:
    assert format_duration(0) == "0:00"
    assert format_duration(59.4) == "0:59"
    assert format_duration(61) == "1:01"
    assert format_duration(3600 + 62) == "1:01:02"


def test_tty_redraws_at_most_once_per_interval() -> None:
    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(out, is_tty=True, min_interval=0.1, clock=clock)
    bar.on_run_start(_plan(100))
    bar.on_task_start("first", 0)  # a start alone never redraws at once (issue 32)
    assert out.getvalue().count("\r") == 1
    for i in range(50):
        bar.on_task_start(f"t{i}", 0)
        bar.on_task_end(f"t{i}", TaskState.DONE, 0.001)
    assert out.getvalue().count("\r") == 1  # no time passed: no redraw
    clock.now += 0.2
    bar.on_task_start("t50", 0)
    assert out.getvalue().count("\r") == 2
    assert "50/100" in _lines(out.getvalue())[-1]
    clock.now += 0.05
    bar.on_task_end("t50", TaskState.DONE, 0.001)
    assert out.getvalue().count("\r") == 2  # too soon after the last redraw


def test_tty_line_counts_and_eta() -> None:
    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(out, is_tty=True, min_interval=0.0, clock=clock)
    bar.on_run_start(_plan(10))
    for worker, name in enumerate(("t0", "t1", "t2", "t3")):
        bar.on_task_start(name, worker)
    bar.on_task_end("t0", TaskState.DONE, 0.5)
    bar.on_task_end("t1", TaskState.FAILED, 0.5)
    clock.now += 2.0
    bar.on_task_end("t5", TaskState.SKIPPED, 0.0)
    line = _lines(out.getvalue())[-1]
    # 3 of 10 finished; 2 ran in 2 s: 1 task/s, so 7 left take 7 s.
    assert "3/10" in line
    assert "failed 1" in line
    assert "skipped 1" in line
    assert "running 2" in line
    assert "1.0 tasks/s" in line
    assert "ETA 0:07" in line
    assert "cancelled" not in line  # only shown once something was cancelled
    assert out.getvalue().endswith("\x1b[K")  # every redraw erases leftovers


def test_running_counts_workers_not_unreported_starts() -> None:
    """A fused chain reports each member's start as it runs, but all ends at once."""
    bar = ProgressBar(io.StringIO(), is_tty=True, min_interval=1e9, clock=FakeClock())
    bar.on_run_start(_plan(4))
    for name in ("c0", "c1", "c2"):
        bar.on_task_start(name, 0)
        assert bar.running == 1
    bar.on_task_start("x", 1)
    assert bar.running == 2
    bar.on_task_end("c0", TaskState.DONE, 0.1)
    bar.on_task_end("c1", TaskState.DONE, 0.1)
    assert bar.running == 2  # worker 0 is still on c2
    bar.on_task_end("c2", TaskState.DONE, 0.1)
    assert bar.running == 1
    bar.on_task_end("x", TaskState.FAILED, 0.1)
    assert bar.running == 0


def test_tty_final_draw_and_newline() -> None:
    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(out, is_tty=True, min_interval=10.0, clock=clock)
    bar.on_run_start(_plan(2))
    bar.on_task_start("t0", 0)
    bar.on_task_end("t0", TaskState.DONE, 0.1)
    bar.on_task_end("t1", TaskState.CANCELLED, 0.0)
    clock.now += 1.0
    bar.on_run_end(None)  # type: ignore[arg-type]
    text = out.getvalue()
    assert text.endswith("\n")
    assert text.count("\n") == 1
    final = _lines(text)[-1]
    # Not a full bar: one of two tasks was cancelled, so the run stopped short.
    assert "[############------------] STOPPED 1/2 done" in final
    assert "cancelled 1" in final
    assert "in 0:01" in final
    assert "ETA" not in final


def test_not_a_tty_writes_one_summary_line_at_the_end() -> None:
    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(out, clock=clock)  # StringIO.isatty() is False
    bar.on_run_start(_plan(4))
    bar.on_task_end("t0", TaskState.DONE, 0.1)
    bar.on_task_end("t1", TaskState.FAILED, 0.1)
    bar.on_task_end("t2", TaskState.SKIPPED, 0.0)
    bar.on_task_end("t3", TaskState.CANCELLED, 0.0)
    assert out.getvalue() == ""
    clock.now += 1.5
    bar.on_run_end(None)  # type: ignore[arg-type]
    assert out.getvalue() == (
        "dagexec: 4 tasks: 1 done, 1 failed, 1 skipped, 1 cancelled in 1.500 s\n"
    )


def test_only_a_terminal_bar_asks_for_start_reports() -> None:
    """A run has workers report starts only if some callback has on_task_start."""
    assert hasattr(ProgressBar(io.StringIO(), is_tty=True), "on_task_start")
    assert not hasattr(ProgressBar(io.StringIO()), "on_task_start")


def test_reuse_resets_counts() -> None:
    out = io.StringIO()
    bar = ProgressBar(out, is_tty=False)
    g = Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda a: a, deps=["a"])
    dagexec.run(g, workers=2, callbacks=[bar])
    dagexec.run(g, workers=2, callbacks=[bar])
    first, second = out.getvalue().splitlines()
    assert "2 tasks: 2 done" in first
    assert "2 tasks: 2 done" in second


def _failing_graph() -> Graph:
    """
    a --> bad --> after1 --> after2
    a --> ok1, ok2
    """

    def bad(a: int) -> int:
        raise ValueError("boom")

    g = Graph()
    g.add("a", lambda: 1)
    g.add("bad", bad, deps=["a"])
    g.add("after1", lambda x: x, deps=["bad"])
    g.add("after2", lambda x: x, deps=["after1"])
    g.add("ok1", lambda a: a, deps=["a"])
    g.add("ok2", lambda a: a, deps=["a"])
    return g


def test_run_with_continue_counts_failures_and_skips() -> None:
    out = io.StringIO()
    dagexec.run(
        _failing_graph(),
        workers=2,
        on_error="continue",
        callbacks=[ProgressBar(out, is_tty=True, min_interval=0.0)],
    )
    final = _lines(out.getvalue())[-1]
    assert "FAILED 3/6 done" in final
    assert "[############xxxxxxxxxxxx]" in final  # 3 done, 3 failed or skipped
    assert "failed 1" in final
    assert "skipped 2" in final
    assert out.getvalue().endswith("\n")


def test_run_with_raise_still_ends_the_line() -> None:
    out = io.StringIO()
    running, gate = threading.Event(), threading.Event()

    def blocked() -> None:
        running.set()
        gate.wait(10)

    def bad() -> None:
        running.wait(10)  # fail only once "blocked" is surely running, not queued
        raise ZeroDivisionError

    g = Graph()
    g.add("bad", bad)
    g.add("blocked", blocked)
    g.add("later", lambda b: b, deps=["blocked"])
    bar = ProgressBar(out, is_tty=False)

    class Release(dagexec.Callback):
        def on_task_end(self, name: object, state: TaskState, seconds: float) -> None:
            if name == "bad":
                gate.set()

    with pytest.raises(ZeroDivisionError):
        dagexec.run(g, workers=2, callbacks=[Release(), bar])
    gate.set()
    line = out.getvalue()
    assert line.startswith("dagexec: 3 tasks: ")
    assert "1 failed" in line
    # "blocked" was running when "bad" failed, so it finished; "later" never started.
    assert "1 done" in line
    assert "1 cancelled" in line
    assert line.endswith("\n")


def test_progress_true_writes_summary_to_stderr_when_not_a_tty(
    capsys: pytest.CaptureFixture[str],
) -> None:
    g = Graph()
    for i in range(5):
        g.add(i, lambda: None)
    dagexec.run(g, workers=2, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("dagexec: 5 tasks: 5 done, 0 failed, 0 skipped, 0 cancelled")
    assert captured.err.count("\n") == 1


def test_narrow_terminal_drops_the_least_useful_parts_first() -> None:
    clock = FakeClock()
    bar = ProgressBar(io.StringIO(), is_tty=True, clock=clock)
    bar.on_run_start(_plan(1000))
    for i in range(10):
        bar.on_task_end(f"t{i}", TaskState.DONE, 0.1)
    bar.on_task_end("t10", TaskState.FAILED, 0.1)
    clock.now += 11.0
    wide = bar.line(clock.now)
    assert "1.0 tasks/s" in wide
    assert "[------------------------]" in wide
    narrow = bar.line(clock.now, width=60)
    assert len(narrow) < 60
    assert "11/1000" in narrow
    assert "failed 1" in narrow  # a non-zero failure count outranks the rest
    assert "ETA 16:29" in narrow
    assert "tasks/s" not in narrow
    assert "[------------]" in narrow  # the bar shrank first
    tiny = bar.line(clock.now, width=20)
    assert tiny == "dagexec [----------"


class FakeLater:
    """The bar's one-shot timer, fired by the test: ``(delay, call)`` pending."""

    def __init__(self) -> None:
        self.pending: list[tuple[float, Callable[[], None]]] = []

    def __call__(self, delay: float, call: Callable[[], None]) -> Callable[[], None]:
        self.pending.append((delay, call))
        return self.pending.clear

    def fire(self) -> None:
        ((_, call),) = self.pending
        self.pending.clear()
        call()


def test_a_start_is_drawn_by_the_timer_never_at_once() -> None:
    """Issue 32: a start on a worker the line showed idle redrew at once, so redraws
    came in pairs 0.1 ms apart. Now a change the rate keeps off the screen is drawn
    by a one-shot timer, min_interval after the last redraw."""
    out, clock, later = io.StringIO(), FakeClock(), FakeLater()
    bar = ProgressBar(out, is_tty=True, min_interval=0.1, clock=clock)
    bar._later = later
    bar.on_run_start(_plan(10))
    assert out.getvalue().count("\r") == 1
    bar.on_task_start("t0", 0)
    bar.on_task_start("t1", 1)
    assert out.getvalue().count("\r") == 1  # not at once
    assert [delay for delay, _ in later.pending] == [pytest.approx(0.1)]  # one timer
    clock.now += 0.1
    later.fire()
    assert out.getvalue().count("\r") == 2
    assert "running 2" in _lines(out.getvalue())[-1]
    clock.now += 0.5
    bar.on_task_end("t0", TaskState.DONE, 0.5)  # due: drawn at once, no timer
    assert out.getvalue().count("\r") == 3 and not later.pending
    bar.on_task_start("t2", 0)
    assert out.getvalue().count("\r") == 3  # too soon: the timer will
    assert len(later.pending) == 1
    bar.on_run_end(None)  # type: ignore[arg-type]
    assert not later.pending  # the run's end cancels it


class FakeTerminal(io.StringIO):
    """A StringIO that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _screen(text: str) -> list[str]:
    """The lines a terminal shows after ``text``: handles \\r, erase-to-end and \\n."""
    lines: list[str] = []
    line: list[str] = []
    cursor = 0
    i = 0
    while i < len(text):
        if text.startswith("\x1b[K", i):
            del line[cursor:]
            i += 3
            continue
        ch = text[i]
        if ch == "\r":
            cursor = 0
        elif ch == "\n":
            lines.append("".join(line))
            line, cursor = [], 0
        else:
            if cursor < len(line):
                line[cursor] = ch
            else:
                line.append(ch)
            cursor += 1
        i += 1
    if line:
        lines.append("".join(line))
    return lines


def test_log_lines_from_tasks_stay_whole_above_the_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    handler = logging.StreamHandler(terminal)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("test_progress.tasks")
    logger.addHandler(handler)
    logger.propagate = False
    try:

        def work(i: int) -> int:
            logger.warning("log line from task %d", i)
            # One write per line: print() writes the text and its newline
            # separately, and two threads' prints interleave between those two
            # writes with or without a bar (seen on free-threaded 3.13t).
            sys.stderr.write(f"printed by task {i}\n")
            return i

        g = Graph()
        for i in range(30):
            g.add(i, work, args=(i,))
        bar = ProgressBar(is_tty=True, min_interval=0.0)
        dagexec.run(g, workers=2, callbacks=[bar])
        assert handler.stream is terminal  # the proxies are gone after the run
        assert sys.stderr is terminal
    finally:
        logger.removeHandler(handler)
    screen = _screen(terminal.getvalue())
    expected = {f"log line from task {i}" for i in range(30)}
    expected |= {f"printed by task {i}" for i in range(30)}
    assert set(screen[:-1]) == expected  # every write is a whole line, no bar in it
    assert len(screen) == 61
    assert screen[-1].startswith("dagexec [########################] 30/30")


def test_a_partial_line_from_a_task_is_not_overwritten() -> None:
    terminal = FakeTerminal()
    clock = FakeClock()
    bar = ProgressBar(terminal, is_tty=True, min_interval=0.0, clock=clock)
    handler = logging.StreamHandler(terminal)
    logging.getLogger().addHandler(handler)
    try:
        bar.on_run_start(_plan(1))
        assert handler.stream is not terminal  # a proxy while the run shows
        handler.stream.write("no newline yet")
        bar.on_task_end("t0", TaskState.DONE, 0.1)
        bar.on_run_end(None)  # type: ignore[arg-type]
        assert handler.stream is terminal
    finally:
        logging.getLogger().removeHandler(handler)
    screen = _screen(terminal.getvalue())
    assert screen[0] == "no newline yet"
    assert screen[1].startswith("dagexec [")


def test_keep_logs_apart_false_leaves_streams_alone() -> None:
    terminal = FakeTerminal()
    handler = logging.StreamHandler(terminal)
    logging.getLogger().addHandler(handler)
    try:
        bar = ProgressBar(terminal, is_tty=True, keep_logs_apart=False)
        bar.on_run_start(_plan(1))
        assert handler.stream is terminal
        bar.on_run_end(None)  # type: ignore[arg-type]
    finally:
        logging.getLogger().removeHandler(handler)


def test_close_after_an_interrupt_shows_it_and_restores_the_streams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    bar = ProgressBar(is_tty=True, min_interval=10.0, clock=FakeClock())
    bar.on_run_start(_plan(4))
    assert sys.stderr is not terminal
    bar.on_task_end("t0", TaskState.DONE, 0.1)
    bar.close()  # what the command line does on Ctrl-C
    assert sys.stderr is terminal
    final = _screen(terminal.getvalue())[-1]
    assert "INTERRUPTED 1/4 done" in final and "[######------------------]" in final
    bar.close()  # a second close does nothing
    assert _screen(terminal.getvalue())[-1] == final


def test_an_abandoned_run_is_ended_by_the_next_write() -> None:
    """After Ctrl-C no hook runs; the first write through a proxy notices instead."""
    terminal = FakeTerminal()
    bar = ProgressBar(terminal, is_tty=True, min_interval=10.0, clock=FakeClock())
    handler = logging.StreamHandler(terminal)
    logging.getLogger().addHandler(handler)
    try:
        thread = threading.Thread(target=bar.on_run_start, args=(_plan(2),))
        thread.start()
        thread.join()  # the "scheduler" has gone without on_run_end
        handler.stream.write("after the interrupt\n")
        assert handler.stream is terminal
    finally:
        logging.getLogger().removeHandler(handler)
    screen = _screen(terminal.getvalue())
    assert "INTERRUPTED 0/2 done" in screen[0]
    assert screen[1] == "after the interrupt"


def test_progress_true_without_stderr_never_fails_a_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 8 item 11: pythonw and services have sys.stderr None."""
    monkeypatch.setattr("sys.stderr", None)
    g = Graph()
    g.add("a", lambda: 1)
    assert dagexec.run(g, workers=1, progress=True)["a"] == 1
    bar = ProgressBar(is_tty=True)  # forcing a terminal cannot make it write to None
    assert dagexec.run(g, workers=1, callbacks=[bar])["a"] == 1


def test_a_stream_that_fails_makes_the_bar_quiet_not_the_run() -> None:
    class Broken(FakeTerminal):
        def write(self, text: str) -> int:
            raise OSError(5, "Input/output error")

    g = Graph()
    g.add("a", lambda: 1)
    for tty in (True, False):
        bar = ProgressBar(Broken(), is_tty=tty, min_interval=0.0)
        assert dagexec.run(g, workers=1, callbacks=[bar])["a"] == 1


def test_progress_bar_is_public() -> None:
    assert dagexec.ProgressBar.__module__ == "dagexec"
    assert "ProgressBar" in dagexec.__all__


def test_close_on_a_log_stream_writes_an_interrupted_summary() -> None:
    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(out, clock=clock)
    bar.close()  # nothing running: nothing to say
    assert out.getvalue() == ""
    bar.on_run_start(_plan(3))
    bar.on_task_end("t0", TaskState.DONE, 0.1)
    clock.now += 2.0
    bar.close()
    assert out.getvalue() == (
        # The two the stopped run never reported are named: the counts add up.
        "dagexec: interrupted: 3 tasks: 1 done, 0 failed, 0 skipped, 0 cancelled, "
        "2 unfinished in 2.000 s\n"
    )


def test_a_new_bar_looks_through_a_proxy_an_interrupted_run_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    old = ProgressBar(is_tty=True, min_interval=10.0, clock=FakeClock())
    thread = threading.Thread(target=old.on_run_start, args=(_plan(1),))
    thread.start()
    thread.join()  # interrupted: no run end, the proxy is still in sys.stderr
    assert sys.stderr is not terminal
    new = ProgressBar(is_tty=True, min_interval=10.0, clock=FakeClock())
    assert sys.stderr is terminal  # the abandoned bar was ended and its proxy removed
    new.on_run_start(_plan(1))
    new.on_task_end("t0", TaskState.DONE, 0.1)
    new.on_run_end(None)  # type: ignore[arg-type]
    assert sys.stderr is terminal
    first, second = _screen(terminal.getvalue())
    assert "INTERRUPTED 0/1 done" in first
    assert second.startswith("dagexec [########################] 1/1")


def test_the_total_grows_as_maps_expand_and_the_bar_never_overflows() -> None:
    """A map of 30 items makes 30 more tasks than the plan's 3: the bar read
    33/3, and its line overflowed."""
    seen: list[tuple[object, int]] = []

    class Expansions:
        def on_map_expand(self, name: object, items: int) -> None:
            seen.append((name, items))

    g = dagexec.Graph()
    g.add("files", lambda: list(range(30)))
    g.map("rows", lambda f: f * 2, over="files")
    g.map("sizes", lambda r: r, over="rows")
    g.add("total", len, deps=["sizes"])
    bar = ProgressBar(io.StringIO(), is_tty=False)
    result = dagexec.run(g, callbacks=[bar, Expansions()])
    assert seen == [("rows", 30), ("sizes", 30)]
    assert bar.total == 64 == len(result.status) == result.stats.tasks_planned
    line = bar.line(0.0, final=True, width=None)
    full = f"[{'#' * BAR_CELLS}] 64/64"
    assert full in line
    # Even with a total that lags (a bar that missed an expansion), never past full.
    bar.total = 3
    assert full in bar.line(0.0, final=True)


def test_retry_and_timeout_hooks_report_each_attempt() -> None:
    """Retries and timeouts had no hook: a progress bar could not show them."""
    release = threading.Event()
    attempts = {"n": 0}

    def flaky() -> int:
        attempts["n"] += 1
        if attempts["n"] < 3:
            raise OSError("not yet")
        return 1

    def hangs() -> None:
        release.wait(60)

    events: list[tuple[str, object, int]] = []

    class Seen:
        def on_task_retry(self, name: object, attempt: int) -> None:
            events.append(("retry", name, attempt))

        def on_task_timeout(self, name: object, attempt: int) -> None:
            events.append(("timeout", name, attempt))
            release.set()  # let the timed-out attempt's thread return

    g = Graph()
    g.add("flaky", flaky, retries=3)
    g.add("hangs", hangs, timeout=0.05, retries=1)
    try:
        result = dagexec.run(g, callbacks=[Seen()], on_error="continue", workers=3)
    finally:
        release.set()
    assert sorted(e for e in events if e[1] == "flaky") == [
        ("retry", "flaky", 1),
        ("retry", "flaky", 2),
    ]
    # The hanging attempt timed out, then was retried (and returned: released).
    assert [e for e in events if e[1] == "hangs"] == [
        ("timeout", "hangs", 1),
        ("retry", "hangs", 1),
    ]
    assert result.status["hangs"] is TaskState.DONE


class _DrawTimes(io.StringIO):
    """A terminal stream that notes the clock's time of each redraw (a ``\\r``)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.times: list[float] = []

    def write(self, text: str) -> int:
        self.times.extend(self.clock.now for _ in range(text.count("\r")))
        return super().write(text)


def test_the_redraw_rate_stays_at_most_ten_a_second_with_many_workers() -> None:
    """Issue 23: a run of short tasks on several workers redrew ~18 times a second,
    where at most 10 are documented: each regular redraw caught some workers
    between two tasks, and their next starts each redrew at once."""
    clock = FakeClock()
    out = _DrawTimes(clock)
    bar = ProgressBar(out, is_tty=True, min_interval=0.1, clock=clock)
    workers, steps = 8, 400  # 8 workers, a task each per 10 ms, for 4 s
    bar.on_run_start(_plan(workers * steps))
    start = clock.now
    for step in range(steps):
        clock.now = start + step * 0.01
        for w in range(workers):
            bar.on_task_start(f"t{step * workers + w}", w)
        clock.now += 0.005
        for w in range(workers):
            bar.on_task_end(f"t{step * workers + w}", TaskState.DONE, 0.005)
    times = out.times
    assert len(times) >= 30  # it does keep drawing: about 10 a second for 4 s
    for i, t in enumerate(times):
        in_window = sum(1 for u in times[i:] if u < t + 1.0)
        assert in_window <= 10, (t, in_window)


def test_a_burst_of_long_tasks_at_the_start_still_shows_them_running() -> None:
    out, clock, later = io.StringIO(), FakeClock(), FakeLater()
    bar = ProgressBar(out, is_tty=True, min_interval=0.1, clock=clock)
    bar._later = later
    bar.on_run_start(_plan(4))
    for w in range(4):  # all start at once, and run for minutes: no later event
        bar.on_task_start(f"t{w}", w)
    clock.now += 0.1
    later.fire()  # the timer, min_interval after the first line
    assert "running 4" in _lines(out.getvalue())[-1]


def _map_plan() -> PlanInfo:
    """The plan of a graph of 7 tasks, one a map: the run grows by its items."""
    g = Graph()
    g.add("find", lambda: [])
    for i in range(5):
        g.add(f"setup{i}", lambda: None)
    g.map("files", lambda f: f, over="find")
    return plan_info(g)


def plan_info(g: Graph) -> PlanInfo:
    """What ``on_run_start`` gets for a run of ``g`` on 2 workers, its plan included."""
    from dagexec._core.plan import plan_run

    plan = plan_run(g._compile(), None)
    return PlanInfo(
        tasks=plan.names,
        targets=plan.target_names,
        workers=2,
        queue_cap=2,
        max_in_flight=4,
        effective_cap=4,
        _plan=plan,
    )


def _filled(line: str) -> int:
    return line.split("[", 1)[1].split("]", 1)[0].count("#")


def test_the_total_grows_without_the_bar_going_backwards() -> None:
    """Issue 23: the bar read 0/7, then 2/607 when the map expanded: from 2/7 of
    the bar filled back to none."""
    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(out, is_tty=True, min_interval=0.0, clock=clock)
    bar.on_run_start(_map_plan())
    assert "0/7+" in _lines(out.getvalue())[-1]  # the total is known to be a floor
    bar.on_task_end("setup0", TaskState.DONE, 0.1)
    clock.now += 1.0
    bar.on_task_end("find", TaskState.DONE, 0.1)
    before = _lines(out.getvalue())[-1]
    assert "2/7+" in before
    # The map's group has no rate yet (issue 32: it said ">0:02" from the others').
    assert "ETA unknown" in before
    bar.on_map_expand("files", 600)
    bar.on_task_end("setup1", TaskState.DONE, 0.1)
    fills = [_filled(before)]
    after = _lines(out.getvalue())[-1]
    assert "3/607 " in after  # every map expanded: no "+" any more
    fills.append(_filled(after))
    for i in range(600):
        bar.on_task_end(("files", i), TaskState.DONE, 0.001)
        fills.append(_filled(_lines(out.getvalue())[-1]))
    assert fills == sorted(fills)  # never backwards
    assert fills[1] == fills[0] > 0  # held still when the total grew
    assert fills[-1] < BAR_CELLS  # 603/607: not full before the end
    for name in ("setup2", "setup3", "setup4", "files"):
        bar.on_task_end(name, TaskState.DONE, 0.1)
    bar.on_run_end(None)  # type: ignore[arg-type]
    assert f"[{'#' * BAR_CELLS}]" in _lines(out.getvalue())[-1]


def test_retrying_and_timed_out_counts_are_shown() -> None:
    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(out, is_tty=True, min_interval=0.0, clock=clock)
    bar.on_run_start(_plan(3))
    bar.on_task_timeout("t0", 1)
    bar.on_task_retry("t0", 1)
    bar.on_task_retry("t1", 1)
    bar.on_task_start("t2", 0)
    line = _lines(out.getvalue())[-1]
    assert "retrying 2" in line
    assert "timed out 1" in line
    bar.on_task_end("t0", TaskState.DONE, 0.1)
    bar.on_task_retry("t1", 2)
    assert "retrying 1" in _lines(out.getvalue())[-1]
    bar.on_task_end("t1", TaskState.DONE, 0.1)
    bar.on_task_end("t2", TaskState.DONE, 0.1)
    bar.on_run_end(None)  # type: ignore[arg-type]
    final = _lines(out.getvalue())[-1]
    assert "retries 3" in final
    assert "timed out 1" in final
    log = io.StringIO()
    quiet = ProgressBar(log, is_tty=False)
    quiet.on_run_start(_plan(1))
    quiet.on_task_retry("t0", 1)
    quiet.on_task_timeout("t0", 1)
    quiet.on_task_end("t0", TaskState.DONE, 0.1)
    quiet.on_run_end(None)  # type: ignore[arg-type]
    assert ", 0 cancelled, 1 retries, 1 timed out in " in log.getvalue()
