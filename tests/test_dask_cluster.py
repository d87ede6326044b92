"""dagexec graphs on a dask cluster: run_on / submit_on / to_dask carry every option a
cluster can honour and refuse the rest before anything is sent (docs/dask.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any

import pytest

import dagexec

dask = pytest.importorskip(
    "dask", reason="needs the dask extra: pip install -e '.[dask]' from a clone"
)
distributed = pytest.importorskip("distributed", reason="needs the dask extra")

import dagexec.dask as dd  # noqa: E402

pytestmark = pytest.mark.dask


class RecordingClient:
    """Stands in for a Client: declares one GPU, and proves nothing was sent."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(args)
        raise AssertionError("nothing should be sent")

    submit = get

    def nthreads(self) -> dict[str, int]:
        return {"tcp://w1": 1}

    def scheduler_info(self) -> dict[str, Any]:
        return {"workers": {"tcp://w1": {"resources": {"gpu": 1}}}}


@pytest.fixture(scope="module")
def offload_thread() -> None:
    from distributed.utils import _offload_executor

    _offload_executor.submit(int).result(timeout=30)


@pytest.fixture
def client(offload_thread: None) -> Iterator[Any]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,
            dashboard_address=":0",  # a free port: None still binds 8787
            host="127.0.0.1",
            protocol="tcp://",
            silence_logs=logging.CRITICAL,
            resources={"gpu": 1},
        ) as cluster,
        Client(cluster, timeout=30) as c,
    ):
        yield c


def _bump(path: Path) -> int:
    """Count a call in a file: observable whatever process the task ran in."""
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return n


# ------------------------------------------------------------------ keys
def test_two_graphs_on_one_client_never_share_a_key(client: Any) -> None:
    """Today both used the key "total": the second got the first one's value."""
    first, second = dagexec.Graph(), dagexec.Graph()
    first.add("total", lambda: 1)
    second.add("total", lambda: 2)
    dsk, keys = dd.to_dask(first)
    held = client.get(dsk, keys, sync=False)  # the first graph's value stays on the cluster
    assert dd.run_on(client, second)["total"] == 2
    assert held[0].result() == 1
    assert dd.to_dask(first)[1] != keys  # a new token per call


# ------------------------------------------------------------ what carries over
def _mapped() -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("xs", lambda: [1, 2, 3])
    g.map("sq", lambda x: x * x, over="xs")
    g.map("plus", lambda x, k: x + k, over="sq", deps=["k"])
    g.add("k", lambda: 10)
    g.add("total", sum, deps=["plus"])
    return g


def test_maps_give_the_values_of_a_local_run(client: Any) -> None:
    """Today the mapped function got the whole list (28 instead of 3 items' sum)."""
    on_cluster, local = dd.run_on(client, _mapped()), dagexec.run(_mapped())
    assert dict(on_cluster) == dict(local) == {"total": 44}
    assert dict(on_cluster.status) == dict(local.status)


def _with_cleanup() -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("ok", lambda: 1)
    g.add("bad", lambda: 1 / 0)
    g.add("after_bad", lambda b: b, deps=["bad"])
    g.add(
        "cleanup",
        lambda *args: [type(a).__name__ for a in args],
        deps=["ok", "bad", "after_bad"],
        run_if="all_done",
    )
    g.add("fine", lambda: 3)
    return g


def test_on_error_continue_and_cleanup_tasks_end_as_in_a_local_run(client: Any) -> None:
    on_cluster = dd.run_on(client, _with_cleanup(), on_error="continue")
    local = dagexec.run(_with_cleanup(), on_error="continue")
    assert dict(on_cluster) == dict(local)
    assert on_cluster["cleanup"] == ["int", "ZeroDivisionError", "Missing"]
    assert dict(on_cluster.status) == dict(local.status)
    assert set(on_cluster.errors) == {"bad"}
    assert isinstance(on_cluster.errors["bad"], ZeroDivisionError)


def test_a_failure_reaches_the_caller_naming_its_task(client: Any) -> None:
    with pytest.raises(ZeroDivisionError) as info:
        dd.run_on(client, _with_cleanup(), ["after_bad"])
    assert "dagexec: raised by task 'bad'" in info.value.__notes__


