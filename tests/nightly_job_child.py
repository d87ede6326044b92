"""The nightly job of issue 19, as a process the parent interrupts with real SIGINTs.

Usage: ``python nightly_job_child.py DATA_DIR CHECKPOINT first|resume``.

The job: list the files of DATA_DIR at run time; ``g.map`` an upload over them,
each holding one unit of a ``db`` resource of capacity 2, retried once when it
fails (files named ``flaky*`` fail on their first attempt), writing into a
scratch directory; ``slow.txt`` waits for its cancellation token in the first
run (so that a Ctrl-C finds it running); a ``hang`` step with a per-task
timeout blocks on an Event, past its timeout; a ``total``; and a ``cleanup``
(run_if="all_done") that deletes the scratch directory. Each line is flushed at
once so the parent sees how far the job got:

* ``ITEM START <file>`` / ``ITEM END <file>``: an upload attempt began / ended
  (returned or raised); ``ITEM RETURNED <file>`` just before one returns a value;
* ``ITEM ENDED <file> DONE``: the scheduler heard that the item ended DONE (an
  ``on_task_end`` callback), so its checkpoint wrapper had already decided
  whether to store its value;
* ``HANG START``: the hanging step runs;
* ``CLEANUP running=<n>``: the cleanup started, with n uploads still running;
* ``RAISED <exception>`` or ``RAISED nothing``, then ``TOTAL <n>`` when the run
  returned a total, ``RETURNED <seconds>`` (from the hang's start to the caller's
  return), and last ``PEAK DB <n>`` (most uploads inside at once).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Hashable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagexec
from dagexec import current_task

_out = threading.Lock()
_count = threading.Lock()
running = 0
peak = 0
hang_started: list[float] = []  # when the hanging step began (monotonic)
NEVER = threading.Event()  # what the hanging step waits for
WAIT = 30.0  # bounds every wait; never reached when the parent does its part


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def first_run() -> bool:
    """Read at run time, not captured: a captured flag would be part of the upload's
    checkpoint identity, and no item of the first run would load in the second."""
    return sys.argv[3] == "first"


def build(data: Path, scratch: Path, hang_seconds: float) -> dagexec.Graph:
    g = dagexec.Graph()

    def list_files() -> list[str]:
        return sorted(p.name for p in data.iterdir())

    def upload(name: str) -> int:
        global running, peak
        me = current_task()
        with _count:
            running += 1
            peak = max(peak, running)
        say(f"ITEM START {name}")
        try:
            if name.startswith("flaky") and me.attempt == 1:
                raise OSError(f"{name}: connection reset")
            if name == "slow.txt" and first_run():
                me.cancelled.wait(WAIT)  # still running when the Ctrl-C comes
            # Made here, not by list_files, which runs every time anyway.
            scratch.mkdir(exist_ok=True)
            (scratch / name).write_text("uploaded")
            say(f"ITEM RETURNED {name}")
            return len(name)
        finally:
            with _count:
                running -= 1
            say(f"ITEM END {name}")

    def hang() -> None:
        hang_started.append(time.monotonic())
        say("HANG START")
        NEVER.wait(hang_seconds)  # ignores its token: an overrun, as in real life

    def cleanup(sizes: object) -> str:
        with _count:
            now_running = running
        say(f"CLEANUP running={now_running}")
        shutil.rmtree(scratch, ignore_errors=True)
        return "clean"

    g.add("list_files", list_files, checkpoint=False)  # today's files, every run
    g.map("upload", upload, over="list_files", resources={"db": 1}, retries=1)
    g.add("hang", hang, timeout=0.3)
    g.add("total", lambda sizes: sum(sizes), deps=["upload"])
    g.add("cleanup", cleanup, deps=["upload"], run_if="all_done", timeout=10)
    return g


class ItemEnds:
    """Says which upload items ended DONE, once the scheduler has heard so."""

    def __init__(self, files: list[str]) -> None:
        self.files = files

    def on_task_end(self, name: Hashable, state: dagexec.TaskState, seconds: float) -> None:
        if isinstance(name, tuple) and name[0] == "upload" and state is dagexec.TaskState.DONE:
            say(f"ITEM ENDED {self.files[name[1]]} DONE")


if __name__ == "__main__":
    data, checkpoint = Path(sys.argv[1]), sys.argv[2]
    # The first run is interrupted long before its hang returns; in the resumed
    # one the hang overruns its timeout (0.3 s) by far more than the 2 s the
    # caller may take: it is abandoned, and released at the end so the process exits.
    graph = build(data, data.parent / "scratch", WAIT)
    try:
        result = dagexec.run(
            graph,
            workers=3,
            resources={"db": 2},
            on_error="continue",
            checkpoint=checkpoint,
            callbacks=[ItemEnds(sorted(p.name for p in data.iterdir()))],
        )
        returned = time.monotonic()
        say("RAISED nothing")
        say(f"TOTAL {result['total']}")
        say(f"HANG {result.status['hang'].name}")
        say(f"PEAK RESOURCE DB {result.stats.peak_resources['db']}")
        say(f"RETURNED {returned - hang_started[0]:.3f}")
    except BaseException as exc:
        say(f"RAISED {type(exc).__name__}")
    NEVER.set()
    say(f"PEAK DB {peak}")
