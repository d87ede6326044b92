"""What ``logs=`` costs, in instructions (issue 35's targets), counted as gate.py counts.

``python benchmarks/logs_cost.py [--src PATH] [--tasks 2000] [--records 1000]``

Each figure is cachegrind's instruction count (``--cache-sim=no``) of a process
that runs its case three times minus one that runs it once, halved: start-up,
import and graph building cancel out, and the count does not move with the
machine's load. Cases:

* ``quiet``: the speed gate's wide graph (2,000 no-op tasks, one worker), per
  task, with ``logs=False`` and with ``logs=True``: the cost of capturing when no
  task logs (target: <= 1.05x);
* ``records``: one task logging 1,000 INFO records (``log.info("record %d", i)``),
  per record: captured with ``logs=True`` (the program's logging left as it is,
  WARNING), against ``logs=False`` with the logger at INFO and a
  ``StreamHandler`` writing to ``os.devnull``, the same records sent to a handler
  writing to a null stream (target: <= 1.5x). Also both at once: the user's
  handler and the capture.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import logging, os, sys
src, case = sys.argv[1], sys.argv[2]
repeat, tasks, records = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
sys.path[:0] = [src, {here!r}]
import dagexec
log = logging.getLogger("bench")
g = dagexec.Graph()
if case.startswith("quiet"):
    from workloads import WORKLOADS
    spec = WORKLOADS["wide"](True)
    for name, (fn, deps) in spec.tasks.items():
        g.add(name, fn, deps=deps)
    targets = spec.targets
else:
    def chatty():
        for i in range(records):
            log.info("record %d", i)
    g.add("chatty", chatty)
    targets = None
    if case in ("records-handler", "records-both"):
        handler = logging.StreamHandler(open(os.devnull, "w"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
logs = case in ("quiet-logs", "records-logs", "records-both")
with dagexec.Executor(workers=1) as ex:
    ex.run(g, targets, logs=logs)  # warm: plan cached, threads started, logging imported
    for _ in range(repeat):
        ex.run(g, targets, logs=logs)
"""


def count(src: str, case: str, repeat: int, tasks: int, records: int) -> int:
    script = CHILD.format(here=str(HERE))
    cmd = [sys.executable, "-S", "-c", script, src, case, str(repeat), str(tasks), str(records)]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                f"--cachegrind-out-file={out}",
                *cmd,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=True,
        )
    m = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
    assert m, proc.stderr[-2000:]
    return int(m.group(1).replace(",", ""))


def per_run(src: str, case: str, tasks: int, records: int) -> float:
    """Instructions of one warm run of ``case``: (three runs - one run) / 2."""
    return (count(src, case, 3, tasks, records) - count(src, case, 1, tasks, records)) / 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--src", default=str(HERE.parent), help="the dagexec checkout to measure")
    p.add_argument("--records", type=int, default=1000)
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from workloads import WORKLOADS

    tasks = WORKLOADS["wide"](True).tasks_run
    off = per_run(args.src, "quiet", tasks, args.records) / tasks
    on = per_run(args.src, "quiet-logs", tasks, args.records) / tasks
    print(f"no task logs, per task ({tasks} tasks, 1 worker):")
    print(f"  logs=False {off:10,.0f}   logs=True {on:10,.0f}   {on / off:.3f}x (target <= 1.05x)")
    n = args.records
    handler = per_run(args.src, "records-handler", tasks, n) / n
    captured = per_run(args.src, "records-logs", tasks, n) / n
    both = per_run(args.src, "records-both", tasks, n) / n
    print(f"one task logging {n} INFO records, per record:")
    print(f"  to a handler writing to os.devnull (logs=False) {handler:10,.0f}")
    print(
        f"  captured (logs=True, logging left at WARNING)   {captured:10,.0f}   "
        f"{captured / handler:.3f}x (target <= 1.5x)"
    )
    print(
        f"  both: the devnull handler and the capture        {both:10,.0f}   {both / handler:.3f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
