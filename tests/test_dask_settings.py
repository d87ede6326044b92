"""Every dask setting is honoured, refused by name, or ignored as dask's local schedulers
ignore it (dagexec/_integrations/dask_settings.py; docs/dask.md tables them)."""

from __future__ import annotations

import inspect
import re
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

dask = pytest.importorskip("dask", reason="needs the dask extra: pip install -e '.[dask]'")

import dagexec.dask  # noqa: E402
from dagexec._integrations import dask_settings  # noqa: E402

pytestmark = pytest.mark.dask

DOCS = Path(__file__).resolve().parent.parent / "docs" / "dask.md"


@pytest.fixture(autouse=True)
def _stop_cached_workers() -> Iterator[None]:
    yield
    dagexec.dask.shutdown()


def _documented_annotations() -> set[str]:
    """The annotations ``dask.annotate`` checks, read from its source."""
    import dask.base

    return set(re.findall(r'annotations\["(\w+)"\]', inspect.getsource(dask.base.annotate)))


def test_every_dask_setting_is_in_one_of_the_three_lists() -> None:
    import dask.local
    import dask.threaded

    settings = set(inspect.signature(dask.local.get_async).parameters)
    settings |= set(inspect.signature(dask.threaded.get).parameters)
    lists = (dask_settings.HONOURED, dask_settings.REFUSED, dask_settings.IGNORED)
    missing = sorted(s for s in settings if not any(s in listed for listed in lists))
    assert not missing, f"dask settings in none of the lists: {missing}"
    twice = [s for s in settings if sum(s in listed for listed in lists) > 1]
    assert not twice, twice
    annotations = _documented_annotations()
    assert {"priority", "retries", "resources", "workers"} <= annotations  # the reading works
    both = (dask_settings.ANNOTATIONS_HONOURED, dask_settings.ANNOTATIONS_IGNORED)
    unlisted = sorted(a for a in annotations if not any(a in listed for listed in both))
    assert not unlisted, f"dask annotations in neither list: {unlisted}"


def test_docs_table_every_setting_the_code_lists() -> None:
    text = DOCS.read_text()
    for listed in (
        dask_settings.HONOURED,
        dask_settings.REFUSED,
        dask_settings.IGNORED,
        dask_settings.ANNOTATIONS_HONOURED,
        dask_settings.ANNOTATIONS_IGNORED,
    ):
        for name in listed:
            assert f"`{name}`" in text, f"docs/dask.md does not list `{name}`"
    assert "dagexec.unknown-resources" in text


@pytest.mark.parametrize("name", sorted(dask_settings.REFUSED))
def test_a_refused_setting_is_a_type_error_naming_it(name: str) -> None:
    with pytest.raises(TypeError, match=rf"does not take {name}="):
        dagexec.dask.get({"a": (abs, -1)}, "a", **{name: object()})


def test_an_ignored_setting_changes_nothing() -> None:
    assert dagexec.dask.get({"a": (abs, -1)}, "a", chunksize=5, workers=["w"]) == 1


# ------------------------------------------------------------------- priorities
def test_any_number_is_a_priority_in_its_order() -> None:
    """dask.annotate(priority=0.5) made get raise TypeError; dask takes any number."""
    ran: list[str] = []
    parts = []
    for name, priority in (("low", -0.5), ("half", 0.5), ("none", None), ("quarter", 0.25)):
        if priority is None:
            parts.append(dask.delayed(ran.append, pure=False)(name))
            continue
        with dask.annotate(priority=priority):
            parts.append(dask.delayed(ran.append, pure=False)(name))
    dask.compute(
        parts, scheduler=dagexec.dask.get, optimize_graph=False, num_workers=1, max_in_flight=1
    )
    assert ran == ["half", "quarter", "none", "low"]


def test_dense_ranks_keep_order_and_zero() -> None:
    ranks = dask_settings.dense_ranks([0.5, -3, 2, 0.5, 0, -0.1, 1e300])
    assert ranks == {-3: -2, -0.1: -1, 0: 0, 0.5: 1, 2: 2, 1e300: 3}


def test_a_priority_that_is_not_a_number_is_refused_by_name() -> None:
    with dask.annotate(priority=lambda key: "high"):  # dask checks only plain values
        part = dask.delayed(abs, pure=False)(-1)
    with pytest.raises(TypeError, match=r"annotated with priority='high'.*a number"):
        dask.compute(part, scheduler=dagexec.dask.get, optimize_graph=False)
    with dask.annotate(priority=float("nan")):
        part = dask.delayed(abs, pure=False)(-1)
    with pytest.raises(ValueError, match=r"priority=nan"):
        dask.compute(part, scheduler=dagexec.dask.get, optimize_graph=False)


# ---------------------------------------------------- rerun_exceptions_locally
class Flaky:
    """Fails on worker threads; records the thread of every call."""

    def __init__(self, fail_here_too: bool = True) -> None:
        self.threads: list[threading.Thread] = []
        self.fail_here_too = fail_here_too

    def __call__(self, x: int) -> int:
        self.threads.append(threading.current_thread())
        if self.fail_here_too or threading.current_thread() is not threading.main_thread():
            raise ValueError(f"bad {x} #{len(self.threads)}")
        return x