def test_retries_on_any_exception_carry_over(client: Any, tmp_path: Path) -> None:
    calls = tmp_path / "calls"

    def flaky() -> int:
        if _bump(calls) < 3:
            raise OSError("transient")
        return 7

    g = dagexec.Graph()
    g.add("flaky", flaky, retries=2)
    assert dd.run_on(client, g)["flaky"] == 7
    assert calls.read_text() == "3"


def test_priority_resources_and_retries_become_dask_annotations() -> None:
    g = dagexec.Graph()
    g.add("plain", lambda: 1)
    g.add("urgent", lambda: 2, priority=5, resources={"gpu": 1}, retries=2)
    dsk, _ = dd.to_dask(g, ["plain", "urgent"])
    annotated = {k: layer.annotations for layer in dsk.layers.values() for k in layer}
    [urgent] = [k for k in annotated if str(k).startswith("urgent-")]
    [plain] = [k for k in annotated if str(k).startswith("plain-")]
    assert annotated[urgent] == {"priority": 5, "resources": {"gpu": 1}, "retries": 2}
    assert not annotated[plain]


def test_declared_resources_run(client: Any) -> None:
    g = dagexec.Graph()
    for i in range(3):
        g.add(f"gpu{i}", lambda i=i: i, resources={"gpu": 1})
    g.add("total", lambda *xs: sum(xs), deps=[f"gpu{i}" for i in range(3)])
    assert dd.run_on(client, g)["total"] == 3


def test_client_kwargs_reach_client_get(client: Any) -> None:
    [worker] = client.nthreads()
    g = dagexec.Graph()
    g.add("here", lambda: 1)
    assert dd.run_on(client, g, client_kwargs={"workers": [worker]})["here"] == 1


def test_submit_on_returns_a_run_that_distributed_progress_follows(client: Any) -> None:
    run = dd.submit_on(client, _mapped())
    distributed.progress(run, notebook=False)  # finds the run's futures; waits for them
    assert dict(run.result(timeout=60)) == {"total": 44}
    assert run.done()


def test_a_run_lets_go_of_its_keys_without_cancelling_the_clients_other_futures(
    client: Any,
) -> None:
    """Targets "a" and "c" of a -> b -> c: "b", which no client wants, depends on a
    target. The run used to end with Client.cancel, on which distributed's scheduler
    fails an assertion at "b" and drops the client's connection; the client then
    cancelled every future it held, another run's too (a flaky FuturesCancelledError
    in the conformance suite, whose runs share one client)."""
    held = client.submit(int, "41", pure=False)
    assert held.result(timeout=30) == 41
    g = dagexec.Graph()
    g.add("a", lambda: 2)
    g.add("b", lambda a: a * 3, deps=["a"])
    g.add("c", lambda b: b + 1, deps=["b"])
    assert dict(dd.run_on(client, g, ["a", "c"])) == {"a": 2, "c": 7}
    # The stream to the scheduler is ordered: this is handled after the run's release.
    assert client.submit(int, "42", pure=False).result(timeout=30) == 42
    assert held.status == "finished" and held.result() == 41


def test_cancel_ends_a_run_in_flight_and_the_client_works_on(client: Any) -> None:
    """cancel() lets go of the run: it ends cancelled at once, the scheduler forgets
    every task of it (what had not started never runs), the client's own futures stay."""
    # Named gates on the scheduler (the task's function travels pickled).
    started, gate = distributed.Event("started"), distributed.Event("gate")

    def blocks(_: Any) -> int:
        started.set()
        gate.wait(30)
        return 1

    g = dagexec.Graph()
    g.add("a", lambda: 0)
    g.add("blocks", blocks, deps=["a"])
    g.add("after", lambda b: b, deps=["blocks"])
    g.add("other", lambda a: a, deps=["a"])
    held = client.submit(int, "5", pure=False)
    run = dd.submit_on(client, g, ["after", "other"])
    try:
        assert started.wait(30)
        run.cancel()
        with pytest.raises(CancelledError, match="the run was cancelled") as raised:
            run.result(timeout=30)
        # Exactly what a local run's future raises, not distributed's subclass.
        assert type(raised.value) is CancelledError
        assert run.cancelled()
        # The stream to the scheduler is ordered: once this is back, the release was handled.
        assert client.submit(int, "6", pure=False).result(timeout=30) == 6
        token = run.cg.token
        left = client.run_on_scheduler(
            lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks if token in str(k)]
        )
        assert left == []
    finally:
        gate.set()
    assert held.result(timeout=30) == 5


