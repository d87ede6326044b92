"""Task functions for isolate="process" tests, and a gate that holds child processes.

Kept in a module of their own, importable by name, so a child imports only this
(not pytest nor the test module) when it loads a task.

:class:`ProcessGate` is :class:`dagexec.testing.Gate` for code running in another
process: a task arrives by writing its pid into one FIFO and waits for a byte on
another, which the test writes when it opens the gate. A task held there longer
than :data:`HOLD_SECONDS` raises instead of hanging.
"""

from __future__ import annotations

import os
import select
import struct
import threading
import time
from pathlib import Path
from typing import Any

import dagexec
from dagexec import testing

HOLD_SECONDS = 20.0
_PID = struct.Struct("<q")


def alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped before the open, or the read
        return False


class ProcessGate:
    """Holds tasks running in child processes until the test opens it."""

    def __init__(self, directory: Path) -> None:
        self.directory = str(directory)
        self._arrive = os.path.join(self.directory, "arrive")
        self._release = os.path.join(self.directory, "release")
        os.mkfifo(self._arrive)
        os.mkfifo(self._release)
        # Held open by the test, read and write (Linux allows it on a FIFO): a
        # task's open of either FIFO never blocks, and with a writer always there
        # the arrivals FIFO never reads as closed, so select() wakes only for data.
        self._arrivals = os.open(self._arrive, os.O_RDWR)
        self._releases = os.open(self._release, os.O_RDWR)
        self._pending = b""
        self.pids: list[int] = []

    def wait_for_arrivals(self, n: int, timeout: float = 10.0) -> list[int]:
        """Block until ``n`` tasks in all have arrived; their pids in arrival order."""
        deadline = time.monotonic() + timeout
        while len(self.pids) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{len(self.pids)} of {n} tasks arrived at the gate")
            ready, _, _ = select.select([self._arrivals], [], [], left)
            if ready:
                self._pending += os.read(self._arrivals, 4096)
                while len(self._pending) >= _PID.size:
                    self.pids.append(_PID.unpack(self._pending[: _PID.size])[0])
                    self._pending = self._pending[_PID.size :]
        return self.pids[:n]

    def open(self, n: int = 64) -> None:
        """Let ``n`` held (or later) tasks through."""
        os.write(self._releases, b"x" * n)

    def close(self) -> None:
        os.close(self._arrivals)
        os.close(self._releases)


def held(gate_dir: str, *values: Any) -> int:
    """Arrive at the gate in ``gate_dir``, wait to be let through; return this pid."""
    arrive(gate_dir)
    release = os.open(os.path.join(gate_dir, "release"), os.O_RDONLY | os.O_NONBLOCK)
    try:
        deadline = time.monotonic() + HOLD_SECONDS
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("process gate not opened")
            ready, _, _ = select.select([release], [], [], left)
            if ready:
                try:
                    if os.read(release, 1):
                        return os.getpid()
                except BlockingIOError:  # another task took the byte
                    continue
                raise EOFError("process gate closed before it opened")
    finally:
        os.close(release)


def held_then_exit(gate_dir: str) -> None:
    """Arrive at the gate, wait to be let through, then end this child at once."""
    held(gate_dir)
    os._exit(7)


def die_before_next_began(value: Any, gate_dir: str) -> int:
    """Wait at the gate (after a task of value ``value``); return this pid, and make
    this child die instead of saying BEGAN of the next call sent early (so that call
    never began): patches the child's reply writer."""
    import sys

    held(gate_dir)
    child = sys.modules["_dagexec_child"]
    send_reply = child._send_reply

    def dying(replies: int, meta: Any, *rest: Any) -> None:
        if meta[0] == "began":
            os._exit(9)
        send_reply(replies, meta, *rest)

    child._send_reply = dying
    return os.getpid()


def pid(*values: Any) -> int:
    return os.getpid()


def add(a: int, b: int) -> int:
    return a + b


def scale(x: int, factor: int = 1, *, offset: int = 0) -> int:
    return x * factor + offset


def a_timeout_object(*values: Any) -> dagexec.TaskTimeout:
    """Returns (not raises) what a timed-out process task fails with."""
    return dagexec.TaskTimeout("someone", 1.0, 1)


def raise_a_timeout(*values: Any) -> None:
    """Raises what a timed-out process task fails with, with no timeout of its own."""
    raise dagexec.TaskTimeout("someone", 1.0, 1)


def square(x: int) -> int:
    return x * x


