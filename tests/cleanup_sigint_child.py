"""A process for the Ctrl-C x cleanup-task tests: real SIGINTs, sent by the parent.

Usage: ``python cleanup_sigint_child.py plain|queued|nocleanup``. ``queued`` adds
a callback, so that the run goes to the executor's scheduler thread and the
caller waits for it (the other path of Ctrl-C); ``plain`` runs it on the
calling thread; ``nocleanup`` has no cleanup task (the prompt path).

The graph: ``take`` takes a lock, ``work`` says WORKING and waits for its
cancellation token (the run's stop), ``release`` (run_if="all_done") says
CLEANUP START, waits until the parent writes a line on its stdin (ignoring its
own token), lets the lock go and says CLEANUP END. Each line is flushed
at once, so the parent knows how far the child got; the caller then says
RAISED <exception> and LOCK HELD|FREE.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagexec
from dagexec import current_task

_out = threading.Lock()
LOCK = threading.Lock()
WAIT = 30.0  # bounds every wait; never reached when the parent does its part


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def take() -> str:
    LOCK.acquire()
    return "taken"


def work(taken: str) -> str:
    say("WORKING")
    current_task().cancelled.wait(WAIT)  # the run's stop: set by the first Ctrl-C
    return "worked"


def release(*ended: object) -> str:
    say("CLEANUP START")
    # Blocks until the parent says GO on stdin, ignoring its own token: a
    # second Ctrl-C must not wait for it.
    sys.stdin.readline()
    LOCK.release()
    say("CLEANUP END")
    return "released"


class Quiet(dagexec.Callback):
    """Any callback moves the run to the scheduler thread."""


def build(cleanup: bool) -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("take", take)
    g.add("work", work, deps=["take"])
    if cleanup:
        g.add("release", release, deps=["take", "work"], run_if="all_done")
    return g


if __name__ == "__main__":
    mode = sys.argv[1]
    callbacks = [Quiet()] if mode == "queued" else []
    try:
        dagexec.run(build(mode != "nocleanup"), workers=2, callbacks=callbacks)
        say("RAISED nothing")
    except BaseException as exc:
        say(f"RAISED {type(exc).__name__}")
    say(f"LOCK {'HELD' if LOCK.locked() else 'FREE'}")
