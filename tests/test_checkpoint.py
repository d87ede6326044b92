"""The checkpoint store: round trips, errors named, damage survived, no thread leaked,
and every value reported committed survives SIGKILL."""

from __future__ import annotations

import gc
import logging
import os
import pickle
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from checkpoint_crash_child import chain

from dagexec._core.errors import CheckpointError
from dagexec._persist.checkpoint import CheckpointStore
from dagexec._persist.checkpoint_values import pickle_value
from dagexec.testing import run_in_thread

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "checkpoint_crash_child.py"


def ident(i: int) -> bytes:
    return i.to_bytes(16, "big")


class Unpicklable:
    def __reduce__(self) -> object:
        raise TypeError("no pickling today")


class HostileName:
    def __repr__(self) -> str:
        raise RuntimeError("repr refused")

    def __hash__(self) -> int:
        return 1


# -- round trips ------------------------------------------------------------------


def test_values_round_trip_and_are_reported_committed_once(tmp_path: Path) -> None:
    reported: list[bytes] = []
    values = {ident(i): v for i, v in enumerate([None, 0, "x", b"\0" * 1_000_000, {"a": [1]}])}
    with CheckpointStore(tmp_path / "c.sqlite", on_commit=reported.extend) as store:
        for identity, value in values.items():
            store.save_nowait(identity, value, name=("task", identity[-1]))
        assert store.flush(timeout=10)
        assert store.committed_count == len(values)
        assert sorted(reported) == sorted(values)
        assert store.load_many(values) == values
        assert store.load(ident(0)) is None  # a stored None is not "missing"
        assert store.stored([*values, ident(99)]) == set(values)
        assert len(store) == len(values)
    with CheckpointStore(tmp_path / "c.sqlite") as again:
        assert again.load_many(values) == values


def test_missing_values_are_absent_not_errors(tmp_path: Path) -> None:
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        with pytest.raises(KeyError):
            store.load(ident(1))
        assert store.load_many(ident(i) for i in range(2000)) == {}  # several IN chunks
        assert store.stored([]) == set()


