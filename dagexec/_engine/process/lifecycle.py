"""How children start and end: from one long-lived thread, and always with their group.

Three rules, one place each:

* **Started from one thread** (:func:`spawn`). A child asks the kernel to kill it
  when its parent dies (``PR_SET_PDEATHSIG``, see ``child.py``), for when no Python
  code of its own can run (a C call holding the GIL). Linux sends that signal when
  the *thread* that started the child exits, not the process: a child started by a
  worker thread would be killed the moment that thread ended (a worker replaced
  after a timeout, a caller's thread that ran tasks itself), healthy or not. So
  every child is started by :data:`_spawner`, a daemon thread started once and
  never ended: it goes only with the process, which is when the signal is meant
  to come. Its cost is two thread hand-offs per child start (~50 ms), none per call.
* **Ended with its group** (:func:`end_group`). A child leads its own process
  group, and whatever its tasks start (a compiler, a db client, ``ffmpeg``) is in
  it unless it left (``setsid``, ``setpgid``): a timeout, a stop, a crash and
  interpreter exit kill the group, not the child alone.
* **Segments of dead parents swept** (:func:`sweep_segments`), once per program,
  when its first child starts: a child killed by the kernel's fallback could not
  unlink its shared-memory segments, and they would stay in RAM until a reboot.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import threading
from typing import Any

from .transfer import SEGMENT_PREFIX, shm_dir

__all__ = ["end_group", "spawn", "sweep_segments"]

_requests: queue.SimpleQueue[_Spawn] = queue.SimpleQueue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()
_swept = False


class _Spawn:
    """One child to start on the spawner thread, and what came of it."""

    __slots__ = ("args", "done", "error", "given_up", "lock", "proc")

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: BaseException | None = None
        self.given_up = False  # the asker stopped waiting (a KeyboardInterrupt)


def spawn(**popen_args: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(**popen_args)``, run on the spawner thread; blocks until started.

    Raises what ``Popen`` raised. If the wait is interrupted (a KeyboardInterrupt on
    the main thread), the child, once started, is killed with its group.
    """
    request = _Spawn(popen_args)
    _spawner_thread()
    _requests.put(request)
    try:
        request.done.wait()
    except BaseException:
        with request.lock:
            request.given_up = True
            proc = request.proc
        if proc is not None:
            end_group(proc)
        raise
    if request.error is not None:
        raise request.error
    assert request.proc is not None
    return request.proc


def _spawner_thread() -> None:
    global _spawner
    if _spawner is not None:
        return
    with _spawner_lock:
        if _spawner is None:
            thread = threading.Thread(target=_serve, daemon=True, name="dagexec-spawner")
            thread.start()
            _spawner = thread


def _serve() -> None:
    """The spawner thread: start children as asked, for the life of the process."""
    while True:
        request = _requests.get()
        try:
            proc: subprocess.Popen[bytes] = subprocess.Popen(**request.args)
        except BaseException as exc:  # handed to the asker, who raises it
            request.error = exc
            request.done.set()
            continue
        with request.lock:
            request.proc = proc
            given_up = request.given_up
        request.done.set()
        if given_up:
            end_group(proc)
        del request, proc


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` and its process group, then reap it (a no-op if reaped already).

    The group is signalled before ``proc`` is reaped: until then its pid cannot be
    reused, so the signal cannot reach a stranger's group.
    """
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()  # in case it left its group (it leads it, as started)
    proc.wait()


_SEGMENT = re.compile(re.escape(SEGMENT_PREFIX) + r"(\d+)-\d+-\d+-(?:in|out)")


def sweep_segments() -> int:
    """Unlink the shared-memory segments of parents that are gone; how many.

    Runs once per program (the first call; later ones return 0). A segment's name
    carries its parent's pid: one whose parent no longer runs was left by a
    parent killed outright with a child the kernel had to kill.
    """
    global _swept
    if _swept:
        return 0
    _swept = True
    where = shm_dir()
    if where is None:
        return 0
    try:
        names = os.listdir(where)
    except OSError:
        return 0
    gone = 0
    me = os.getpid()
    for name in names:
        match = _SEGMENT.fullmatch(name)
        if match is None or int(match.group(1)) == me or _runs(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(where, name))
            gone += 1
    return gone


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