# ---------------------------------------------------------------- what is refused
@pytest.mark.parametrize(
    ("option", "value", "hint"),
    [
        ("trace", True, "task stream"),
        ("progress", True, "distributed.progress"),
        ("timeout", 5.0, "run.result"),
        ("callbacks", [object()], "diagnostics"),
        ("resources", {"gpu": 1}, "--resources"),
    ],
)
def test_run_options_a_cluster_cannot_honour_are_type_errors(
    option: str, value: object, hint: str
) -> None:
    client = RecordingClient()
    g = dagexec.Graph()
    g.add("a", lambda: 1)
    with pytest.raises(TypeError, match=f"{option}=.*{hint}"):
        dd.run_on(client, g, **{option: value})
    assert client.calls == []


def test_client_get_options_moved_to_client_kwargs() -> None:
    client = RecordingClient()
    g = dagexec.Graph()
    g.add("a", lambda: 1)
    with pytest.raises(TypeError, match=r"'workers'.*client_kwargs=\{'workers': \.\.\.\}"):
        dd.run_on(client, g, workers=["tcp://w1"])
    assert client.calls == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"resources": {"tpu": 1}}, r"task 'x' needs resources=\{'tpu': 1\}.*--resources"),
        ({"resources": {"gpu": 2}}, r"task 'x' needs resources=\{'gpu': 2\}"),
        (
            {"resources": {"gpu": 1}, "timeout": 2},
            r"task 'x' has timeout=2 and resources=\{'gpu': 1\}.*frees the resources",
        ),
        ({"isolate": "process"}, r"task 'x' has isolate='process'.*drop isolate="),
        (
            {"timeout": 2},
            r"task 'x' has timeout=2 and the cleanup task 'after' \(run_if='all_done'\) runs after",
        ),
    ],
)
def test_task_options_a_cluster_cannot_honour_are_refused_before_sending(
    options: dict[str, Any], message: str, tmp_path: Path
) -> None:
    client = RecordingClient()
    g = dagexec.Graph()
    g.add("one", lambda: -1)
    g.add("x", abs, deps=["one"], **options)
    g.add("beside", repr, deps=["one"], run_if="all_done")  # not after "x": no bar to a timeout
    g.add("y", abs, deps=["x"])
    g.add("after", repr, deps=["y"], run_if="all_done")
    with pytest.raises(ValueError, match=message):
        dd.run_on(client, g, checkpoint=tmp_path / "run.db")
    with pytest.raises(ValueError, match=message):
        dd.submit_on(client, g)
    assert client.calls == []
    assert not (tmp_path / "run.db").exists()  # refused before the checkpoint is opened


def test_a_bad_checkpoint_path_is_refused_before_sending() -> None:
    client = RecordingClient()
    g = dagexec.Graph()
    g.add("a", lambda: 1)
    with pytest.raises(TypeError, match="checkpoint must be a file path"):
        dd.run_on(client, g, checkpoint=3)
    assert client.calls == []


def test_run_on_sends_the_tasks_of_to_dask_as_a_high_level_graph() -> None:
    """Client.get names a dict graph by hashing every task (pickling each function,
    ~0.2 ms a task) and a HighLevelGraph by a fresh token: run_on sends the latter,
    the same tasks, unannotated; to_dask keeps the plain dict."""
    from dask.highlevelgraph import HighLevelGraph

    from dagexec._integrations.dask_translate import translate

    g = dagexec.Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda a: a, deps=["a"])
    g.add("c", lambda a, b: a + b, deps=["a", "b"])
    cg = translate(g, None, None)
    plain, tasks = cg.first_graph()
    layered, same_tasks = cg.first_graph(layered=True)
    assert isinstance(plain, dict) and isinstance(layered, HighLevelGraph)
    assert same_tasks == tasks
    as_dict = layered.to_dict()
    assert {k: t.dependencies for k, t in as_dict.items()} == {
        k: t.dependencies for k, t in plain.items()
    }
    assert [t.func.name for t in as_dict.values()] == [t.func.name for t in plain.values()]
    assert all(not layer.annotations for layer in layered.layers.values())


