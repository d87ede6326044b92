"""How children end: always with their process group, and never after their parent.

* **Ended with its group** (:func:`end_group`). A child leads its own process
  group, and whatever its tasks start (a compiler, a db client, ``ffmpeg``) is in
  it unless it left (``setsid``, ``setpgid``): a timeout, a stop, a crash and
  interpreter exit kill the group, not the child alone.
* **Never after its parent.** Each child is given the read end of a *life pipe*
  whose write end only the parent holds, and never writes to: the kernel closes
  it when the parent process dies, however it dies (SIGKILL, the OOM killer). A
  tiny watchdog process the child forks as it starts (before any thread) sleeps
  in a ``read`` of it; at end of file it unlinks the child's shared-memory
  segments and kills the child's group, itself included (``child.py``). Being a
  process of its own, it acts even while the child's task holds the GIL in a C
  call, where no thread of the child could run. The child's own stop listener
  does the same at once when it can.

  Why not ``PR_SET_PDEATHSIG``: Linux sends that signal when the *thread* that
  started the child exits, not the process, so a child started by a worker
  thread would be killed when that thread ends (a worker replaced after a
  timeout, a caller's thread that ran tasks itself), healthy or not; to avoid
  that every child would have to be started from one thread living as long as
  the program. And its SIGKILL kills the child alone, at once: the child's
  segments and what its task started would stay, as the signal beats the stop
  listener to it. A pipe belongs to the process, and the watchdog ends the
  whole group.
* **Segments of dead parents swept** (:func:`sweep_segments`), once per program,
  when its first child starts: segments a parent and its child both left (the
  machine's OOM killer took both, say) would stay in RAM until a reboot.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys

from .transfer import SEGMENT_PREFIX, unlink_segments

__all__ = ["end_group", "spawn", "sweep_segments"]

# The directory of child.py and transfer.py, which the child loads by path.
_HERE = os.path.dirname(os.path.abspath(__file__))


_swept = False  # sweep_segments ran in this program


def spawn(boot: str) -> tuple[subprocess.Popen[bytes], int, int, int, int]:
    """Start a child running ``boot`` (``python -c``) with its four pipes: the child,
    and the parent's ends of the request, reply, stop and life pipes."""
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    stop_r, stop_w = os.pipe()
    life_r, life_w = os.pipe()  # never written: its end of file says the parent died
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                # -O, -X, -W and the like, as multiprocessing passes them on
                *subprocess._args_from_interpreter_flags(),  # type: ignore[attr-defined]
                "-c",
                boot,
                str(req_r),
                str(rep_w),
                str(stop_r),
                str(life_r),
                str(os.getpid()),
                os.path.join(_HERE, "transfer.py"),
                os.path.join(_HERE, "child.py"),
            ],
            pass_fds=(req_r, rep_w, stop_r, life_r),
            stdin=subprocess.DEVNULL,
            # Its own process group: a terminal's Ctrl-C goes to the parent only
            # (the child also ignores SIGINT), which decides what to kill; and
            # what its tasks start can be killed with it, as one.
            process_group=0,
        )
    except BaseException:
        for fd in (req_w, rep_r, stop_w, life_w):
            os.close(fd)
        raise
    finally:
        for fd in (req_r, rep_w, stop_r, life_r):
            os.close(fd)
    return proc, req_w, rep_r, stop_w, life_w


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
    carries its parent's pid: one whose parent no longer runs was left by a parent
    and a child that died together (the out-of-memory killer, a machine's reset of
    a container), or by a child whose watchdog was killed.
    """
    global _swept
    if _swept:
        return 0
    _swept = True
    return unlink_segments(_of_a_dead_parent)


def _of_a_dead_parent(name: str) -> bool:
    match = _SEGMENT.fullmatch(name)
    if match is None:
        return False
    parent = int(match.group(1))
    return parent != os.getpid() and not _runs(parent)


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
