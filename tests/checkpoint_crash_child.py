"""A process for the crash tests: run a chain of tasks, checkpointing each value.

Usage: ``python checkpoint_crash_child.py PATH COUNT DURABLE`` (DURABLE: 1 or 0).
It prints, one line each, flushed at once so the parent knows how far it got:

* ``START <n>``: opened the store and planned the resume (``dagexec._persist.resume``):
  ``n`` tasks need not run;
* ``RAN <identity hex>``: computed a task (it was not in the store);
* ``COMMITTED <identity hex>``: the store reported the value committed;
* ``END``: every task is in the store and the store is closed.

The parent kills it with SIGKILL after a random number of commits and checks the file. The values
mix small ones and 256 KiB ones, so a kill often lands inside a transaction.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from typing import Any

from dagexec._persist.checkpoint import CheckpointStore
from dagexec._persist.identity import task_identities
from dagexec._persist.resume import resume


def step(previous: bytes, i: int) -> bytes:
    """Task ``i`` of the chain: a value that depends on every task before it."""
    seed = hashlib.sha256(previous[:32] + i.to_bytes(4, "big")).digest()
    for _ in range(20):  # about a millisecond of work, so commits spread over time
        seed = hashlib.sha256(seed * 512).digest()
    return seed * (8192 if i % 5 == 0 else 1)  # 256 KiB or 32 bytes


def chain(count: int) -> tuple[list[Any], list[bytes]]:
    """The graph's identities and the value of every task in an uninterrupted run."""
    names = [f"step-{i}" for i in range(count)]
    fns = [step] * count
    deps = [()] + [(i - 1,) for i in range(1, count)]
    args = [(i,) for i in range(count)]
    ids = task_identities(names, fns, deps, args)
    values = []
    previous = b""
    for i in range(count):
        previous = step(previous, i)
        values.append(previous)
    return ids, values


def main(path: str, count: int, durable: bool) -> None:
    ids, _ = chain(count)
    out = threading.Lock()

    def say(line: str) -> None:
        with out:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def on_commit(identities: list[bytes]) -> None:
        for identity in identities:
            say(f"COMMITTED {identity.hex()}")

    with CheckpointStore(path, durable=durable, on_commit=on_commit) as store:
        deps = [()] + [(i - 1,) for i in range(1, count)]
        run, results = resume(store, ids, deps, [count - 1])
        say(f"START {count - len(run)}")
        for i in sorted(run):  # a chain: the tasks to run are a suffix of it
            identity = ids[i]
            assert identity is not None
            say(f"RAN {identity.hex()}")
            results[i] = step(results[i - 1] if i else b"", i)
            store.save_nowait(identity, results[i], name=f"step-{i}")
            if i % 4 == 3:
                # Bound how far this process runs ahead of the parent reading its
                # output, so the kills spread over the whole chain; batches of up
                # to four values still go into one transaction.
                store.flush()
    say("END")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1")
