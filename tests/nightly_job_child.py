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

* ``ITEM START <file>`` / ``ITEM END <file>``: an upload attempt began / returned;
* ``HANG START``: the hanging step runs;
* ``CLEANUP running=<n>``: the cleanup started, with n uploads still running;
* ``RAISED <exception>`` or ``RAISED nothing``, then ``PEAK DB <n>`` (most uploads
  inside at once), ``TOTAL <n>`` when the run returned a total.
"""

from __future__ import annotations

import shutil
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagexec
from dagexec import current_task

_out = threading.Lock()
_count = threading.Lock()
running = 0
peak = 0
NEVER = threading.Event()  # what the hanging step waits for
WAIT = 30.0  # bounds every wait; never reached when the parent does its part


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def build(data: Path, scratch: Path, first: bool, hang_seconds: float) -> dagexec.Graph:
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
            if name == "slow.txt" and first:
                me.cancelled.wait(WAIT)  # still running when the Ctrl-C comes
            # Made here, not by list_files: a rerun may load the list.
            scratch.mkdir(exist_ok=True)
            (scratch / name).write_text("uploaded")
            return len(name)
        finally:
            with _count:
                running -= 1
            say(f"ITEM END {name}")

    def hang() -> None:
        say("HANG START")
        NEVER.wait(hang_seconds)  # ignores its token: an overrun, as in real life

    def cleanup(sizes: object) -> str:
        with _count:
            now_running = running
        say(f"CLEANUP running={now_running}")
        shutil.rmtree(scratch, ignore_errors=True)
        return "clean"

    g.add("list_files", list_files)
    g.map("upload", upload, over="list_files", resources={"db": 1}, retries=1)
    g.add("hang", hang, timeout=0.3)
    g.add("total", lambda sizes: sum(sizes), deps=["upload"])
    g.add("cleanup", cleanup, deps=["upload"], run_if="all_done", timeout=10)
    return g


if __name__ == "__main__":
    data, checkpoint, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    first = mode == "first"
    # The first run is interrupted long before its hang returns; the resumed one
    # lets the hanging step overrun its timeout by a little (see the test).
    graph = build(data, data.parent / "scratch", first, WAIT if first else 1.0)
    try:
        result = dagexec.run(
            graph,
            workers=3,
            resources={"db": 2},
            on_error="continue",
            checkpoint=checkpoint,
        )
        say("RAISED nothing")
        say(f"TOTAL {result['total']}")
        say(f"HANG {result.status['hang'].name}")
        say(f"PEAK RESOURCE DB {result.stats.peak_resources['db']}")
    except BaseException as exc:
        say(f"RAISED {type(exc).__name__}")
    say(f"PEAK DB {peak}")
