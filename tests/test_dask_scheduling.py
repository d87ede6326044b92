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


def test_annotated_resources_hold_while_a_dask_callback_is_active() -> None:
    """Today the callback path rebuilt the graph without the annotations: 4 ran at once."""
    from dask.callbacks import Callback

    gate, probe = Gate(), ConcurrencyProbe()

    def work(i: int) -> int:
        with probe:
            gate.wait()
            return i

    with dask.annotate(resources={"GPU": 1}):
        parts = [dask.delayed(work, pure=False)(i) for i in range(6)]
    total = dask.delayed(sum)(parts)
    finished: list[object] = []

    def compute() -> object:
        with Callback(posttask=lambda key, *_: finished.append(key)):  # type: ignore[no-untyped-call]
            return dask.compute(
                total,
                scheduler=dagexec.dask.get,
                optimize_graph=False,
                num_workers=4,
                resources={"GPU": 1},
            )

    future = run_in_thread(compute)
    assert gate.wait_for_waiting(1)
    assert probe.active == 1
    gate.open()
    assert future.result(timeout=30) == (15,)
    assert probe.peak == 1
    assert len(finished) == 7  # the callback saw every task


def test_annotated_retries_are_honoured() -> None:
    attempts: list[int] = []

    def flaky() -> int:
        attempts.append(1)
        if len(attempts) < 3:
            raise OSError("transient")
        return 7

    with dask.annotate(retries=2):
        part = dask.delayed(flaky, pure=False)()
    assert dask.compute(part, scheduler=dagexec.dask.get, optimize_graph=False) == (7,)
    assert len(attempts) == 3
    attempts.clear()
    with dask.annotate(retries=1):
        part = dask.delayed(flaky, pure=False)()
    with pytest.raises(OSError, match="transient"):
        dask.compute(part, scheduler=dagexec.dask.get, optimize_graph=False)
    assert len(attempts) == 2


def test_annotated_priorities_decide_among_ready_tasks() -> None:
    ran: list[int] = []
    parts = []
    for i in (3, 1, 4, 0, 2):
        with dask.annotate(priority=float(i) if i % 2 else i):  # dask allows any number
            parts.append(dask.delayed(ran.append, pure=False)(i))
    dask.compute(parts, scheduler=dagexec.dask.get, optimize_graph=False, num_workers=1)
    assert ran == [4, 3, 2, 1, 0]


def test_a_bad_annotation_is_rejected_naming_the_task() -> None:
    with dask.annotate(retries=1.5):
        part = dask.delayed(abs, pure=False)(-1)
    with pytest.raises(TypeError, match=r"annotated with retries=1.5.*whole number"):
        dask.compute(part, scheduler=dagexec.dask.get, optimize_graph=False)


def _f1() -> float:
    return 1 / 0


def _f2() -> float:
    return _f1() + 5


def _f3() -> float:
    return _f2() + 1


def test_a_task_traceback_has_no_dagexec_frames() -> None:
    """dask's test_compute_shorten_traceback, with dagexec as the scheduler."""
    import traceback

    with pytest.raises(ZeroDivisionError) as info:
        dask.compute(dask.delayed(_f3)(), scheduler=dagexec.dask.get)
    names = [frame.f_code.co_name for frame, _ in traceback.walk_tb(info.tb)]
    assert names == [
        "test_a_task_traceback_has_no_dagexec_frames",
        "compute",
        "_f3",
        "_f2",
        "_f1",
    ]


def test_dagexec_is_a_named_dask_scheduler() -> None:
    from dask.base import get_scheduler

    with dask.config.set(scheduler="dagexec"):
        assert get_scheduler() is dagexec.dask.get  # type: ignore[no-untyped-call]
        assert dask.compute(dask.delayed(sum)([1, 2])) == (3,)
