"""``logs=`` (issue 35): each task attempt's logging records, in ``result.logs``.

The rule checked throughout: a record the user's loggers would drop goes to the
capture only (the user's handlers never print more), and a record they would
print still reaches them, unchanged.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import dagexec
from dagexec import Executor, Graph, TaskLogs, TaskState
from dagexec._core.task_logs import RECORDS_PER_ATTEMPT
from dagexec._observation import capture

WAIT = 30.0  # a safety net for gates: a hang fails here, a pass never waits this long
log = logging.getLogger("app.tasks")
other = logging.getLogger("elsewhere")


class Keep(logging.Handler):
    """The user's own handler: what it was handed, as handed (args not formatted)."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []
        self.args: list[object] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.args.append(record.args)


@pytest.fixture
def user() -> Iterator[Keep]:
    """A handler on the root logger at WARNING, as a program's basicConfig leaves it."""
    root = logging.getLogger()
    handler, level = Keep(), root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


def messages(logs: tuple[TaskLogs, ...], attempt: int = 1) -> list[str]:
    (one,) = [a for a in logs if a.attempt == attempt]
    return [r.getMessage() for r in one.records]


def chatty() -> int:
    log.debug("debug %s", "never")
    log.info("info %s", "kept")
    log.warning("warning %d", 2)
    return 1


def test_records_are_kept_by_task_and_the_users_handlers_print_no_more(user: Keep) -> None:
    g = Graph()
    g.add("a", chatty)
    g.add("quiet", lambda x: x + 1, deps=["a"])
    result = dagexec.run(g, workers=2, logs=True)
    assert list(result.logs) == ["a"]  # 'quiet' logged nothing: absent
    assert messages(result.logs["a"]) == ["info kept", "warning 2"]
    (kept,) = result.logs["a"]
    assert kept.dropped == 0 and kept.attempt == 1
    assert all(r.args is None for r in kept.records)
    # The user's handler got the WARNING record only, as without logs=, with its
    # args as made (the capture formats a copy).
    assert [r.getMessage() for r in user.records] == ["warning 2"]
    assert user.args == [(2,)]
    assert result.logs.get("quiet", ()) == ()
    with pytest.raises(KeyError, match="logged nothing"):
        result.logs["quiet"]


def test_without_logs_nothing_is_kept_and_logging_is_not_wrapped(user: Keep) -> None:
    g = Graph()
    g.add("a", chatty)
    result = dagexec.run(g, workers=1)
    assert len(result.logs) == 0
    with pytest.raises(KeyError, match="logs=True"):
        result.logs["a"]
    assert [r.getMessage() for r in user.records] == ["warning 2"]
    assert logging.Logger.isEnabledFor.__module__ == "logging"
    dagexec.run(g, workers=1, logs=True)
    # Unwrapped after, unless an abandoned attempt of an earlier test still runs.
    assert logging.Logger.isEnabledFor.__module__ == "logging" or any(
        not done.is_set() for done in capture._lingering
    )


def test_a_user_level_below_the_captures_still_reaches_the_user(user: Keep) -> None:
    logging.getLogger("app").setLevel(logging.DEBUG)
    try:
        g = Graph()
        g.add("a", chatty)
        result = dagexec.run(g, workers=1, logs=True)
    finally:
        logging.getLogger("app").setLevel(logging.NOTSET)
    assert [r.getMessage() for r in user.records] == ["debug never", "info kept", "warning 2"]
    assert messages(result.logs["a"]) == ["info kept", "warning 2"]


@pytest.mark.parametrize(
    ("logs", "kept"),
    [
        ("DEBUG", ["debug never", "info kept", "warning 2", "other"]),
        ("debug", ["debug never", "info kept", "warning 2", "other"]),  # any case
        (logging.WARNING, ["warning 2", "other"]),
        ("app", ["info kept", "warning 2"]),
        ("app.tasks", ["info kept", "warning 2"]),
        ("elsewhere", ["other"]),
        ("app.task", []),  # a prefix of a name is not its parent
    ],
)
def test_a_level_or_a_logger_narrows_it(user: Keep, logs: object, kept: list[str]) -> None:
    def both() -> None:
        chatty()
        other.warning("other")

    g = Graph()
    g.add("a", both)
    result = dagexec.run(g, workers=1, logs=logs)  # type: ignore[arg-type]
    got = [r.getMessage() for t in result.logs.get("a", ()) for r in t.records]
    assert got == kept
    assert [r.getMessage() for r in user.records] == ["warning 2", "other"]


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (None, TypeError, "logs= must be True or False"),
        (1.5, TypeError, "logs= must be True or False"),
        ("", ValueError, "must not be empty"),
        (-1, ValueError, "must be >= 0"),
    ],
)
def test_bad_values_are_refused_before_anything_runs(
    value: object, error: type[Exception], match: str
) -> None:
    ran: list[int] = []
    g = Graph()
    g.add("a", lambda: ran.append(1))
    with pytest.raises(error, match=match):
        dagexec.run(g, workers=1, logs=value)  # type: ignore[arg-type]
    with Executor(workers=1) as ex, pytest.raises(error, match=match):
        ex.submit(g, logs=value)
    assert ran == []