def test_an_uncommitted_row_is_never_read(tmp_path: Path) -> None:
    """Another writer's open transaction is invisible until it commits."""
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        other = sqlite3.connect(tmp_path / "c.sqlite", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        row = (ident(1), "'t'", 1, 0.0, b"0" * 16, pickle.dumps(1))
        other.execute("INSERT INTO dagexec_values VALUES (?, ?, ?, ?, ?, ?)", row)
        assert store.stored([ident(1)]) == set()
        with pytest.raises(KeyError):
            store.load(ident(1))
        other.execute("ROLLBACK")
        other.close()


def test_saving_again_replaces_the_value(tmp_path: Path) -> None:
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        store.save_nowait(ident(1), "old", name="t")
        store.save_nowait(ident(1), "new", name="t")
        store.flush()
        assert store.load(ident(1)) == "new"
        assert len(store) == 1


def test_the_value_is_snapshotted_when_saved(tmp_path: Path) -> None:
    """A task mutating its argument later must not change the checkpointed value."""
    value = [1, 2]
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        store.save_nowait(ident(1), value, name="t")
        value.append(3)
        store.flush()
        assert store.load(ident(1)) == [1, 2]


def test_pickled_bytes_can_be_saved_from_another_thread(tmp_path: Path) -> None:
    """The engine's path: pickle on a worker thread, queue the bytes from anywhere."""
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        data = run_in_thread(pickle_value, {"v": 1}, "t").result(timeout=10)
        store.save_pickled_nowait(ident(1), data, name="t")
        store.flush()
        assert store.load(ident(1)) == {"v": 1}


def test_saving_never_waits_for_a_stuck_writer(tmp_path: Path) -> None:
    """The scheduler's promise: with the writer held, saves still return at once."""
    entered, release = threading.Event(), threading.Event()

    def hold(identities: list[bytes]) -> None:
        entered.set()
        assert release.wait(timeout=10)

    with CheckpointStore(tmp_path / "c.sqlite", on_commit=hold) as store:
        store.save_nowait(ident(0), 0, name=0)
        assert entered.wait(timeout=10)  # the writer is now stuck in on_commit
        for i in range(1, 1001):
            store.save_nowait(ident(i), i, name=i)
        assert store.committed_count == 1
        backlog = sum(len(pickle_value(i, i)) for i in range(1, 1001))
        assert store.pending_bytes == backlog  # observable, since it is unbounded
        release.set()
        assert store.flush(timeout=10)
        assert store.committed_count == 1001
        assert store.pending_bytes == 0
        assert store.peak_pending_bytes >= backlog


def test_many_threads_saving_at_once_lose_nothing(tmp_path: Path) -> None:
    threads, per_thread = 4, 250
    start = threading.Barrier(threads, timeout=10)
    with CheckpointStore(tmp_path / "c.sqlite") as store:

        def save(t: int) -> None:
            start.wait()
            for i in range(per_thread):
                store.save_nowait(ident(t * per_thread + i), i, name=i)

        futures = [run_in_thread(save, t) for t in range(threads)]
        for f in futures:
            f.result(timeout=30)
        store.flush()
        assert store.committed_count == threads * per_thread
        assert len(store.stored(ident(i) for i in range(threads * per_thread))) == 1000


# -- errors are named ---------------------------------------------------------------


def test_an_unpicklable_value_names_the_task_and_queues_nothing(tmp_path: Path) -> None:
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        with pytest.raises(CheckpointError, match=r"task 'parse' returned a Unpicklable") as info:
            store.save_nowait(ident(1), Unpicklable(), name="parse")
        assert info.value.task == "parse"
        assert isinstance(info.value.__cause__, TypeError)
        with pytest.raises(CheckpointError, match="repr\\(\\) raised"):
            store.save_nowait(ident(2), threading.Lock(), name=HostileName())
        store.save_nowait(ident(3), "fine", name="ok")  # the store still works
        store.flush()
        assert store.stored([ident(1), ident(2), ident(3)]) == {ident(3)}


def test_hostile_name_is_stored_with_a_placeholder(tmp_path: Path) -> None:
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        store.save_nowait(ident(1), 1, name=HostileName())
        store.flush()
    with sqlite3.connect(tmp_path / "c.sqlite") as db:
        (name,) = db.execute("SELECT name FROM dagexec_values").fetchone()
    db.close()
    assert "HostileName" in name


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_an_in_memory_path_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="checkpoint path must be a file"):
        CheckpointStore(path)


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(CheckpointError, match="not a dagexec checkpoint"):
        CheckpointStore(path)


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot open checkpoint .*nowhere"):
        CheckpointStore(tmp_path / "nowhere" / "c.sqlite")


def test_another_format_version_is_refused(tmp_path: Path) -> None:
    CheckpointStore(tmp_path / "c.sqlite").close()
    with sqlite3.connect(tmp_path / "c.sqlite") as db:
        db.execute("UPDATE dagexec_meta SET value = '999' WHERE key = 'format'")
    db.close()
    with pytest.raises(CheckpointError, match="has format '999'"):
        CheckpointStore(tmp_path / "c.sqlite")


def test_an_identity_that_is_not_bytes_is_refused(tmp_path: Path) -> None:
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        with pytest.raises(TypeError, match="task 't': identity must be bytes .* got NoneType"):
            store.save_nowait(None, 1, name="t")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="got str"):
            store.load_many(["ab"])  # type: ignore[list-item]


def test_saving_after_close_is_an_error_and_close_is_idempotent(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "c.sqlite")
    store.close()
    store.close()
    with pytest.raises(CheckpointError, match="is closed"):
        store.save_nowait(ident(1), 1, name="late")
    assert store.flush(timeout=1)


def test_a_failed_write_reaches_on_error_naming_the_tasks(tmp_path: Path) -> None:
    errors: list[CheckpointError] = []
    with CheckpointStore(tmp_path / "c.sqlite", on_error=errors.append) as store:
        with sqlite3.connect(tmp_path / "c.sqlite") as db:
            db.execute("DROP TABLE dagexec_values")  # every write now fails
        db.close()
        store.save_nowait(ident(1), 1, name="parse")
        store.flush()
        assert store.committed_count == 0
    assert len(errors) == 1
    assert errors[0].task == "parse"
    assert "could not save the value of task 'parse'" in str(errors[0])
    assert isinstance(errors[0].__cause__, sqlite3.Error)


