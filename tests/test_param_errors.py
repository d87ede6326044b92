"""Every public parameter: a wrong type is a TypeError, a wrong value a ValueError.

Walks the parameters of the public API (issue 23 item 3): for each one, a value
of the wrong type and, where the type admits values the parameter cannot take,
one of the wrong value. Each case checks the exception's class and that the
message names the parameter. A second test reads the signatures, so a
parameter added later without its cases here fails the suite.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

import dagexec
from dagexec import Executor, Graph
from dagexec._core.task_options import TaskOptionArgs, TaskOptions
from dagexec.testing import Gate, ResourceRecorder, no_leaked_threads


def noop(*_: object) -> None:
    return None


def solo() -> None:
    return None


def graph() -> Graph:
    g = Graph()
    g.add("a", lambda: [1, 2])
    return g


class Case(NamedTuple):
    api: str  # which public callable
    param: str  # the parameter at fault, as named in the message
    call: Callable[[], object]
    error: type[BaseException]


def _add(**kw: Any) -> Callable[[], object]:
    return lambda: graph().add("t", noop, **kw)


def _map(**kw: Any) -> Callable[[], object]:
    return lambda: graph().map("m", noop, over="a", **kw)


def _task(**kw: Any) -> Callable[[], object]:
    return lambda: graph().task(**kw)(solo)


def _run(**kw: Any) -> Callable[[], object]:
    return lambda: dagexec.run(graph(), **kw)


def _executor(**kw: Any) -> Callable[[], object]:
    def call() -> object:
        Executor(**kw).shutdown()
        return None

    return call


def _executor_run(**kw: Any) -> Callable[[], object]:
    def call() -> object:
        with Executor(1) as ex:
            return ex.run(graph(), **kw)

    return call


def _submit(**kw: Any) -> Callable[[], object]:
    def call() -> object:
        with Executor(1) as ex:
            return ex.submit(graph(), **kw).result()

    return call


def _with_graph(api: str, graph: object) -> Callable[[], object]:
    """``api`` called with ``graph`` in place of a Graph."""

    def call() -> object:
        if api == "run":
            return dagexec.run(graph)  # type: ignore[arg-type]
        with Executor(1) as ex:
            if api == "Executor.run":
                return ex.run(graph)  # type: ignore[arg-type]
            return ex.submit(graph).result()  # type: ignore[arg-type]

    return call


def _leak_check(timeout: object) -> Callable[[], object]:
    def call() -> object:
        with no_leaked_threads(timeout):  # type: ignore[arg-type]
            return None

    return call


# Per task option: (wrong type, wrong value or None when every value of the type is fine).
TASK_OPTIONS: dict[str, tuple[object, object]] = {
    "priority": ("high", None),  # any int is a priority
    "resources": (["gpu"], {"gpu": -1}),
    "retries": ("3", -1),
    "retry_delay": ("1", -1.0),
    "retry_on": ("OSError", KeyboardInterrupt),
    "timeout": ("5", 0),
    "run_if": (True, "sometimes"),
    "checkpoint": ("no", None),  # True or False: a path belongs to run(checkpoint=)
    "isolate": (5, "thread"),
}

# Per run option: (wrong type, wrong value or None).
RUN_OPTIONS: dict[str, tuple[object, object]] = {
    "targets": (5, ["nope"]),
    "on_error": (1, "ignore"),
    "callbacks": (5, None),  # a list of anything that is not a callback is a type error
    "trace": ("yes", None),
    "progress": (1, None),
    "resources": ({"db": "2"}, {"db": -1}),
    "timeout": ("5", -1),
    "checkpoint": (5, ""),
    "logs": (1.5, ""),
}
EXECUTOR_OPTIONS: dict[str, tuple[object, object]] = {
    "workers": ("2", 0),
    "queue_cap": (2.0, 0),
    "max_in_flight": ("8", 0),
    "resources": (["db"], {"db": 10**400}),
}
# Errors that are not ValueError by name but are one (or a KeyError: a name
# that is not there, as for a dict).
UNKNOWN_TARGET = (ValueError, KeyError)


def _cases() -> list[Case]:
    cases: list[Case] = []
    for api, make in (("Graph.add", _add), ("Graph.map", _map), ("Graph.task", _task)):
        for option, (wrong_type, wrong_value) in TASK_OPTIONS.items():
            cases.append(Case(api, option, make(**{option: wrong_type}), TypeError))
            if wrong_value is not None:
                cases.append(Case(api, option, make(**{option: wrong_value}), ValueError))
        cases.append(Case(api, "deps", make(deps=5), TypeError))
        cases.append(Case(api, "args", make(args=5), TypeError))
        cases.append(Case(api, "kwargs", make(kwargs=5), TypeError))
        cases.append(Case(api, "retires", make(retires=1), TypeError))  # did you mean
    # Names and functions (a call fn cannot take is a TypeError, as Python's own).
    cases += [
        Case("Graph.add", "name", lambda: graph().add(["t"], noop), TypeError),
        Case("Graph.add", "name", lambda: graph().add("a", noop), ValueError),  # taken
        Case("Graph.add", "fn", lambda: graph().add("t", 5), TypeError),  # type: ignore[arg-type]
        Case("Graph.add", "deps", lambda: graph().add("t", noop, deps="a"), TypeError),
        Case("Graph.map", "name", lambda: graph().map(["m"], noop, over="a"), TypeError),
        Case("Graph.map", "name", lambda: graph().map("a", noop, over="a"), ValueError),
        Case("Graph.map", "fn", lambda: graph().map("m", 5, over="a"), TypeError),  # type: ignore[call-overload]
        Case("Graph.map", "over", lambda: graph().map("m", noop, over=["a"]), TypeError),
        Case("Graph.map", "over", lambda: graph().map("m", noop, over="m"), ValueError),
        Case("Graph.task", "fn", lambda: graph().task(5), TypeError),  # type: ignore[call-overload]
        Case("Graph.task", "name", lambda: graph().task(name=["t"])(solo), TypeError),
        Case("Graph.task", "name", lambda: graph().task(name="a")(solo), ValueError),
    ]
    for api, make in (("run", _run), ("Executor.run", _executor_run), ("Executor.submit", _submit)):
        for option, (wrong_type, wrong_value) in RUN_OPTIONS.items():
            cases.append(Case(api, option, make(**{option: wrong_type}), TypeError))
            if wrong_value is not None:
                error = UNKNOWN_TARGET if option == "targets" else ValueError
                cases.append(Case(api, option, make(**{option: wrong_value}), error))  # type: ignore[arg-type]
        cases.append(Case(api, "graph", _with_graph(api, 5), TypeError))
    for api, make in (("Executor", _executor), ("run", _run)):
        for option, (wrong_type, wrong_value) in EXECUTOR_OPTIONS.items():
            cases.append(Case(api, option, make(**{option: wrong_type}), TypeError))
            cases.append(Case(api, option, make(**{option: wrong_value}), ValueError))
    cases += [
        Case("Executor.submit", "retries", _submit(retries=1), TypeError),  # unknown option
        Case("Gate", "timeout", lambda: Gate("5"), TypeError),  # type: ignore[arg-type]
        Case("Gate", "timeout", lambda: Gate(0), ValueError),
        Case("ResourceRecorder", "graph", lambda: ResourceRecorder(5), TypeError),  # type: ignore[arg-type]
        Case("no_leaked_threads", "timeout", _leak_check("5"), TypeError),
        Case("no_leaked_threads", "timeout", _leak_check(-1), ValueError),
    ]
    return cases


CASES = _cases()


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=[f"{c.api}-{c.param}-{getattr(c.error, '__name__', 'ValueError|KeyError')}" for c in CASES],
)
def test_wrong_type_is_a_type_error_and_wrong_value_a_value_error(case: Case) -> None:
    with pytest.raises(BaseException) as caught:
        case.call()
    exc = caught.value
    assert isinstance(exc, case.error), f"{case.api}({case.param}=...): {type(exc).__name__}: {exc}"
    if case.error is ValueError:
        assert not isinstance(exc, TypeError), exc
    message = str(exc)
    named = case.param in message or (case.param == "targets" and "target" in message)
    if case.param == "fn" and not named:
        named = "function" in message or "callable" in message
    if case.param in ("name", "graph", "over") and not named:
        # Refusals of a name or function name the task (or the graph) itself.
        named = "'t'" in message or "'a'" in message or "'m'" in message or "Graph" in message
    assert named, f"{case.api}: the message does not name {case.param!r}: {message}"


def _parameters(fn: Callable[..., Any]) -> set[str]:
    params = set()
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.VAR_KEYWORD:
            continue  # the task options (checked below) or submit's run options
        params.add(p.name)
    return params


def test_every_public_parameter_is_walked() -> None:
    """A parameter added to the public API without a case above fails here."""
    covered: dict[str, set[str]] = {}
    for case in CASES:
        covered.setdefault(case.api, set()).add(case.param)
    apis: dict[str, Callable[..., Any]] = {
        "Graph.add": Graph.add,
        "Graph.map": Graph.map,
        "Graph.task": Graph.task,
        "run": dagexec.run,
        "Executor": Executor.__init__,
        "Executor.run": Executor.run,
        "Gate": Gate.__init__,
        "ResourceRecorder": ResourceRecorder.__init__,
    }
    for api, fn in apis.items():
        missing = _parameters(fn) - covered[api]
        assert not missing, f"{api}: no wrong-type/wrong-value case for {sorted(missing)}"
    for api in ("Graph.add", "Graph.map", "Graph.task"):
        assert set(TaskOptions._fields) <= covered[api]
    # Executor.submit takes Executor.run's options by keyword.
    assert _parameters(Executor.run) - {"graph"} <= covered["Executor.submit"]


def test_the_task_options_record_and_its_typed_dict_agree() -> None:
    """TaskOptions (what the graph checks and stores) and TaskOptionArgs (what type
    checkers show callers) list the same options: adding one is one module's edit."""
    assert list(TaskOptionArgs.__annotations__) == list(TaskOptions._fields)


def test_an_unknown_task_option_suggests_the_known_one() -> None:
    with pytest.raises(
        TypeError,
        match=r"add\(\) got an unexpected keyword argument 'retires'.*did you mean 'retries'\?",
    ):
        graph().add("t", noop, retires=2)  # type: ignore[call-arg]


def test_swapped_classes_of_issue_23() -> None:
    """Today retries=-1 raised TypeError and timeout="5" ValueError: swapped."""
    with pytest.raises(ValueError, match="retries must be >= 0"):
        graph().add("t", noop, retries=-1)
    with pytest.raises(TypeError, match=r"timeout must be a number of seconds \(int or float\)"):
        graph().add("t", noop, timeout="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timeout must be a number"):
        dagexec.run(graph(), timeout="5")  # type: ignore[arg-type]
