"""Checkpoint files: private (0600), refused when others could write them, and clear
errors for damaged, foreign and read-only files (issue 19)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from pathlib import Path

import pytest

import dagexec
from dagexec._persist.checkpoint import CheckpointStore

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
posix_only = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")


def _graph() -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("a", lambda: "a" * 500)
    g.add("b", lambda a: a + "b", deps=["a"])
    return g


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_checkpoint_error_is_public_and_a_dagexec_error() -> None:
    assert "CheckpointError" in dagexec.__all__
    assert issubclass(dagexec.CheckpointError, dagexec.DagexecError)


@posix_only
def test_a_new_checkpoint_and_its_wal_and_shm_are_private(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    old = os.umask(0o022)  # the usual umask, which would give 0644
    try:
        with CheckpointStore(path) as store:
            store.save_nowait(b"\0" * 16, 1, name="a")
            assert store.flush(30)
            companions = [Path(f"{path}{s}") for s in ("-wal", "-shm")]
            assert all(p.exists() for p in companions)
            assert [_mode(p) for p in (path, *companions)] == [0o600, 0o600, 0o600]
    finally:
        os.umask(old)


@posix_only
@pytest.mark.parametrize("suffix", ["", "-wal"])
def test_a_file_others_can_write_is_refused_before_it_is_read(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / "c.sqlite"
    dagexec.run(_graph(), checkpoint=path)
    target = Path(f"{path}{suffix}")
    target.touch()
    os.chmod(target, 0o666)
    with pytest.raises(dagexec.CheckpointError) as info:
        dagexec.run(_graph(), checkpoint=path)
    text = str(info.value)
    assert f"{str(target)!r} is writable by group and others" in text
    assert "unpickles" in text and "chmod 600" in text
    assert info.value.path == str(path)


@posix_only
@pytest.mark.skipif(not ROOT, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    dagexec.run(_graph(), checkpoint=path)
    os.chown(path, 12345, -1)
    with pytest.raises(dagexec.CheckpointError, match=r"belongs to another user \(uid 12345"):
        dagexec.run(_graph(), checkpoint=path)


def test_a_sqlite_file_of_something_else_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    os.chmod(path, 0o600)
    with pytest.raises(
        dagexec.CheckpointError, match=r"SQLite database of something else \(tables: users\)"
    ):
        dagexec.run(_graph(), checkpoint=path)
    with (
        contextlib.closing(sqlite3.connect(path)) as conn,
        conn,
    ):  # today: our tables are added to it
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
    assert tables == ["users"]


@pytest.mark.skipif(ROOT, reason="root may write a read-only file")
def test_a_healthy_read_only_file_is_called_read_only_not_damaged(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    dagexec.run(_graph(), checkpoint=path)
    os.chmod(path, 0o400)
    try:
        with pytest.raises(dagexec.CheckpointError) as info:
            dagexec.run(_graph(), checkpoint=path)
    finally:
        os.chmod(path, 0o600)
    assert "is read-only" in str(info.value) and "chmod u+w" in str(info.value)
    assert "damaged" not in str(info.value)


def test_a_damaged_file_is_a_checkpoint_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    g = dagexec.Graph()
    for i in range(300):
        g.add(i, lambda i=i: str(i) * 300)
    dagexec.run(g, checkpoint=path)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 8 * page
    data[page : len(data) - page] = b"\xa5" * (len(data) - 2 * page)  # pages garbled
    path.write_bytes(bytes(data))
    with pytest.raises(dagexec.CheckpointError) as info:
        dagexec.run(g, checkpoint=path)
    assert str(path) in str(info.value)
    assert "damaged" in str(info.value) and "Delete it" in str(info.value)


def test_an_unreadable_row_is_a_checkpoint_error(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    dagexec.run(_graph(), checkpoint=path)
    with (
        contextlib.closing(sqlite3.connect(path)) as conn,
        conn,
    ):  # something other than dagexec edited it
        conn.execute("UPDATE dagexec_values SET value = 'text', digest = 'x'")
    with pytest.raises(dagexec.CheckpointError, match=r"the row of task 'b' is unreadable"):
        dagexec.run(_graph(), checkpoint=path)


def test_read_only_is_told_apart_from_damaged_whoever_runs_the_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root may write a read-only file, so the file system's answer is stood in for.
    import dagexec._persist.checkpoint_file as files

    path = tmp_path / "c.sqlite"
    dagexec.run(_graph(), checkpoint=path)
    real = os.access
    monkeypatch.setattr(
        files.os, "access", lambda p, mode: False if str(p) == str(path) else real(p, mode)
    )
    with pytest.raises(dagexec.CheckpointError, match="is read-only") as info:
        dagexec.run(_graph(), checkpoint=path)
    assert "damaged" not in str(info.value)


# -- links (issue 31, item 3) ---------------------------------------------------------------

NOBODY = 65534  # a uid that is not ours (root's tests give files to it)


@posix_only
def test_a_link_to_a_file_not_yet_made_creates_it_private_at_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real" / "c.sqlite"
    target.parent.mkdir()
    link = tmp_path / "c.sqlite"
    link.symlink_to(target)
    old = os.umask(0o022)  # the usual umask: SQLite alone creates 0644
    try:
        assert dagexec.run(_graph(), checkpoint=link)["b"] == "a" * 500 + "b"
        with CheckpointStore(link) as store:  # a second open, through the link again
            store.save_nowait(b"\1" * 16, 1, name="x")
            assert store.flush(30)
            wal = [Path(f"{target}{s}") for s in ("-wal", "-shm")]
            assert [_mode(p) for p in (target, *wal)] == [0o600, 0o600, 0o600]
    finally:
        os.umask(old)
    assert link.is_symlink() and not Path(f"{link}-wal").exists()  # all at the target
    assert dagexec.run(_graph(), checkpoint=link).stats.tasks_loaded == 1


@posix_only
@pytest.mark.skipif(not ROOT, reason="making a link of another user needs root")
def test_a_link_of_another_user_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "c.sqlite"
    link = tmp_path / "link.sqlite"
    link.symlink_to(target)
    os.lchown(link, NOBODY, -1)
    with pytest.raises(dagexec.CheckpointError, match="belongs to another user") as info:
        dagexec.run(_graph(), checkpoint=link)
    assert "symbolic link" in str(info.value) and info.value.path == str(link)
    assert not target.exists()  # refused before anything was created
    with pytest.raises(dagexec.CheckpointError, match="belongs to another user"):
        dagexec.explain(_graph(), checkpoint=link)


@posix_only
@pytest.mark.skipif(not ROOT, reason="a directory of another user needs root")
@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o1755], ids=["1777", "777", "1755"])
def test_a_link_in_a_shared_directory_of_another_user_is_refused(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    target = tmp_path / "mine.sqlite"
    link = shared / "c.sqlite"
    link.symlink_to(target)  # ours: but anyone could have made it there
    os.chown(shared, NOBODY, -1)
    os.chmod(shared, mode)
    with pytest.raises(dagexec.CheckpointError, match=r"a shared \((sticky|world-writable)\)"):
        dagexec.run(_graph(), checkpoint=link)
    assert not target.exists()
    # A plain path there keeps working, as one in the system's temporary directory does.
    plain = shared / "plain.sqlite"
    assert dagexec.run(_graph(), checkpoint=plain)["b"].endswith("b")
    assert _mode(plain) == 0o600


@posix_only
def test_a_plain_path_in_the_system_temporary_directory_keeps_working() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tempfile.gettempdir(), os.path.basename(tmp) + ".sqlite")
        try:
            dagexec.run(_graph(), checkpoint=path)
            assert dagexec.run(_graph(), checkpoint=path).stats.tasks_loaded == 1
            assert _mode(Path(path)) == 0o600
        finally:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path + suffix)


@posix_only
def test_a_wal_that_is_a_link_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    dagexec.run(_graph(), checkpoint=path)
    Path(f"{path}-wal").unlink(missing_ok=True)
    Path(f"{path}-wal").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(dagexec.CheckpointError, match="-wal' is a symbolic link"):
        dagexec.run(_graph(), checkpoint=path)


@posix_only
def test_a_loop_of_links_is_refused(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.symlink_to(two)
    two.symlink_to(one)
    with pytest.raises(dagexec.CheckpointError, match="chain of more than 40 symbolic links"):
        dagexec.run(_graph(), checkpoint=one)
