"""A process for the map resume test: a nightly batch over the files of a directory.

Usage: ``BLOCK=NAME python checkpoint_map_child.py CHECKPOINT DIR``. The file
lister runs every time (``checkpoint=False``); each file is parsed by an item of
``g.map``; ``total`` sums them. The item for the file named by the environment
variable ``BLOCK`` says ``BLOCK`` and waits forever, so the parent can send
SIGINT while it runs. (Read from the environment when called, not from a
closure: what a task closes over is part of its identity.) Prints, one line each
and flushed: ``RAN <what>`` when a task computes, ``TOTAL <n>`` at the end,
``INTERRUPTED`` on Ctrl-C.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagexec

_out = threading.Lock()


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def build(directory: str) -> dagexec.Graph:
    g = dagexec.Graph()

    @g.task(checkpoint=False)
    def files() -> list[str]:
        say("RAN files")
        return sorted(os.path.join(directory, f) for f in os.listdir(directory))

    def parse(path: str) -> int:
        name = os.path.basename(path)
        say(f"RAN parse {name}")
        if name == os.environ.get("BLOCK"):
            say("BLOCK")
            threading.Event().wait()  # until the process ends
        with open(path) as f:
            return len(f.read())

    g.map("parsed", parse, over="files")

    def total(parsed: list[int]) -> int:
        say("RAN total")
        return sum(parsed)

    g.add("total", total, deps=["parsed"])
    return g


if __name__ == "__main__":
    path, directory = sys.argv[1:3]
    try:
        result = dagexec.run(build(directory), ["total"], checkpoint=path, workers=1)
    except KeyboardInterrupt:
        say("INTERRUPTED")
        sys.exit(3)
    say(f"TOTAL {result['total']}")
