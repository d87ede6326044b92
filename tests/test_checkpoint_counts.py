"""What a resumed run counts as loaded and as run (issue 19).

A task a checkpointed run loads is not executed: it counts in
``RunStats.tasks_loaded``, never in ``tasks_run``, whether the plan loaded it
before the run (static) or its wrapper decided to load it during the run
(downstream of a ``checkpoint=False`` task or of a map, and each map item).
``tasks_per_worker`` counts every task handed to a worker, loaded ones too
(see docs/checkpoints.md), and ``assert_within_bounds`` holds on such a run.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import dagexec
from dagexec.testing import InFlightRecorder, assert_within_bounds


def _job(calls: list[Any], lock: threading.Lock) -> dagexec.Graph:
    def called(name: Any) -> bool:
        """Record ``name``; False, so that ``called(name) or value`` is the value."""
        with lock:
            calls.append(name)
        return False

    g = dagexec.Graph()
    g.add("xs", lambda: called("xs") or [1, 2, 3], checkpoint=False)  # runs every time
    g.map("ys", lambda x: called(("ys", x)) or x * 10, over="xs")  # 3 items, each loaded
    g.add("total", lambda ys: called("total") or sum(ys), deps=["ys"])  # loaded during the run
    g.add("k", lambda: called("k") or 7)  # static: the plan loads it
    g.add("out", lambda total, k: called("out") or total + k, deps=["total", "k"])
    return g


def test_a_resumed_run_counts_what_it_loaded_as_loaded(tmp_path: Path) -> None:
    calls: list[Any] = []
    g = _job(calls, threading.Lock())
    path = tmp_path / "c.sqlite"
    first = dagexec.run(g, workers=2, checkpoint=path)
    assert first["out"] == 67
    assert first.stats.tasks_loaded == 0
    assert first.stats.tasks_run == 7  # xs, 3 items, total, k, out
    assert_within_bounds(first)

    calls.clear()
    recorder = InFlightRecorder()
    again = dagexec.run(g, workers=2, checkpoint=path, callbacks=[recorder])
    assert again["out"] == 67
    assert calls == ["xs"]  # only the checkpoint=False task ran
    s = again.stats
    # k (static), the 3 items and total (decided during the run), out (downstream
    # of total, so also decided during the run) were all loaded.
    assert s.tasks_loaded == 6, s
    assert s.tasks_run == 1, s  # today 6: the tasks loaded during the run counted as run
    assert sum(s.tasks_per_worker) == s.tasks_run + s.tasks_loaded, s
    assert_within_bounds(again)  # today: tasks_per_worker does not add up to tasks_run
    assert recorder.in_flight == 0