def test_each_attempt_has_its_own_log_and_a_silent_attempt_none() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 2:
            log.info("second try")
            raise OSError("again")
        if len(calls) == 3:
            log.info("third try")
        if len(calls) < 3:
            raise OSError("flaky")
        return "ok"

    g = Graph()
    g.add("f", flaky, retries=2)
    result = dagexec.run(g, workers=1, logs=True)
    assert result["f"] == "ok"
    assert [a.attempt for a in result.logs["f"]] == [2, 3]  # the first said nothing
    assert messages(result.logs["f"], 2) == ["second try"]
    assert messages(result.logs["f"], 3) == ["third try"]


def test_the_cap_keeps_the_first_and_the_last_and_counts_the_rest() -> None:
    n = RECORDS_PER_ATTEMPT + 250

    def loud() -> None:
        for i in range(n):
            log.info("line %d", i)

    g = Graph()
    g.add("loud", loud)
    (kept,) = dagexec.run(g, workers=1, logs=True).logs["loud"]
    assert len(kept.records) == RECORDS_PER_ATTEMPT and kept.dropped == 250
    lines = [int(r.getMessage().split()[1]) for r in kept.records]
    half = RECORDS_PER_ATTEMPT // 2
    assert lines == [*range(half), *range(n - half, n)]


class Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("not me")

    def __repr__(self) -> str:
        return "<Unpicklable>"


def test_records_pickle_whatever_their_args_extras_and_exceptions() -> None:
    def task() -> None:
        log.info("arg %s", Unpicklable(), extra={"thing": Unpicklable(), "n": 3})
        try:
            raise RuntimeError("inside")
        except RuntimeError:
            log.exception("caught")
        log.info("bad format %d", "x")  # the user's bug: kept, said so

    g = Graph()
    g.add("t", task)
    result = dagexec.run(g, workers=1, logs=True)
    back = pickle.loads(pickle.dumps(result))
    first, caught, bad = back.logs["t"][0].records
    assert first.getMessage() == "arg <Unpicklable>"
    assert first.thing == "<Unpicklable>" and first.n == 3
    assert caught.exc_info is None and "RuntimeError: inside" in (caught.exc_text or "")
    assert "could not format" in bad.getMessage()
    assert logging.Formatter().format(caught).endswith("RuntimeError: inside")
    assert list(back.logs) == ["t"]
    assert messages(back.logs["t"]) == messages(result.logs["t"])


def test_a_result_pickled_before_logs_existed_loads_with_none() -> None:
    g = Graph()
    g.add("x", int)
    fresh = dagexec.run(g, workers=1)
    _, state = fresh.__getstate__()
    del state["logs"]  # what an older version pickled
    old = dagexec.RunResult.__new__(dagexec.RunResult)
    old.__setstate__((None, state))
    assert old["x"] == 0 and len(old.logs) == 0


def test_other_threads_are_not_captured_nor_made_to_print(user: Keep) -> None:
    inside, outside = threading.Event(), threading.Event()

    def task() -> None:
        inside.set()
        assert outside.wait(WAIT)
        log.info("mine")

    def bystander() -> None:
        assert inside.wait(WAIT)
        log.info("not a task's")  # below the user's level: made by nobody
        other.warning("a bystander's warning")
        outside.set()

    thread = threading.Thread(target=bystander)
    thread.start()
    g = Graph()
    g.add("t", task)
    result = dagexec.run(g, workers=1, logs=True)
    thread.join()
    assert messages(result.logs["t"]) == ["mine"]
    assert [r.getMessage() for r in user.records] == ["a bystander's warning"]


def test_chains_maps_cleanup_and_submit_each_task_its_own() -> None:
    def step(x: int) -> int:
        log.info("step %d", x)
        return x + 1

    def items(n: int) -> list[int]:
        return list(range(n))

    def item(i: int) -> int:
        log.info("item %d", i)
        return i

    def tidy(*_: object) -> None:
        log.info("tidy")

    g = Graph()
    g.add("s0", lambda: 0)
    g.add("s1", step, deps=["s0"])
    g.add("s2", step, deps=["s1"])
    g.add("n", lambda: 2)
    g.add("src", items, deps=["n"])
    g.map("m", item, over="src")
    g.add("tidy", tidy, deps=["s2", "m"], run_if="all_done")
    with Executor(workers=2) as ex:
        result = ex.submit(g, logs=True).result(timeout=WAIT)
        again = ex.run(g, logs="WARNING")
    assert messages(result.logs["s1"]) == ["step 0"]
    assert messages(result.logs["s2"]) == ["step 1"]
    assert messages(result.logs[("m", 1)]) == ["item 1"]
    assert messages(result.logs["tidy"]) == ["tidy"]
    assert len(again.logs) == 0


