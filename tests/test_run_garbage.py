"""A finished run leaves nothing for the cyclic garbage collector.

A run's parts that refer back to one another (the state and a bound method of
its own, a map's Fanout, the cleanup gate, the resource accounts, the attempt
timers and the run) used to form reference cycles: each run's state, with the
values still in its columns, then lived until the next cyclic collection, and
every small run fed the collector a dozen objects. A run now breaks them when
it ends, so reference counting frees it at once. Checked per kind of run, with
the collector paused and every unreachable object kept for inspection.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import dagexec
from dagexec.testing import InFlightRecorder


@pytest.fixture
def collector_paused() -> Iterator[None]:
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def _on_cycles(objects: list[object]) -> list[object]:
    """Those of ``objects`` that lie on a reference cycle among them.

    On a free-threaded build the collector also finds objects that are in no
    cycle: a worker made them (a report) and the caller dropped them, and such
    objects are freed later, when the thread that made them merges its counts.
    Only the ones on a cycle would never go without the collector."""
    ids = {id(o): o for o in objects}
    cyclic = []
    for start in objects:
        seen: set[int] = set()
        stack = [r for r in gc.get_referents(start) if id(r) in ids]
        while stack:
            o = stack.pop()
            if o is start:
                cyclic.append(start)
                break
            if id(o) not in seen:
                seen.add(id(o))
                stack.extend(r for r in gc.get_referents(o) if id(r) in ids)
    return cyclic


def _cyclic_garbage(run: Callable[[], object]) -> Counter[str]:
    """What three more calls of ``run`` leave on reference cycles, which only the
    cyclic GC would free, by type."""
    run()  # warm: plans cached, threads started
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    for _ in range(3):
        run()
    gc.collect()
    found = Counter(type(o).__name__ for o in _on_cycles(list(gc.garbage)))
    gc.garbage.clear()
    gc.set_debug(0)
    return found


def _pair(**options: object) -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("a", lambda: 1, **options)  # type: ignore[arg-type]
    g.add("b", lambda a: a + 1, deps=["a"])
    return g


def one() -> int:
    """A task a child process can find by module and name (isolate="process")."""
    return 1


def _in_a_process() -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("a", one, isolate="process")
    g.add("b", lambda a: a + 1, deps=["a"])
    return g


def _graphs() -> dict[str, tuple[dagexec.Graph, dict[str, object]]]:
    mapped = dagexec.Graph()
    mapped.add("xs", lambda: [1, 2, 3])
    mapped.map("m", lambda x: x * 2, over="xs")
    cleanup = _pair()
    cleanup.add("tidy", lambda b: None, deps=["b"], run_if="all_done")
    failing = _pair()
    failing.add("bad", lambda: 1 / 0)
    return {
        "plain": (_pair(), {}),
        "traced": (_pair(), {"trace": True}),
        "callbacks": (_pair(), {"callbacks": [InFlightRecorder()]}),
        "retries and timeout": (_pair(retries=1, timeout=30), {}),
        "priority": (_pair(priority=3), {}),
        "resources": (_pair(resources={"slot": 1}), {"resources": {"slot": 1}}),
        "map": (mapped, {}),
        "cleanup task": (cleanup, {}),
        "a failure, continue": (failing, {"on_error": "continue"}),
        "run timeout": (_pair(), {"timeout": 30}),
        "process task": (_in_a_process(), {}),
    }


@pytest.mark.parametrize("kind", list(_graphs()))
def test_a_run_leaves_no_cycles(kind: str, collector_paused: None) -> None:
    graph, options = _graphs()[kind]
    with dagexec.Executor(workers=2) as ex:
        assert _cyclic_garbage(lambda: ex.run(graph, **options)) == Counter()  # type: ignore[arg-type]


def test_a_run_that_raises_leaves_no_cycles(collector_paused: None) -> None:
    failing = _pair()
    failing.add("bad", lambda: 1 / 0)

    def run_and_catch(ex: dagexec.Executor) -> None:
        with pytest.raises(ZeroDivisionError):
            ex.run(failing)

    with dagexec.Executor(workers=2) as ex:
        assert _cyclic_garbage(lambda: run_and_catch(ex)) == Counter()


def test_a_checkpointed_run_leaves_no_cycles(collector_paused: None, tmp_path: Path) -> None:
    graph = _pair()
    path = tmp_path / "cp.sqlite"
    with dagexec.Executor(workers=2) as ex:
        assert _cyclic_garbage(lambda: ex.run(graph, checkpoint=path)) == Counter()


def test_fresh_and_submitted_runs_leave_no_cycles(collector_paused: None) -> None:
    graph = _pair()
    assert _cyclic_garbage(lambda: dagexec.run(graph, workers=2)) == Counter()
    with dagexec.Executor(workers=2) as ex:
        assert _cyclic_garbage(lambda: ex.submit(graph).result()) == Counter()
