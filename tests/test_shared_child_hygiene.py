"""What a shared process child must not carry from one user to the next (issue 36,
part 1, found by review): what a task did to its child's directory, environment
and ``sys.path``; a time zone; output redirected by descriptor; a directory too
deep to enter; a fork's copies of the children's pipes; a script whose top level
reads its command line or exits. And sizing (issue 33), which must never run a
value's own methods nor take a huge one for a small one.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import hygiene_tasks as ht
import pytest

import dagexec
from dagexec._engine.process import sharing
from dagexec._engine.run.sizing import estimate_bytes

VARIABLE = "DAGEXEC_TEST_HYGIENE"


def _one(fn: Any, *args: Any) -> Any:
    g = dagexec.Graph()
    g.add("t", fn, args=args, isolate="process")
    return dagexec.run(g, workers=1)["t"]


def test_what_a_task_changed_in_its_child_is_undone_for_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    entry = str(tmp_path / "not-on-the-parents-path")
    moved = _one(ht.move_child, str(tmp_path), VARIABLE, entry)
    pid, cwd, value, on_path = _one(ht.where, VARIABLE, entry)
    assert pid == moved  # the same child, shared
    assert (cwd, value, on_path) == (os.getcwd(), None, False)


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="needs time.tzset")
def test_a_new_time_zone_is_taken_by_a_shared_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        first, utc_hour = _one(ht.local_hour)
        monkeypatch.setenv("TZ", "Asia/Tokyo")
        time.tzset()
        second, tokyo_hour = _one(ht.local_hour)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert second == first and (utc_hour, tokyo_hour) == (0, 9)


def test_output_redirected_by_descriptor_reaches_the_new_file(tmp_path: Path) -> None:
    before = _one(ht.say, "before")
    target = tmp_path / "out.txt"
    saved = os.dup(1)
    try:
        sys.stdout.flush()
        with target.open("wb") as f:
            os.dup2(f.fileno(), 1)
        after = _one(ht.say, "after the redirect")
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    assert after != before  # a child writing to the old file could not follow
    assert "after the redirect" in target.read_text()
    assert before not in sharing.live_children()  # ended, not left idle


def test_a_directory_too_deep_for_one_chdir_is_inherited_by_a_new_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pythonpath = os.environ.get("PYTHONPATH")
    if pythonpath:  # a relative entry cannot be made absolute in a new child down there
        absolute = os.pathsep.join(map(os.path.abspath, pythonpath.split(os.pathsep)))
        monkeypatch.setenv("PYTHONPATH", absolute)
    _one(ht.cwd_length)  # a child idle in the pool, started in a short directory
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        while len(os.fsencode(os.getcwd())) < 4200:  # built one component at a time
            os.mkdir("d" * 200)
            os.chdir("d" * 200)
        length = _one(ht.cwd_length)
        here = len(os.getcwd())
    finally:
        os.chdir(old)
    assert length == here > 4096


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_process_closes_its_copies_of_the_childrens_pipes() -> None:
    """Else the children never see the parent's exit or death while the fork lives."""
    _one(ht.cwd_length)
    slots = [s for s in sharing._live if s.proc is not None]
    assert slots
    pipes = {os.fstat(fd).st_ino for s in slots for fd in (s.requests, s.stops, s.life)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        still = set()
        for name in os.listdir("/proc/self/fd"):
            try:
                st = os.fstat(int(name))
            except OSError:
                continue
            if stat.S_ISFIFO(st.st_mode):
                still.add(st.st_ino)
        os._exit(0 if not (pipes & still) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


SCRIPT = """
    import argparse, sys
    import dagexec

    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, required=True)
    args = parser.parse_args()
    if args.n < 0 and __name__ != "__main__":
        sys.exit(3)  # a top level that exits when loaded elsewhere

    def square(x):
        return x * x

    if __name__ == "__main__":
        g = dagexec.Graph()
        g.add("sq", square, args=(args.n,), isolate="process")
        try:
            print(dagexec.run(g, workers=1)["sq"])
        except RuntimeError as exc:
            print("RuntimeError", exc)
"""


@pytest.mark.parametrize(("n", "expected"), [("7", "49"), ("-1", "RuntimeError")])
def test_a_scripts_top_level_reads_the_parents_argv_in_the_child(
    tmp_path: Path, n: str, expected: str
) -> None:
    script = tmp_path / "argv_script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script), "--n", n],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(expected), done.stdout
    if expected == "RuntimeError":
        assert "sys.exit(3)" in done.stdout and "__main__" in done.stdout


class _LRU(OrderedDict[Any, Any]):
    """The recipe from Python's docs: reading a key moves it to the end."""

    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value


class _Refusing(list[Any]):
    def __iter__(self) -> Any:
        raise AssertionError("sizing must not iterate through a subclass's __iter__")

    def __len__(self) -> int:
        raise AssertionError("sizing must not call a subclass's __len__")


class _Huge:
    def __sizeof__(self) -> int:
        return sys.maxsize * 4


def test_sizing_never_runs_a_containers_own_methods() -> None:
    lru = _LRU((k, bytes(100)) for k in "abcdefgh")
    assert estimate_bytes(lru) > 800
    assert list(lru) == list("abcdefgh")
    assert estimate_bytes(_Refusing([bytes(1000)] * 4)) > 4000


def test_a_size_past_maxsize_counts_as_huge_not_as_nothing() -> None:
    assert estimate_bytes(_Huge()) == sys.maxsize