def test_a_timed_out_attempt_logs_into_its_attempt_then_is_only_counted() -> None:
    gate, done = threading.Event(), threading.Event()

    def slow() -> None:
        log.info("before")
        gate.wait(WAIT)  # times out here; the run ends without it
        log.info("after the run")
        log.info("after the run, again")
        done.set()

    g = Graph()
    g.add("slow", slow, timeout=0.05)
    g.add("other", lambda: 1)
    try:
        result = dagexec.run(g, workers=2, logs=True, on_error="continue")
        assert result.status["slow"] is TaskState.FAILED and result.stats.abandoned == 1
        (attempt,) = result.logs["slow"]
        assert messages(result.logs["slow"]) == ["before"] and attempt.dropped == 0
    finally:
        gate.set()
    assert done.wait(WAIT)
    (attempt,) = result.logs["slow"]
    assert [r.getMessage() for r in attempt.records] == ["before"]
    assert attempt.dropped == 2  # logged after its run had ended: counted


def test_dask_run_on_refuses_logs_by_name() -> None:
    pytest.importorskip("dask", reason="needs the dask extra")
    from dagexec._integrations.dask_translate import check_run_options

    with pytest.raises(TypeError, match="logs="):
        check_run_options({"logs": True})
    check_run_options({"logs": False})


def test_process_tasks_stream_their_records_as_they_log(user: Keep) -> None:
    """isolate="process": the child sends each record as it is made; its own
    handlers print what they printed before (WARNING, on the child's stderr)."""
    import process_tasks

    g = Graph()
    g.add("child", process_tasks.log_lines, args=(3,), isolate="process")
    g.add("quiet", process_tasks.square, args=(2,), isolate="process")
    g.add("a", chatty)
    result = dagexec.run(g, workers=2, logs=True)
    assert result["child"] == 3 and result["quiet"] == 4
    kept = messages(result.logs["child"])
    assert kept == ["child line 0", "child line 1", "child line 2", "child warning"]
    (record,) = [r for r in result.logs["child"][0].records if r.levelname == "WARNING"]
    assert record.name == "child.task" and record.args is None and record.process != 0
    assert "quiet" not in result.logs
    assert messages(result.logs["a"]) == ["info kept", "warning 2"]
    only = dagexec.run(g, workers=2, logs="WARNING")  # the same children, told anew
    assert messages(only.logs["child"]) == ["child warning"]
    none = dagexec.run(g, workers=2)
    assert len(none.logs) == 0


def test_a_killed_childs_last_lines_are_kept() -> None:
    import process_tasks

    g = Graph()
    g.add("dies", process_tasks.log_then_die, isolate="process")
    g.add("hangs", process_tasks.log_then_hang, isolate="process", timeout=1.0)
    result = dagexec.run(g, workers=2, logs=True, on_error="continue")
    assert isinstance(result.errors["dies"], dagexec.WorkerCrashed)
    assert isinstance(result.errors["hangs"], dagexec.TaskTimeout)
    assert messages(result.logs["dies"]) == ["about to die", "last words"]
    assert messages(result.logs["hangs"]) == ["hanging now"]


def test_a_process_task_logging_without_pause_still_hears_the_runs_stop() -> None:
    """Its records arrive faster than the worker's look at the stop token: the
    worker looks all the same every tick, kills the child and ends the run (it
    used to run the task to its end, HOLD_SECONDS, first)."""
    import process_tasks

    g = Graph()
    g.add("chatty", process_tasks.log_without_pause, isolate="process")
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        dagexec.run(g, workers=1, logs=True, timeout=0.5)
    assert time.monotonic() - began < process_tasks.HOLD_SECONDS / 2


def test_a_run_stopped_by_its_timeout_unwraps_logging_once_its_tasks_end() -> None:
    gate, entered = threading.Event(), threading.Event()

    def held() -> None:
        log.info("held")
        entered.set()
        gate.wait(WAIT)

    g = Graph()
    g.add("held", held)
    ex = Executor(workers=1)
    try:
        future = ex.submit(g, logs=True, timeout=0.2)
        assert entered.wait(WAIT)
        with pytest.raises(TimeoutError):
            future.result(timeout=WAIT)
    finally:
        gate.set()
        ex.shutdown(wait=True)
    # Unwrapped, unless an abandoned attempt of an earlier test still runs.
    lingering = any(not done.is_set() for done in capture._lingering)
    assert logging.Logger.isEnabledFor.__module__ == "logging" or lingering
    assert logging.Logger.handle.__module__ == "logging" or lingering