def total(values: list[int]) -> int:
    return sum(values)


def length(data: bytes | bytearray) -> tuple[str, int]:
    return type(data).__name__, len(data)


def append_one(data: bytearray) -> bytearray:
    data.append(1)
    return data


def make_bytes(n: int) -> bytes:
    return bytes(range(256)) * (n // 256)


def fail(*values: Any) -> None:
    raise ValueError("failed in the child")


def fail_with_notes(notes: Any, *values: Any) -> None:
    """Raise a ValueError whose ``__notes__`` the task set itself (perhaps to what
    ``add_note`` refuses: a tuple, a string)."""
    exc = ValueError("noted")
    exc.__notes__ = notes
    raise exc


def fork_and_return(*values: Any) -> str:
    """Fork; the forked copy returns too (no os._exit). The task returns once that
    copy has ended (its end of a pipe closes), or after 5 s if it never does:
    an answer from the copy would then be first in line."""
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        return "from the forked copy"
    os.close(write)
    select.select([read], [], [], 5.0)
    os.close(read)
    return "from the child"


def exit_hard(*values: Any) -> None:
    os._exit(3)


def kill_self(*values: Any) -> None:
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def crash_first_time(marker: str) -> tuple[int, int, int]:
    """Die on the first call (noting this pid in ``marker``); then say who crashed."""
    if not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os._exit(5)
    return int(Path(marker).read_text()), dagexec.current_task().attempt, os.getpid()


def give_lock(*values: Any) -> Any:
    return threading.Lock()


def whoami(*values: Any) -> tuple[Any, int, bool]:
    task = dagexec.current_task()
    return task.name, task.attempt, task.cancelled.is_set()


def fail_first_attempt(*values: Any) -> int:
    task = dagexec.current_task()
    if task.attempt == 1:
        raise OSError("flaky")
    return task.attempt


def arrive(gate_dir: str) -> None:
    """Tell the test this task runs (in pid), without waiting."""
    fd = os.open(os.path.join(gate_dir, "arrive"), os.O_WRONLY)
    os.write(fd, _PID.pack(os.getpid()))
    os.close(fd)


def cleanup_held(gate_dir: str, out: str, *values: Any) -> str:
    """A cleanup task: arrive, wait to be let through, write whether its token was set.

    A cleanup task runs to its end after a stop: its token stays clear.
    """
    task = dagexec.current_task()
    held(gate_dir)
    Path(out).write_text("stopped" if task.cancelled.is_set() else "finished")
    return "done"


def count_call(path: str, *values: Any) -> int:
    """Append a line to ``path`` (how many times did this task run?); return the count."""
    with open(path, "a") as f:
        f.write("x\n")
    return len(Path(path).read_text().splitlines())


def fail_unless(path: str, *values: Any) -> str:
    """Fail while ``path`` does not exist."""
    if not os.path.exists(path):
        raise RuntimeError(f"{path} missing")
    return "ok"


def after_marker(value: Any, path: str) -> str:
    """``value``'s task ran first; fail while ``path`` does not exist."""
    return fail_unless(path)


def sleep_forever(*values: Any) -> None:
    os.write(1, f"PID {os.getpid()}\n".encode())  # one write: lines never interleave
    threading.Event().wait(60)


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    def __hash__(self) -> int:
        return hash((self.x, self.y))


def flip(p: Point) -> Point:
    return Point(p.y, p.x)


class TwoArgError(Exception):
    """Pickles, but does not unpickle: __init__ wants two arguments, args holds one."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a} and {b}")


def raise_two_arg_error(*values: Any) -> None:
    raise TwoArgError(1, 2)


def double_array(a: Any) -> Any:
    a *= 2  # in place: the array that arrived is writable
    return a


def raise_two_arg_error_counted(path: str) -> None:
    """:func:`raise_two_arg_error`, noting each call in ``path``."""
    count_call(path)
    raise TwoArgError(1, 2)


class LockedError(Exception):
    """Does not pickle at all: it holds a lock."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def raise_locked_error(*values: Any) -> None:
    raise LockedError("holds a lock")


def raise_unimportable_error(*values: Any) -> None:
    """An exception whose class the parent cannot find (made here, in the child)."""
    ghost = type("GhostError", (Exception,), {"__module__": __name__})
    raise ghost("boo")


def start_grandchild(gate_dir: str, hold: bool = True) -> int:
    """Start ``sleep 60`` (a grandchild, in this child's process group), arrive at the
    gate with its pid, then (``hold``) wait there with this pid; return its pid."""
    import subprocess

    grandchild = subprocess.Popen(["sleep", "60"])
    fd = os.open(os.path.join(gate_dir, "arrive"), os.O_WRONLY)
    os.write(fd, _PID.pack(grandchild.pid))
    os.close(fd)
    if hold:
        held(gate_dir)
    return grandchild.pid


def start_grandchild_and_exit(gate_dir: str) -> None:
    """Start a grandchild, arrive with its pid, and die (a crash)."""
    start_grandchild(gate_dir, hold=False)
    os._exit(7)


def in_a_child() -> bool:
    """True in a dagexec child process (which loads ``_dagexec_child``)."""
    import sys

    return "_dagexec_child" in sys.modules


def block_in_a_child() -> str:
    """Hang (60 s) when called in a child; at once in the parent."""
    if in_a_child():
        threading.Event().wait(60)
    return "loaded"


class SlowToUnpickle:
    """An argument whose unpickling in a child hangs: the deadline must see it."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (block_in_a_child, ())


def my_name(*values: Any) -> Any:
    return dagexec.current_task().name


def grandchild_for_a_while(item: int, data: bytes, seconds: float) -> int:
    """Start ``sleep 60`` and wait ``seconds`` in Python (the GIL free), then end it:
    what this task starts lives only while it runs. Returns ``len(data)``."""
    import subprocess

    grandchild = subprocess.Popen(["sleep", "60"])
    try:
        threading.Event().wait(seconds)
    finally:
        grandchild.kill()
        grandchild.wait()
    return len(data)


def hold_the_gil(data: bytes, n: int) -> int:
    """Sum ``range(n)`` in one C call, which never lets go of the GIL."""
    return sum(range(n)) + len(data)


def arrive_then_hold_the_gil(gate_dir: str) -> int:
    """Arrive at the gate, then hold the GIL in C for minutes."""
    arrive(gate_dir)
    return sum(range(10**12))


def log_lines(n: int, *values: Any) -> int:
    """Log n INFO lines and a WARNING from the child (run(logs=...) streams them)."""
    import logging

    log = logging.getLogger("child.task")
    for i in range(n):
        log.info("child line %d", i)
    log.warning("child warning")
    return n


def log_without_pause(*values: Any) -> int:
    """Log as fast as it can for HOLD_SECONDS: its records keep the parent's pipe
    busy, and a stop must still reach it (the parent kills the child)."""
    import logging

    log = logging.getLogger("child.task")
    end, count = time.monotonic() + HOLD_SECONDS, 0
    while time.monotonic() < end:
        log.info("line %d", count)
        count += 1
    return count


def log_then_die(*values: Any) -> None:
    """Log two lines, then kill this child process: they must reach the parent first."""
    import logging
    import signal

    logging.getLogger("child.task").info("about to die")
    logging.getLogger("child.task").error("last words")
    os.kill(os.getpid(), signal.SIGKILL)


def log_then_hang(*values: Any) -> None:
    """Log a line, then block past any timeout (the parent kills the child)."""
    import logging

    logging.getLogger("child.task").info("hanging now")
    time.sleep(HOLD_SECONDS)


def dagexec_origin() -> dict[str, str]:
    """Where this process imported dagexec from, and the child code it runs (by path)."""
    import sys

    child = sys.modules.get("_dagexec_child")
    return {"dagexec": dagexec.__file__ or "", "child": getattr(child, "__file__", "") or ""}


# A Gate and a probe written inside a process task's body: in the child they are
# the module's own copies, which the test cannot see (tests/test_testing_process.py).
GATE_IN_BODY = testing.Gate(timeout=5.0)
PROBE_IN_BODY = testing.ConcurrencyProbe()


def waits_at_gate(*values: Any) -> None:
    GATE_IN_BODY.wait()


def enters_probe(*values: Any) -> int:
    with PROBE_IN_BODY:
        return 1


def place(name: str, *values: Any) -> tuple[int, str, str | None]:
    """This child's pid, working directory and environment variable ``name``."""
    return os.getpid(), os.getcwd(), os.environ.get(name)


def kill_and_wait(pid: int) -> None:
    """SIGKILL ``pid`` and return once it has exited (its pidfd is readable then)."""
    import signal

    fd = os.pidfd_open(pid)
    try:
        os.kill(pid, signal.SIGKILL)
        select.select([fd], [], [], 10)
    finally:
        os.close(fd)