@pytest.mark.parametrize("how", ["keyword", "config"])
def test_rerun_exceptions_locally_runs_the_failed_task_on_the_calling_thread(how: str) -> None:
    flaky = Flaky()
    dsk = {"x": 1, "y": (flaky, "x"), "z": (abs, "y")}
    kwargs: dict[str, Any] = {"num_workers": 2}
    if how == "keyword":
        kwargs["rerun_exceptions_locally"] = True
        with pytest.raises(ValueError, match="#2") as raised:
            dagexec.dask.get(dsk, "z", **kwargs)
    else:
        with (
            dask.config.set(rerun_exceptions_locally=True),
            pytest.raises(ValueError, match="#2") as raised,
        ):
            dagexec.dask.get(dsk, "z", **kwargs)
    assert len(flaky.threads) == 2
    assert flaky.threads[0] is not threading.current_thread()
    assert flaky.threads[1] is threading.current_thread()  # where pdb.pm() reaches it
    assert any("run again on the calling thread" in n for n in raised.value.__notes__)


def test_without_rerun_a_failed_task_runs_once() -> None:
    flaky = Flaky()
    with pytest.raises(ValueError, match="#1"):
        dagexec.dask.get({"y": (flaky, 1)}, "y")
    assert len(flaky.threads) == 1


def test_a_rerun_that_succeeds_raises_the_first_failure() -> None:
    flaky = Flaky(fail_here_too=False)
    with pytest.raises(ValueError, match="#1") as raised:
        dagexec.dask.get({"y": (flaky, 3)}, "y", rerun_exceptions_locally=True, num_workers=1)
    assert len(flaky.threads) == 2
    assert any("succeeded when run again" in n for n in raised.value.__notes__)


def test_only_failed_calls_keep_their_arguments() -> None:
    kept = dask_settings.FailedCalls()
    fine = kept.wrap("a", abs)
    bad = kept.wrap("b", lambda x: 1 / x)
    assert fine(-2) == 2
    with pytest.raises(ZeroDivisionError):
        bad(0)
    assert [(key, args) for _, key, _, args in kept.failed] == [("b", (0,))]


def test_raise_exception_is_called_with_the_failure() -> None:
    seen: list[Any] = []

    def raise_exception(exc: BaseException, tb: Any) -> None:
        seen.append((exc, tb))
        raise RuntimeError("wrapped") from exc

    with pytest.raises(RuntimeError, match="wrapped"):
        dagexec.dask.get({"y": (lambda: 1 / 0,)}, "y", raise_exception=raise_exception)
    assert isinstance(seen[0][0], ZeroDivisionError) and seen[0][1] is not None


# ------------------------------------------------------- dagexec.unknown-resources
def _gpu_task() -> Any:
    with dask.annotate(resources={"GPU": 1, "slot": 1}):
        return dask.delayed(abs, pure=False)(-7)


def test_unknown_resources_are_refused_by_default() -> None:
    with pytest.raises(ValueError, match=r"resource 'GPU'.*unknown-resources"):
        dask.compute(
            _gpu_task(), scheduler=dagexec.dask.get, optimize_graph=False, resources={"slot": 1}
        )


def test_unknown_resources_can_be_ignored_with_one_warning() -> None:
    parts = [_gpu_task() for _ in range(3)]
    with (
        dask.config.set({"dagexec.unknown-resources": "ignore"}),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        got = dask.compute(
            parts, scheduler=dagexec.dask.get, optimize_graph=False, resources={"slot": 1}
        )
    assert got == ([7, 7, 7],)
    mine = [w for w in caught if "unknown-resources" in str(w.message)]
    assert len(mine) == 1 and "'GPU'" in str(mine[0].message)
    assert "'slot'" not in str(mine[0].message)


def test_a_bad_unknown_resources_value_is_refused_by_name() -> None:
    with (
        dask.config.set({"dagexec.unknown-resources": "maybe"}),
        pytest.raises(ValueError, match=r"dagexec.unknown-resources must be"),
    ):
        dask.compute(_gpu_task(), scheduler=dagexec.dask.get, optimize_graph=False)


# ---------------------------------------------------------------------- cycles
def test_a_cycle_raises_dasks_own_runtime_error_as_the_docs_say() -> None:
    for dsk in ({"a": (abs, "b"), "b": (abs, "a")}, {"a": (abs, "a")}):
        with pytest.raises(RuntimeError, match="Cycle detected") as raised:
            dagexec.dask.get(dsk, "a")
        assert type(raised.value) is RuntimeError  # not dagexec.CycleError (a ValueError)
    text = DOCS.read_text()
    assert "a cycle raises `dagexec.CycleError`" not in text
    assert "dask's own `RuntimeError`" in text
