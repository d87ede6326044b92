"""End to end: the nightly job of issue 19, interrupted by a real SIGINT, then resumed.

The job (tests/nightly_job_child.py): files found at run time, ``g.map`` over
them holding a "db" resource of 2, a flaky step retried, a hanging step with a
per-task timeout blocking on an Event, a cleanup task deleting the scratch
directory. It runs in a child process, which the test interrupts with a real
SIGINT while uploads are still running, then runs again from its checkpoint.

What depends on other work of issue 19, and is left out here rather than
failing (marked ``# NEEDS`` below):

* map items are checkpointed, and ``checkpoint=False`` keeps the lister out
  of the store (the checkpoint work): the rerun runs only the items that had
  not finished, and sees a file added meanwhile;
* abandoned attempts (branch ``attempts``): the caller returns within the
  hang's timeout + 2 s, instead of waiting for the hanging thread to return.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).with_name("nightly_job_child.py")
FILES = ["a.txt", "b.txt", "flaky1.txt", "flaky2.txt", "slow.txt", "z.txt"]


def _run_child(data: Path, checkpoint: Path, mode: str, interrupt: bool) -> list[str]:
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(data), str(checkpoint), mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    seen: list[str] = []
    try:
        for line in child.stdout:
            seen.append(line.strip())
            if interrupt and "ITEM START slow.txt" in seen and "HANG START" in seen:
                child.send_signal(signal.SIGINT)
                interrupt = False
        child.wait(60)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    return seen


def _check_cleanup_came_last(lines: list[str]) -> None:
    """The cleanup task started once every upload attempt that began had returned."""
    cleanup = [i for i, line in enumerate(lines) if line.startswith("CLEANUP ")]
    assert len(cleanup) == 1, lines
    assert lines[cleanup[0]] == "CLEANUP running=0", lines
    before = lines[: cleanup[0]]
    starts = sum(line.startswith("ITEM START ") for line in before)
    ends = sum(line.startswith("ITEM END ") for line in before)
    assert starts == ends, lines
    assert not any(line.startswith("ITEM ") for line in lines[cleanup[0] :]), lines


def test_the_nightly_job_interrupted_then_resumed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for name in FILES:
        (data / name).write_text(name)
    checkpoint = tmp_path / "nightly.sqlite"

    first = _run_child(data, checkpoint, "first", interrupt=True)
    assert "RAISED KeyboardInterrupt" in first, first
    _check_cleanup_came_last(first)
    assert first.index("CLEANUP running=0") < first.index("RAISED KeyboardInterrupt")
    assert not (tmp_path / "scratch").exists()  # the cleanup ran to its end
    peak = int(first[-1].removeprefix("PEAK DB "))
    assert peak <= 2, first

    resumed = _run_child(data, checkpoint, "resume", interrupt=False)
    assert "RAISED nothing" in resumed, resumed
    _check_cleanup_came_last(resumed)
    assert "HANG FAILED" in resumed  # its timeout passed; the job went on
    assert f"TOTAL {sum(len(n) for n in FILES)}" in resumed
    assert int(resumed[-1].removeprefix("PEAK DB ")) <= 2
    assert any(line in ("PEAK RESOURCE DB 1", "PEAK RESOURCE DB 2") for line in resumed)
    # The flaky uploads were retried: two starts each for those that ran.
    for name in ("flaky1.txt", "flaky2.txt"):
        assert resumed.count(f"ITEM START {name}") in (0, 2), resumed
    # NEEDS map-item checkpoints: the rerun runs only the items that had not
    # finished in the first run (today every item runs again):
    #     finished = {l[9:] for l in first if l.startswith("ITEM END ")} ...
    # NEEDS checkpoint=False on list_files: a file added before the rerun is
    # found (today the stored list is loaded, so the new file is not seen).
    # NEEDS abandoned attempts: the resumed run returns within the hang's
    # timeout (0.3 s) + 2 s; today it waits for the hanging thread (1 s here).
