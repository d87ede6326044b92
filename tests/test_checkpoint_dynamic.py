"""Checkpoints of map items, checkpoint=False tasks, and values that are never saved (issue 19)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import dagexec
from dagexec._persist.checkpoint import CheckpointStore

MAP_CHILD = Path(__file__).with_name("checkpoint_map_child.py")


class Calls:
    """The tasks that really ran, in order, thread-safely."""

    def __init__(self) -> None:
        self.names: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, name: Any) -> bool:
        """Record ``name``; False, so that ``calls(name) or value`` is the value."""
        with self.lock:
            self.names.append(name)
        return False

    def take(self) -> list[Any]:
        with self.lock:
            names, self.names = self.names, []
        return names


def _files(directory: Path, names: list[str]) -> None:
    for name in names:
        (directory / name).write_text(name * 3)


def _nightly(directory: Path, calls: Calls) -> dagexec.Graph:
    g = dagexec.Graph()

    def files() -> list[str]:
        calls("files")
        return sorted(os.listdir(directory))

    def parse(name: str) -> int:
        calls(("parse", name))
        return len((directory / name).read_text())

    def total(parsed: list[int]) -> int:
        calls("total")
        return sum(parsed)

    g.add("files", files, checkpoint=False)
    g.map("parsed", parse, over="files")
    g.add("total", total, deps=["parsed"])
    return g


# -- map items -------------------------------------------------------------------------


def test_a_new_file_runs_alone_and_the_others_load(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _files(data, ["b", "d"])
    path = tmp_path / "c.sqlite"
    calls = Calls()
    g = _nightly(data, calls)
    assert dagexec.run(g, ["total"], checkpoint=path)["total"] == 6
    assert sorted(map(str, calls.take())) == sorted(
        ["files", "('parse', 'b')", "('parse', 'd')", "total"]
    )
    _files(data, ["a"])  # sorts first: every index moves, no element does
    assert dagexec.run(g, ["total"], checkpoint=path)["total"] == 9
    # Today a stored total loads, so the lister never runs and the result is stale.
    assert calls.take() == ["files", ("parse", "a"), "total"]
    assert dagexec.run(g, ["total"], checkpoint=path)["total"] == 9
    assert calls.take() == ["files"]  # same files: the total loads again


def test_an_edit_to_the_map_function_reruns_every_item(tmp_path: Path) -> None:
    calls = Calls()
    path = tmp_path / "c.sqlite"

    def build(factor: int) -> dagexec.Graph:
        g = dagexec.Graph()
        g.add("xs", lambda: [1, 2, 3], checkpoint=False)
        g.map("ys", lambda x, k: calls(x) or x * k, over="xs", deps=["k"])
        g.add("k", lambda: factor)
        return g

    assert dagexec.run(build(2), ["ys"], checkpoint=path)["ys"] == [2, 4, 6]
    assert sorted(calls.take()) == [1, 2, 3]
    assert dagexec.run(build(2), ["ys"], checkpoint=path)["ys"] == [2, 4, 6]
    assert calls.take() == []
    # The map's extra dependency is part of its own identity: every item reruns.
    assert dagexec.run(build(5), ["ys"], checkpoint=path)["ys"] == [5, 10, 15]
    assert sorted(calls.take()) == [1, 2, 3]


def test_an_element_without_an_encoding_falls_back_to_its_index(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls = Calls()
    path = tmp_path / "c.sqlite"
    lock = threading.Lock()  # no encoding: cannot be pickled

    g = dagexec.Graph()
    g.add("xs", lambda: [lock, lock], checkpoint=False)
    g.map("ys", lambda x: calls("y") or 1, over="xs")
    with caplog.at_level(logging.WARNING, logger="dagexec"):
        assert dagexec.run(g, ["ys"], checkpoint=path)["ys"] == [1, 1]
    assert calls.take() == ["y", "y"]
    assert "stored by index" in caplog.text and "'ys'" in caplog.text
    assert dagexec.run(g, ["ys"], checkpoint=path)["ys"] == [1, 1]
    assert calls.take() == []


def test_map_checkpoint_false_stores_no_item(tmp_path: Path) -> None:
    calls = Calls()
    path = tmp_path / "c.sqlite"
    g = dagexec.Graph()
    g.add("xs", lambda: [1, 2])
    g.map("ys", lambda x: calls(x) or x, over="xs", checkpoint=False)
    g.add("s", lambda ys: calls("s") or sum(ys), deps=["ys"])
    assert dagexec.run(g, ["s"], checkpoint=path)["s"] == 3
    assert sorted(map(str, calls.take())) == ["1", "2", "s"]
    # The items run again; s loads, since their values are the same.
    assert dagexec.run(g, ["s"], checkpoint=path)["s"] == 3
    assert sorted(calls.take()) == [1, 2]


def test_after_a_real_sigint_the_rerun_runs_only_unfinished_items(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _files(data, ["f0", "f1", "f2", "f3", "f4"])
    path = str(tmp_path / "c.sqlite")
    child = subprocess.Popen(
        [sys.executable, str(MAP_CHILD), path, str(data)],
        env={**os.environ, "BLOCK": "f3"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        seen = []
        for line in child.stdout:
            seen.append(line.strip())
            if line.strip() == "BLOCK":
                break
        child.send_signal(signal.SIGINT)
        rest, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "INTERRUPTED" in rest, (seen, rest)
    assert seen[-2:] == ["RAN parse f3", "BLOCK"]
    _files(data, ["f5"])
    again = subprocess.run(
        [sys.executable, str(MAP_CHILD), path, str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    ran = again.stdout.splitlines()
    # f0-f2 finished before the SIGINT and load; f3 was running, f4 never started.
    assert ran == [
        "RAN files",
        "RAN parse f3",
        "RAN parse f4",
        "RAN parse f5",
        "RAN total",
        "TOTAL 36",
    ]


# -- checkpoint=False --------------------------------------------------------------------


def test_checkpoint_false_runs_every_time_and_downstream_loads_on_the_same_value(
    tmp_path: Path,
) -> None:
    calls = Calls()
    path = tmp_path / "c.sqlite"
    source = {"value": 1}
    g = dagexec.Graph()

    @g.task(checkpoint=False)
    def today() -> int:
        calls("today")
        return source["value"]

    g.add("double", lambda x: calls("double") or 2 * x, deps=["today"])
    assert dagexec.run(g, checkpoint=path)["double"] == 2
    assert calls.take() == ["today", "double"]
    assert dagexec.run(g, checkpoint=path)["double"] == 2
    assert calls.take() == ["today"]
    source["value"] = 5
    assert dagexec.run(g, checkpoint=path)["double"] == 10
    assert calls.take() == ["today", "double"]
    with CheckpointStore(path) as store:
        assert "today" not in {row for row in _stored_names(store)}


def _stored_names(store: CheckpointStore) -> list[str]:
    with store._read_lock:
        return [eval(r[0]) for r in store._reader.execute("SELECT name FROM dagexec_values")]


@pytest.mark.parametrize("bad", ["no", 0, None])
def test_checkpoint_must_be_a_bool(bad: object) -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=r"task 'a': checkpoint must be True or False"):
        g.add("a", len, args=("x",), checkpoint=bad)  # type: ignore[arg-type]
    assert "a" not in g
    with pytest.raises(TypeError, match="checkpoint must be True or False"):
        g.map("m", abs, over="a", checkpoint=bad)  # type: ignore[arg-type]


# -- never saved -------------------------------------------------------------------------


class _Seen(logging.Handler):
    """Sets ``event`` when a record containing ``text`` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