def test_a_value_too_big_for_sqlite_is_refused_at_once(tmp_path: Path) -> None:
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        store._writer.max_value = 1000  # SQLite's own limit is about 1 GB
        with pytest.raises(
            CheckpointError, match=r"task 'big': its pickled value is 2,0\d\d bytes"
        ):
            store.save_nowait(ident(1), b"x" * 2000, name="big")


def test_a_value_sqlite_refuses_fails_alone_not_its_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's connection refuses values over 5,000 bytes; the batch is
    [small, big, small] (held together by a gate); only 'big' is lost."""
    import dagexec._persist.checkpoint_writer as module

    connect = module.connect

    def small_limit(path: str) -> sqlite3.Connection:
        conn = connect(path)
        if threading.current_thread().name == "dagexec-checkpoint-writer":
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 5000)
        return conn

    monkeypatch.setattr(module, "connect", small_limit)
    entered, release = threading.Event(), threading.Event()
    errors: list[CheckpointError] = []

    def hold(identities: list[bytes]) -> None:
        entered.set()
        assert release.wait(timeout=10)

    with CheckpointStore(tmp_path / "c.sqlite", on_commit=hold, on_error=errors.append) as store:
        store.save_nowait(ident(0), 0, name="first")
        assert entered.wait(timeout=10)
        store.save_nowait(ident(1), "small", name="a")
        store.save_nowait(ident(2), b"x" * 10_000, name="big")
        store.save_nowait(ident(3), "small", name="b")
        release.set()
        store.flush(timeout=10)
        assert store.stored(ident(i) for i in range(4)) == {ident(0), ident(1), ident(3)}
        assert (store.committed_count, store.failed_count) == (3, 1)
        assert store.pending_bytes == 0
    assert [e.task for e in errors] == ["big"]


def test_a_writer_that_cannot_start_fails_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dagexec._persist.checkpoint_writer as module

    connect = module.connect

    def refuse_writer(path: str) -> sqlite3.Connection:
        if threading.current_thread().name == "dagexec-checkpoint-writer":
            raise sqlite3.OperationalError("disk I/O error")
        return connect(path)

    monkeypatch.setattr(module, "connect", refuse_writer)
    store = CheckpointStore(tmp_path / "c.sqlite")
    store._writer.thread.join(timeout=10)
    assert store.flush(timeout=10)  # never hangs on a dead writer
    with pytest.raises(CheckpointError, match=r"is closed; its writer failed \(OperationalError"):
        store.save_nowait(ident(1), 1, name="t")
    with pytest.raises(CheckpointError, match="the writer thread failed .*disk I/O error"):
        store.close()


def test_without_on_error_close_raises_the_first_write_error(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "c.sqlite")
    with sqlite3.connect(tmp_path / "c.sqlite") as db:
        db.execute("DROP TABLE dagexec_values")
    db.close()
    store.save_nowait(ident(1), 1, name="parse")
    with pytest.raises(CheckpointError, match="'parse'"):
        store.close()
    store.close()  # reported once


def test_an_on_commit_error_is_raised_by_close(tmp_path: Path) -> None:
    def boom(identities: list[bytes]) -> None:
        raise ValueError("callback broke")

    store = CheckpointStore(tmp_path / "c.sqlite", on_commit=boom)
    store.save_nowait(ident(1), 1, name="t")
    with pytest.raises(CheckpointError, match="on_commit raised ValueError: callback broke"):
        store.close()
    with CheckpointStore(tmp_path / "c.sqlite") as again:
        assert again.load(ident(1)) == 1  # the value itself was committed


def test_flush_from_the_writer_thread_is_refused(tmp_path: Path) -> None:
    seen: list[BaseException] = []
    holder: list[CheckpointStore] = []

    def on_commit(identities: list[bytes]) -> None:
        try:
            holder[0].flush()
        except RuntimeError as exc:
            seen.append(exc)

    with CheckpointStore(tmp_path / "c.sqlite", on_commit=on_commit) as store:
        holder.append(store)
        store.save_nowait(ident(1), 1, name="t")
        store.flush()
    assert len(seen) == 1 and "wait for itself" in str(seen[0])


# -- damage is survived ---------------------------------------------------------------


def test_a_damaged_value_is_missing_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        store.save_nowait(ident(1), "good", name="kept")
        store.save_nowait(ident(2), "x" * 100, name="bitrot")
        store.flush()
    with sqlite3.connect(tmp_path / "c.sqlite") as db:
        (data,) = db.execute(
            "SELECT value FROM dagexec_values WHERE name = ?", ("'bitrot'",)
        ).fetchone()
        flipped = data[:-5] + bytes([data[-5] ^ 1]) + data[-4:]  # still unpickles, wrongly
        db.execute("UPDATE dagexec_values SET value = ? WHERE name = ?", (flipped, "'bitrot'"))
    db.close()
    with (
        caplog.at_level(logging.WARNING, logger="dagexec"),
        CheckpointStore(tmp_path / "c.sqlite") as store,
    ):
        assert store.load_many([ident(1), ident(2)]) == {ident(1): "good"}
        with pytest.raises(KeyError):
            store.load(ident(2))
    assert "task 'bitrot' is damaged" in caplog.text


def test_a_value_that_no_longer_unpickles_is_missing_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gone = pickle.dumps(1)[:2] + b"\x8c\x0fno_such_module_\x94\x8c\x01X\x94\x93\x94."
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        store.save_pickled_nowait(ident(1), gone, name="renamed")
        store.flush()
        with caplog.at_level(logging.WARNING, logger="dagexec"):
            assert store.load_many([ident(1)]) == {}
    assert "task 'renamed' cannot be unpickled (ModuleNotFoundError" in caplog.text


# -- no thread is leaked ----------------------------------------------------------------


def test_a_store_dropped_without_close_stops_its_writer_and_keeps_values(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "c.sqlite")
    writer = store._writer.thread
    for i in range(100):
        store.save_nowait(ident(i), i, name=i)
    del store
    gc.collect()
    writer.join(timeout=10)
    assert not writer.is_alive()
    with CheckpointStore(tmp_path / "c.sqlite") as again:
        assert len(again) == 100


def test_ctrl_c_inside_the_block_still_writes_and_joins(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), CheckpointStore(tmp_path / "c.sqlite") as store:
        store.save_nowait(ident(1), "saved before ^C", name="t")
        writer = store._writer.thread
        raise KeyboardInterrupt
    assert not writer.is_alive()
    with CheckpointStore(tmp_path / "c.sqlite") as again:
        assert again.load(ident(1)) == "saved before ^C"


def test_a_store_left_open_at_exit_writes_what_was_queued(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    code = (
        "from dagexec._persist.checkpoint import CheckpointStore\n"
        f"s = CheckpointStore({str(path)!r})\n"
        "for i in range(50): s.save_nowait(i.to_bytes(16, 'big'), i, name=i)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
    with CheckpointStore(path) as store:
        assert len(store) == 50


def test_a_store_closing_on_a_daemon_thread_at_exit_writes_what_was_queued(
    tmp_path: Path,
) -> None:
    # A run's driver closes its store on a daemon thread; after Ctrl-C the caller
    # may raise and the process exit while that close() waits for the writer.
    # Today close() detached the exit-time finalizer first, so the interpreter
    # killed the daemon writer mid-way and values of finished tasks were lost
    # (the nightly job's rerun ran items that had ended DONE before the Ctrl-C).
    path = tmp_path / "c.sqlite"
    code = (
        "import threading\n"
        "from dagexec._persist.checkpoint import CheckpointStore\n"
        f"s = CheckpointStore({str(path)!r})\n"
        "big = bytes(256 * 1024)\n"
        "for i in range(200): s.save_nowait(i.to_bytes(16, 'big'), big, name=i)\n"
        "threading.Thread(target=s.close, daemon=True).start()\n"
        "w = s._writer\n"
        "while True:\n"  # gated on the store's own flag, not a sleep
        "    with w.lock:\n"
        "        if w.closed: break\n"
        "# exits now, with close() still waiting for the writer\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
    with CheckpointStore(path) as store:
        assert len(store) == 200


# -- crash safety: SIGKILL at many points, then resume ----------------------------------


def _kill_after(
    path: Path, count: int, commits: int, durable: bool, *, kill_late: bool = False
) -> tuple[list[str], bool]:
    """Run the child until it reported ``commits`` commits (or ended), SIGKILL it.

    Returns the lines it printed and whether it ended on its own. Its progress is
    read from its output, never guessed with a sleep. The kill can come too late:
    after its last commit the child may close the store, print END and exit before
    the signal lands (``kill_late`` makes that happen, for the test of this
    helper). So the rest of its output is read after the kill: a child that exit
    cleanly must have printed END, otherwise it must have died of the SIGKILL.
    """
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(path), str(count), "1" if durable else "0"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    seen: list[str] = []
    left = commits
    assert proc.stdout is not None
    with proc.stdout:
        for line in proc.stdout:
            seen.append(line.strip())
            left -= line.startswith("COMMITTED")
            if left <= 0:
                if kill_late:
                    proc.wait(timeout=60)
                proc.send_signal(signal.SIGKILL)  # a no-op once it has exited
                break
        # What it printed before the signal landed (EOF at once after a kill).
        seen.extend(line.strip() for line in proc.stdout)
        proc.wait(timeout=60)
    ended = bool(seen) and seen[-1] == "END"
    if proc.returncode == 0:
        assert ended, ("a clean exit without END", seen[-3:])
    else:
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, seen[-3:])
    return seen, ended


def test_a_kill_that_comes_after_the_child_exited_is_an_end(tmp_path: Path) -> None:
    # Today _kill_after stopped reading at the last COMMITTED line, so a child that
    # had already exited cleanly was neither "ended" nor killed, and the test failed.
    lines, ended = _kill_after(tmp_path / "c.sqlite", 4, 4, False, kill_late=True)
    assert ended, lines
    assert sum(line.startswith("COMMITTED") for line in lines) == 4, lines


def _check_file(path: Path, expected: dict[bytes, bytes], committed: set[bytes]) -> int:
    """Every committed value is there and right; every row is whole; the file is sound."""
    with CheckpointStore(path) as store:  # opens after a crash: WAL recovery
        with store._read_lock:
            rows = [r[0] for r in store._reader.execute("SELECT identity FROM dagexec_values")]
            (check,) = store._reader.execute("PRAGMA integrity_check").fetchone()
        assert check == "ok"
        loaded = store.load_many(rows)
    assert set(loaded) == set(rows), "a stored row did not load back whole"
    assert committed <= set(loaded), "a value reported committed was lost"
    for identity, value in loaded.items():
        assert value == expected[identity], "a stored value differs from the task's value"
    return len(loaded)


def test_sigkill_at_many_points_loses_nothing_committed_and_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    count = 100
    ids, values = chain(count)
    expected = {i: v for i, v in zip(ids, values, strict=True) if i is not None}
    path = tmp_path / "c.sqlite"
    committed: set[bytes] = set()
    rng = random.Random(os.environ.get("DAGEXEC_CRASH_SEED", "10"))
    rounds = 0
    with caplog.at_level(logging.WARNING, logger="dagexec"):
        for rounds in range(1, 40):
            lines, ended = _kill_after(path, count, rng.randint(0, 12), rounds % 2 == 0)
            assert lines[0].startswith("START")
            for line in lines[1:]:
                kind, _, text = line.partition(" ")
                if kind == "RAN":
                    assert bytes.fromhex(text) not in committed, "a committed task ran again"
                elif kind == "COMMITTED":
                    committed.add(bytes.fromhex(text))
            stored = _check_file(path, expected, committed)
            if ended:
                break
        else:
            pytest.fail(f"the chain never finished; {stored} of {count} stored")
    assert stored == count
    assert committed, "no kill came after a commit"
    print(f"{rounds} runs, {rounds - 1} killed; {len(committed)} commits seen")
    assert rounds >= 5, "too few kills to mean anything; raise the kill points' spread"
    assert "damaged" not in caplog.text and "cannot be unpickled" not in caplog.text