def test_timeouts_and_retry_policies_travel_in_the_task_function() -> None:
    """What dask's annotations cannot say runs in dagexec's attempt loop on the worker;
    plain retries stay dask's own annotation, and a plain task gets no attempt loop."""
    from dagexec._integrations.dask_worker import Attempts, Named

    g = dagexec.Graph()
    g.add("plain", lambda: 1)
    g.add("timed", lambda: 2, timeout=3.0)
    g.add("delayed", lambda: 3, retries=2, retry_delay=0.5, retry_on=OSError)
    dsk, _ = dd.to_dask(g, ["plain", "timed", "delayed"])
    assert isinstance(dsk, dict)  # no annotations: "delayed" is not retried by dask too
    tasks = {str(k).split("-")[0]: t for k, t in dsk.items()}
    assert type(tasks["plain"].func) is Named
    assert isinstance(tasks["timed"].func, Attempts)
    assert isinstance(tasks["delayed"].func, Attempts)
    assert tasks["timed"]() == 2 and tasks["delayed"]() == 3


def _counted(path: Path, value: int) -> Any:
    def task(*_: Any) -> int:
        _bump(path)
        return value

    return task


def test_a_checkpoint_is_shared_by_cluster_and_local_runs(client: Any, tmp_path: Path) -> None:
    """Saved by the client under a local run's identities: each resumes from the other."""

    def graph() -> dagexec.Graph:
        g = dagexec.Graph()
        g.add("a", _counted(tmp_path / "a", 1))
        g.add("b", _counted(tmp_path / "b", 2), deps=["a"])
        g.add("c", _counted(tmp_path / "c", 3), deps=["a"])
        return g

    db = tmp_path / "run.db"
    first = dd.run_on(client, graph(), ["b"], checkpoint=db)
    assert dict(first) == {"b": 2} and first.stats.tasks_loaded == 0
    local = dagexec.run(graph(), ["b"], checkpoint=db)  # loads what the cluster run saved
    assert dict(local) == {"b": 2} and local.stats.tasks_run == 0
    assert [(tmp_path / n).read_text() for n in "ab"] == ["1", "1"]
    dagexec.run(graph(), ["c"], checkpoint=db)  # saves c (and a) locally
    again = dd.run_on(client, graph(), ["b", "c"], checkpoint=db)
    assert dict(again) == {"b": 2, "c": 3}
    assert again.stats.tasks_loaded == 2 and again.stats.tasks_run == 0
    assert [(tmp_path / n).read_text() for n in "abc"] == ["2", "1", "1"]


def test_to_dask_refuses_what_only_the_client_can_drive() -> None:
    with pytest.raises(ValueError, match=r"task 'sq' is a g\.map.*run_on"):
        dd.to_dask(_mapped())
    with pytest.raises(ValueError, match=r"task 'cleanup' has run_if='all_done'"):
        dd.to_dask(_with_cleanup())


def test_a_rerun_after_a_failure_loads_the_targets_that_finished(
    client: Any, tmp_path: Path
) -> None:
    """Saved: the targets the client received. Not saved: values that stayed on the
    workers ("a"), which the rerun computes again for the target that failed."""
    broken = tmp_path / "broken"
    broken.write_text("1")

    def flaky(a: int) -> int:
        _bump(tmp_path / "bad")
        if broken.exists():
            raise OSError("down")
        return a + 2

    g = dagexec.Graph()
    g.add("a", _counted(tmp_path / "a", 1))
    g.add("ok", lambda a: _bump(tmp_path / "ok") and a + 1, deps=["a"])
    g.add("bad", flaky, deps=["a"])
    db = tmp_path / "run.db"
    first = dd.run_on(client, g, ["ok", "bad"], on_error="continue", checkpoint=db)
    assert dict(first) == {"ok": 2} and set(first.errors) == {"bad"}
    broken.unlink()
    again = dd.run_on(client, g, ["ok", "bad"], checkpoint=db)
    assert dict(again) == {"ok": 2, "bad": 3}
    assert again.stats.tasks_loaded == 1  # "ok"
    counts = [(tmp_path / n).read_text() for n in ("a", "ok", "bad")]
    assert counts == ["2", "1", "2"]