def test_a_value_returned_after_the_runs_stop_is_not_saved(tmp_path: Path) -> None:
    calls = Calls()
    path = tmp_path / "c.sqlite"
    started = threading.Event()
    fail = threading.Event()
    fail.set()

    def slow() -> str:
        calls("slow")
        started.set()
        # Returns early once the run stops: a partial value.
        stopped = dagexec.current_task().cancelled.wait(30)
        return "partial" if stopped else "full"

    def boom() -> int:
        started.wait(30)
        if fail.is_set():
            raise OSError("boom")
        return 1

    g = dagexec.Graph()
    g.add("slow", slow)
    g.add("boom", boom)
    with pytest.raises(OSError, match="boom"):
        dagexec.run(g, checkpoint=path, workers=2)
    assert calls.take() == ["slow"]
    with CheckpointStore(path) as store:
        assert _stored_names(store) == []  # today: 'partial' is stored, loaded next time


def test_a_value_returned_after_its_timeout_is_not_saved(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    seen = _Seen("not saved")
    logger = logging.getLogger("dagexec")
    logger.addHandler(seen)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    original = CheckpointStore.save_pickled_nowait

    def noticed(self: CheckpointStore, identity: bytes, data: bytes, **kw: Any) -> None:
        original(self, identity, data, **kw)
        if kw["name"] == "hang":
            seen.event.set()

    def hang() -> str:
        dagexec.current_task().cancelled.wait(30)  # set on its timeout
        return "partial"

    def keep_the_run_open() -> int:
        # Ends once 'hang' returned and its value was saved (today) or refused.
        assert seen.event.wait(30)
        return 1

    g = dagexec.Graph()
    g.add("hang", hang, timeout=0.05)
    g.add("open", keep_the_run_open)
    try:
        CheckpointStore.save_pickled_nowait = noticed  # type: ignore[method-assign]
        result = dagexec.run(g, checkpoint=path, workers=2, on_error="continue")
    finally:
        CheckpointStore.save_pickled_nowait = original  # type: ignore[method-assign]
        logger.removeHandler(seen)
        logger.setLevel(old_level)
    assert isinstance(result.errors["hang"], dagexec.TaskTimeout)
    with CheckpointStore(path) as store:
        assert _stored_names(store) == ["open"]


def test_a_cleanup_value_built_from_a_failed_dependency_is_not_saved(tmp_path: Path) -> None:
    calls = Calls()
    path = tmp_path / "c.sqlite"
    broken = threading.Event()
    broken.set()

    def flaky() -> int:
        calls("flaky")
        if broken.is_set():
            raise OSError("down")
        return 7

    def report(x: object) -> str:
        calls("report")
        return f"report of {x!r}"

    g = dagexec.Graph()
    g.add("flaky", flaky)
    g.add("report", report, deps=["flaky"], run_if="all_done")
    first = dagexec.run(g, checkpoint=path, on_error="continue")
    assert first["report"].startswith("report of OSError")
    broken.clear()
    second = dagexec.run(g, checkpoint=path, on_error="continue")
    # Today the report of the failure loads, and flaky never runs again.
    assert second["report"] == "report of 7"
    assert calls.take() == ["flaky", "report", "flaky", "report"]
    third = dagexec.run(g, checkpoint=path, on_error="continue")
    assert third["report"] == "report of 7"
    assert calls.take() == []


# -- meetings with other options ---------------------------------------------------------


def test_a_map_over_a_map_resumes_item_by_item(tmp_path: Path) -> None:
    calls = Calls()
    path = tmp_path / "c.sqlite"
    source = {"xs": [1, 2]}

    def build() -> dagexec.Graph:
        g = dagexec.Graph()
        g.add("xs", lambda: list(source["xs"]), checkpoint=False)
        g.map("sq", lambda x: calls(("sq", x)) or x * x, over="xs")
        g.map("neg", lambda y: calls(("neg", y)) or -y, over="sq")
        return g

    assert dagexec.run(build(), ["neg"], checkpoint=path)["neg"] == [-1, -4]
    assert len(calls.take()) == 4
    source["xs"] = [3, 1, 2]
    assert dagexec.run(build(), ["neg"], checkpoint=path)["neg"] == [-9, -1, -4]
    assert sorted(calls.take()) == [("neg", 9), ("sq", 3)]


def test_a_retried_map_item_is_saved_once_it_succeeds(tmp_path: Path) -> None:
    calls = Calls()
    path = tmp_path / "c.sqlite"

    def flaky(x: int) -> int:
        # What it closes over is part of its identity: calls holds a lock, so
        # only its type counts, and its changing contents do not.
        calls(x)
        with calls.lock:
            first = calls.names.count(x) == 1
        if first:
            raise OSError(f"flaky {x}")
        return x * 10

    g = dagexec.Graph()
    g.add("xs", lambda: [1, 2], checkpoint=False)
    g.map("ys", flaky, over="xs", retries=1, timeout=30)
    assert dagexec.run(g, ["ys"], checkpoint=path)["ys"] == [10, 20]
    assert sorted(calls.take()) == [1, 1, 2, 2]
    assert dagexec.run(g, ["ys"], checkpoint=path)["ys"] == [10, 20]
    assert calls.take() == []


def test_elements_are_encoded_on_the_workers_not_the_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dagexec._persist.savers as savers

    threads: list[str] = []
    real = savers.value_digest

    def spy(obj: object) -> bytes | None:
        threads.append(threading.current_thread().name)
        return real(obj)

    monkeypatch.setattr(savers, "value_digest", spy)
    g = dagexec.Graph()
    g.add("xs", lambda: list(range(5)), checkpoint=False)
    g.map("ys", abs, over="xs")
    dagexec.run(g, ["ys"], checkpoint=tmp_path / "c.sqlite", workers=2)
    assert len(threads) == 6  # the list, then each element
    assert all(name.startswith("dagexec-worker") for name in threads), threads


def test_downstream_of_an_empty_map_is_stored_too(tmp_path: Path) -> None:
    calls = Calls()
    path = tmp_path / "c.sqlite"
    g = dagexec.Graph()
    g.add("xs", lambda: [], checkpoint=False)
    g.map("ys", abs, over="xs")
    g.add("total", lambda ys: calls("total") or len(ys), deps=["ys"])
    assert dagexec.run(g, ["total"], checkpoint=path)["total"] == 0
    assert dagexec.run(g, ["total"], checkpoint=path)["total"] == 0
    assert calls.take() == ["total"]
