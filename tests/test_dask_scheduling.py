"""dagexec.dask.get honours dask.order's priorities and dask.annotate(resources=...)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dagexec.testing import ConcurrencyProbe, Gate, run_in_thread

dask = pytest.importorskip("dask", reason="needs the dask extra: pip install -e '.[dask]'")

import dagexec.dask  # noqa: E402


@pytest.fixture(autouse=True)
def _stop_cached_workers() -> Iterator[None]:
    # get() keeps an executor per calling thread, as dask.threaded keeps its pool.
    yield
    dagexec.dask.shutdown()


def test_ready_tasks_are_taken_in_dask_order() -> None:
    """dask's own test_ordering, on one worker: dask.order runs ('x', 9) first."""
    ran: list[int] = []
    dsk: dict[object, object] = {("x", i): (ran.append, i) for i in range(10)}
    dsk["y"] = (lambda *args: None, sorted(dsk))
    dagexec.dask.get(dsk, "y", num_workers=1)
    assert ran == sorted(ran, reverse=True)


def test_annotated_resources_bound_the_tasks_holding_them() -> None:
    gate, probe = Gate(), ConcurrencyProbe()

    def work(i: int) -> int:
        with probe:
            gate.wait()
            return i

    with dask.annotate(resources={"GPU": 1}):
        parts = [dask.delayed(work, pure=False)(i) for i in range(6)]
    total = dask.delayed(sum)(parts)
    future = run_in_thread(
        dask.compute,
        total,
        scheduler=dagexec.dask.get,
        optimize_graph=False,  # dask drops annotations when it fuses the graph
        num_workers=4,
        resources={"GPU": 2},
    )
    assert gate.wait_for_waiting(2)
    assert probe.active == 2  # four workers, two gpus: the others wait
    gate.open()
    assert future.result(timeout=30) == (15,)
    assert probe.peak == 2


def test_an_annotated_resource_without_capacity_is_rejected_before_running() -> None:
    ran: list[int] = []
    with dask.annotate(resources={"GPU": 1}):
        part = dask.delayed(ran.append, pure=False)(1)
    with pytest.raises(
        ValueError, match=r"annotated with resource 'GPU', which has no capacity"
    ) as info:
        dask.compute(part, scheduler=dagexec.dask.get, optimize_graph=False)
    assert ran == []
    # The fix it points to is the dask one, not Executor/run which a dask user never calls.
    message = str(info.value)
    assert "resources={'GPU': ...} to dagexec.dask.get(" in message
    assert "'dagexec.resources'" in message
    with dask.config.set({"dagexec.resources": {"GPU": 1}}):
        dask.compute(part, scheduler=dagexec.dask.get, optimize_graph=False)
    assert ran == [1]
