"""End to end: the nightly job of issue 19, interrupted by a real SIGINT, then resumed.

The job (tests/nightly_job_child.py): files found at run time, ``g.map`` over
them holding a "db" resource of 2, a flaky step retried, a hanging step with a
per-task timeout blocking on an Event, a cleanup task deleting the scratch
directory. It runs in a child process, which the test interrupts with a real
SIGINT while uploads are still running, then runs again from its checkpoint.

It checks what issue 19 asks of it: the rerun runs only the items that had
not finished (and a file added meanwhile, alone); the cleanup ran after every
upload attempt ended; the caller returned within the hang's timeout + 2 s (the
hang blocks far longer, with no cleanup downstream of it); the db resource of
2 was never exceeded.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).with_name("nightly_job_child.py")
FILES = ["a.txt", "b.txt", "flaky1.txt", "flaky2.txt", "slow.txt", "z.txt"]


def _run_child(data: Path, checkpoint: Path, mode: str, interrupt: bool) -> tuple[list[str], int]:
    """The child's lines, and how many it had printed when the SIGINT was sent (-1: none)."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(data), str(checkpoint), mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    seen: list[str] = []
    sent = -1
    try:
        for line in child.stdout:
            seen.append(line.strip())
            if interrupt and "ITEM START slow.txt" in seen and "HANG START" in seen:
                child.send_signal(signal.SIGINT)
                sent = len(seen)
                interrupt = False
        child.wait(60)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    return seen, sent


def _ended_done(lines: list[str]) -> set[str]:
    return {line.split()[2] for line in lines if line.startswith("ITEM ENDED ")}


def _started(lines: list[str]) -> set[str]:
    return {line.removeprefix("ITEM START ") for line in lines if line.startswith("ITEM START ")}


def _check_cleanup_came_last(lines: list[str]) -> None:
    """The cleanup task started once every upload attempt that began had returned."""
    cleanup = [i for i, line in enumerate(lines) if line.startswith("CLEANUP ")]
    assert len(cleanup) == 1, lines
    assert lines[cleanup[0]] == "CLEANUP running=0", lines
    before = lines[: cleanup[0]]
    starts = sum(line.startswith("ITEM START ") for line in before)
    ends = sum(line.startswith("ITEM END ") for line in before)
    assert starts == ends, lines
    # No upload attempt ran after it (the scheduler's "ITEM ENDED" reports may).
    attempts = ("ITEM START ", "ITEM RETURNED ", "ITEM END ")
    assert not any(line.startswith(attempts) for line in lines[cleanup[0] :]), lines


def test_the_nightly_job_interrupted_then_resumed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for name in FILES:
        (data / name).write_text(name)
    checkpoint = tmp_path / "nightly.sqlite"

    first, sent = _run_child(data, checkpoint, "first", interrupt=True)
    assert sent > 0, first
    assert "RAISED KeyboardInterrupt" in first, first
    _check_cleanup_came_last(first)
    assert first.index("CLEANUP running=0") < first.index("RAISED KeyboardInterrupt")
    assert not (tmp_path / "scratch").exists()  # the cleanup ran to its end
    peak = int(first[-1].removeprefix("PEAK DB "))
    assert peak <= 2, first
    # Items the scheduler saw end DONE before the SIGINT was even sent are
    # stored. Any other item that returned a value may be stored or not: the
    # stop races with its return (one that returned before the stop is stored
    # even when the scheduler heard of it only after, and dropped it). slow.txt
    # returned after its token was set: it may end DONE, but is never stored.
    stored = _ended_done(first[:sent])
    returned = {line.removeprefix("ITEM RETURNED ") for line in first if "ITEM RETURNED " in line}
    maybe_stored = returned - stored - {"slow.txt"}
    assert stored <= returned, first
    assert "slow.txt" not in stored, first
    assert stored, first  # the SIGINT came after some items ended

    (data / "new.txt").write_text("new.txt")  # the lister is checkpoint=False: seen
    files = [*FILES, "new.txt"]
    resumed, _ = _run_child(data, checkpoint, "resume", interrupt=False)
    assert "RAISED nothing" in resumed, resumed
    _check_cleanup_came_last(resumed)
    assert "HANG FAILED" in resumed  # its timeout passed; the job went on
    assert f"TOTAL {sum(len(n) for n in files)}" in resumed
    assert int(resumed[-1].removeprefix("PEAK DB ")) <= 2
    assert any(line in ("PEAK RESOURCE DB 1", "PEAK RESOURCE DB 2") for line in resumed)
    # The rerun runs only the items that had not finished, the new file among
    # them; every item stored before the SIGINT loads (today every item runs again).
    rerun = _started(resumed)
    unfinished = set(files) - stored
    assert unfinished - maybe_stored <= rerun <= unfinished, (sorted(rerun), first)
    assert {"new.txt", "slow.txt"} <= rerun
    # The flaky uploads that ran again were retried: two starts each.
    for name in ("flaky1.txt", "flaky2.txt"):
        assert resumed.count(f"ITEM START {name}") == (2 if name in rerun else 0), resumed
    # The hang blocks for 30 s past its 0.3 s timeout; the caller did not wait
    # for it (today it waited for the hanging thread to return).
    returned = next(line for line in resumed if line.startswith("RETURNED "))
    assert float(returned.removeprefix("RETURNED ")) < 0.3 + 2.0, resumed
