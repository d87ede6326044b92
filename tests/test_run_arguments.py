"""Arguments of run() and Executor.run(): read once, checked before any thread starts.

A wrong one is named with the fix.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Hashable, Iterable

import pytest
from common import diamond

import dagexec
from dagexec import TaskState

# --- targets given as a one-shot iterable -------------------------------------


def _one_shot(names: Iterable[Hashable]) -> Iterable[Hashable]:
    return (n for n in names)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda names: _one_shot(names), id="generator"),
        pytest.param(lambda names: iter(list(names)), id="iterator"),
        pytest.param(lambda names: map(str, names), id="map"),
        pytest.param(lambda names: dict.fromkeys(names).keys(), id="keys-view"),
    ],
)
def test_run_and_executor_run_read_any_iterable_of_targets_once(
    make: Callable[[Iterable[Hashable]], Iterable[Hashable]],
) -> None:
    expected = {"norm": 20, "side": 3}
    assert dict(dagexec.run(diamond(), targets=make(["norm", "side"]), workers=2)) == expected
    with dagexec.Executor(workers=2) as ex:
        assert dict(ex.run(diamond(), targets=make(["norm", "side"]))) == expected


def test_a_generator_of_targets_is_consumed_exactly_once() -> None:
    pulled: list[str] = []

    def names() -> Iterable[Hashable]:
        for n in ("side", "norm"):
            pulled.append(n)
            yield n

    result = dagexec.run(diamond(), targets=names(), workers=1)
    assert dict(result) == {"side": 3, "norm": 20}
    assert pulled == ["side", "norm"]


# --- every parameter is checked before any thread starts ---------------------


class NotCallableHook:
    on_task_end = 5


BAD_PARAMETERS: list[tuple[dict[str, object], type[Exception], str]] = [
    ({"callbacks": [NotCallableHook()]}, TypeError, "on_task_end must be callable"),
    ({"on_error": "ignore"}, ValueError, "on_error must be 'raise' or 'continue'"),
    ({"trace": "yes"}, TypeError, "trace must be True or False, got str 'yes'"),
    ({"progress": 1}, TypeError, "progress must be True or False, got int 1"),
    ({"targets": ["nope"]}, dagexec.UnknownTargetError, "unknown target 'nope'"),
    ({"targets": "norm"}, TypeError, "got the string 'norm'"),
    ({"workers": 0}, ValueError, "workers must be >= 1, got 0"),
    ({"queue_cap": 0}, ValueError, "queue_cap must be >= 1, got 0"),
    ({"max_in_flight": 0}, ValueError, "max_in_flight must be >= 1, got 0"),
    ({"workers": 2.5}, TypeError, "workers must be an int"),
]


@pytest.mark.parametrize(
    ("options", "error", "match"),
    BAD_PARAMETERS,
    ids=[next(iter(o)) + "-" + type(next(iter(o.values()))).__name__ for o, _, _ in BAD_PARAMETERS],
)
def test_run_checks_every_parameter_before_starting_a_thread(
    options: dict[str, object],
    error: type[Exception],
    match: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts: list[str] = []
    real_start = threading.Thread.start

    def counted_start(self: threading.Thread) -> None:
        starts.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", counted_start)
    with pytest.raises(error, match=re.escape(match)):
        dagexec.run(diamond(), **options)  # type: ignore[arg-type]
    assert starts == []


def test_run_checks_the_graph_before_starting_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[str] = []
    real_start = threading.Thread.start
    monkeypatch.setattr(
        threading.Thread, "start", lambda self: (starts.append(self.name), real_start(self))
    )
    with pytest.raises(TypeError, match="graph must be a dagexec.Graph, got dict"):
        dagexec.run({"a": lambda: 1})  # type: ignore[arg-type]
    assert starts == []


# --- clear errors for callbacks and targets of the wrong shape ----------------


class MyCallback(dagexec.Callback):
    def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
        pass


class IterableCallback:
    """A callback that is also iterable: still one callback, not a collection."""

    def on_run_end(self, result: dagexec.RunResult) -> None:
        pass

    def __iter__(self) -> Iterable[object]:
        return iter([])


BAD_SHAPES: list[tuple[str, object, str]] = [
    (
        "callbacks",
        MyCallback(),
        "callbacks must be a list of callback objects, got one callback "
        "(MyCallback instance); write callbacks=[cb]",
    ),
    ("callbacks", IterableCallback(), "got one callback (IterableCallback instance)"),
    ("callbacks", MyCallback, "got the class MyCallback; write callbacks=[MyCallback()]"),
    ("callbacks", 5, "callbacks must be a list of callback objects, got int 5; write callbacks=["),
    ("callbacks", "progress", "callbacks must be a list of callback objects, got str 'progress'"),
    ("callbacks", [MyCallback], "callbacks: got the class MyCallback, not a callback object"),
    ("callbacks", [5], "callbacks: int 5 has none of the hooks on_run_start"),
    ("targets", b"ab", "got bytes b'ab', which would be read as the integers 97, 98"),
    ("targets", bytearray(b"ab"), "got bytearray bytearray(b'ab'), which would be read as"),
    ("targets", memoryview(b"ab"), "write targets=[b'ab']"),
]


@pytest.mark.parametrize(
    ("parameter", "value", "match"),
    BAD_SHAPES,
    ids=[f"{p}-{type(v).__name__}-{i}" for i, (p, v, _) in enumerate(BAD_SHAPES)],
)
def test_callbacks_and_targets_of_the_wrong_shape_are_named_with_the_fix(
    parameter: str, value: object, match: str
) -> None:
    for call in (
        lambda: dagexec.run(diamond(), workers=1, **{parameter: value}),  # type: ignore[arg-type]
        lambda: ex.run(diamond(), **{parameter: value}),  # type: ignore[arg-type]
    ):
        with dagexec.Executor(workers=1) as ex:
            with pytest.raises(TypeError, match=re.escape(match)):
                call()
            assert dict(ex.run(diamond(), targets=["side"])) == {"side": 3}


def test_a_callback_object_or_a_generator_of_them_is_accepted_in_a_list() -> None:
    ended: list[Hashable] = []

    class Ends:
        def on_task_end(self, name: Hashable, state: TaskState, seconds: float) -> None:
            ended.append(name)

    dagexec.run(diamond(), workers=1, callbacks=(cb for cb in [Ends()]))
    assert sorted(ended, key=str) == ["norm", "raw", "report", "side"]


def test_the_run_options_are_those_of_the_one_record() -> None:
    """RunOptions is the one list of run options: dagexec.run and Executor.run
    spell them as keyword parameters, and must not drift from it (a new option
    added to the record but not to a signature, or a default changed in one
    place, fails here); submit() accepts exactly its fields."""
    import inspect

    from dagexec._engine.front.run_checks import RunOptions

    record = dict(RunOptions._field_defaults)
    assert list(record) == list(RunOptions._fields)  # every field has its default
    for function in (dagexec.run, dagexec.Executor.run):
        parameters = inspect.signature(function).parameters
        spelled = {
            name: p.default
            for name, p in parameters.items()
            if p.kind is p.KEYWORD_ONLY and name not in ("workers", "queue_cap", "max_in_flight")
        }
        assert spelled == record, function.__qualname__
    with dagexec.Executor(workers=1) as ex, pytest.raises(TypeError, match="unknown run options"):
        ex.submit(diamond(), retries=2)
