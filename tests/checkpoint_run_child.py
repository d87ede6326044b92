"""A process for the engine-level crash tests: ``dagexec.run(graph, checkpoint=PATH)``.

Usage: ``python checkpoint_run_child.py PATH``. It prints, one line each, flushed
at once so the parent knows how far it got:

* ``RAN <name>``: a task started computing (it was not loaded from the file);
* ``TOTAL <hex>``: the run's result (the value of ``total``) once it is over.

The graph: three chains of ten tasks (each chain fused into one unit by the
planner, so every member of a fused chain saves its value) and a join.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagexec

_out = threading.Lock()
CHAINS = 3
LENGTH = 10


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def work(seed: bytes) -> bytes:
    for _ in range(200):  # some work, so the writer commits while tasks still run
        seed = hashlib.sha256(seed * 64).digest()
    return seed


def first(name: str) -> bytes:
    say(f"RAN {name}")
    return work(name.encode())


def step(previous: bytes, name: str) -> bytes:
    say(f"RAN {name}")
    return work(previous + name.encode())


def join(*parts: bytes) -> bytes:
    say("RAN total")
    return hashlib.sha256(b"".join(parts)).digest()


def build() -> dagexec.Graph:
    g = dagexec.Graph()
    for c in range(CHAINS):
        g.add(f"c{c}-0", first, args=(f"c{c}-0",))
        for i in range(1, LENGTH):
            name = f"c{c}-{i}"
            g.add(name, step, deps=[f"c{c}-{i - 1}"], args=(name,))
    g.add("total", join, deps=[f"c{c}-{LENGTH - 1}" for c in range(CHAINS)])
    return g


if __name__ == "__main__":
    result = dagexec.run(build(), checkpoint=sys.argv[1], workers=2)
    say(f"TOTAL {result['total'].hex()}")
