"""Task constants (args, kwargs, keyword deps), strict signatures and "did you mean"."""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest

import dagexec
from dagexec import MissingDependencyError, UnknownTargetError


def load(path: str, mode: str = "r") -> tuple[str, str]:
    return (path, mode)


def combine(left: Any, right: Any, *, sep: str = "+") -> str:
    return f"{left}{sep}{right}"


def test_a_graph_built_in_a_loop_gives_each_task_its_own_constant() -> None:
    """The lambda-in-a-loop trap: args binds the value at add time."""
    g = dagexec.Graph()
    files = ["a.csv", "b.csv", "c.csv"]
    for f in files:
        g.add(("load", f), load, args=(f,), kwargs={"mode": "rb"})
    result = dagexec.run(g, workers=2)
    assert dict(result) == {("load", f): (f, "rb") for f in files}


def test_dep_values_come_first_then_args_then_kwargs() -> None:
    g = dagexec.Graph()
    g.add("x", lambda: "X")
    g.add("y", lambda: "Y")
    g.add("out", lambda *a, **k: (a, k), deps=["x", "y"], args=(1, 2), kwargs={"k": 3})
    assert dagexec.run(g, workers=1)["out"] == (("X", "Y", 1, 2), {"k": 3})


def test_deps_as_a_mapping_pass_dep_values_by_keyword() -> None:
    g = dagexec.Graph()
    g.add("a", lambda: 1)
    g.add("b", lambda: 2)
    g.add("joined", combine, deps={"right": "a", "left": "b"}, kwargs={"sep": "-"})
    assert dagexec.run(g, workers=2)["joined"] == "2-1"
    task = g["joined"]
    assert task.deps == ("a", "b") and task.dep_params == ("right", "left")
    assert task.fn is combine and dict(task.kwargs) == {"sep": "-"} and task.args == ()


def test_constants_stay_inspectable_and_tasks_without_them_keep_the_old_shape() -> None:
    g = dagexec.Graph()
    kwargs = {"mode": "rb"}
    g.add("l", load, args=("f",), kwargs=kwargs)
    g.add("plain", str, args=())
    kwargs["mode"] = "changed later"  # the graph took a copy
    task = g["l"]
    assert (task.fn, task.args, dict(task.kwargs)) == (load, ("f",), {"mode": "rb"})
    with pytest.raises(TypeError):
        task.kwargs["mode"] = "x"  # type: ignore[index]
    assert g["plain"] == dagexec.Task("plain", str, ())
    assert g["plain"].args == () and dict(g["plain"].kwargs) == {}
    assert dagexec.run(g)["l"] == ("f", "rb")
    assert "load(*dep_values, 'f', mode='rb')" in repr(g._fns[0])


def test_functools_partial_works_as_a_task_function() -> None:
    g = dagexec.Graph()
    g.add("l", functools.partial(load, mode="w"), args=("p",))
    g.task(name="m")(functools.partial(load, "q"))
    assert dict(dagexec.run(g)) == {"l": ("p", "w"), "m": ("q", "r")}


def test_task_decorator_takes_args_and_kwargs_and_infers_the_remaining_deps() -> None:
    g = dagexec.Graph()
    g.add("raw", lambda: 10)

    @g.task(args=(3,), kwargs={"offset": 1})
    def scaled(raw: int, factor: int, offset: int) -> int:
        return raw * factor + offset

    assert g["scaled"].deps == ("raw",)
    assert dagexec.run(g)["scaled"] == 31


@pytest.mark.parametrize(
    ("deps", "args", "kwargs", "message"),
    [
        (["a", "b", "c"], (), None, r"too many positional arguments"),
        ([], (), None, r"missing a required argument: 'path'"),
        (["a"], (), {"nope": 1}, r"unexpected keyword argument 'nope'"),
        (["a"], ("x",), {"path": 1}, r"multiple values for argument 'path'"),
        ({"paht": "a"}, (), None, r"missing a required argument: 'path'"),
    ],
)
def test_a_task_its_function_cannot_accept_is_rejected_at_add(
    deps: Any, args: tuple[Any, ...], kwargs: Any, message: str
) -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=message) as info:
        g.add("t", load, deps=deps, args=args, kwargs=kwargs)
    text = str(info.value)
    assert text.startswith("task 't': load(path, mode='r') cannot be called as load(")
    assert "dependency values come first, then args, then kwargs" in text
    assert "t" not in g and len(g) == 0


def test_signature_check_does_not_run_the_function_or_show_constant_values() -> None:
    class Loud:
        def __repr__(self) -> str:
            raise RuntimeError("repr must not be called")

    g = dagexec.Graph()
    with pytest.raises(TypeError, match=r"load\(args\[0\], args\[1\], args\[2\]\)"):
        g.add("t", load, args=(Loud(), Loud(), Loud()))


def test_builtins_without_a_readable_signature_are_accepted_unchecked() -> None:
    g = dagexec.Graph()
    g.add("x", lambda: 3)
    g.add("p", max, deps=["x"], args=(5,))  # max has no readable signature
    assert dagexec.run(g)["p"] == 5


def test_callable_objects_are_checked_through_their_call_method() -> None:
    class Scale:
        def __call__(self, x: int) -> int:
            return 2 * x

    g = dagexec.Graph()
    g.add("x", lambda: 3)
    g.add("ok", Scale(), deps=["x"])
    with pytest.raises(TypeError, match="too many positional arguments"):
        g.add("bad", Scale(), deps=["x", "x"])
    assert dagexec.run(g)["ok"] == 6


def test_many_lambdas_from_one_loop_read_one_signature() -> None:
    """The verdict is cached by code object: a big loop costs a dict look-up per task."""
    g = dagexec.Graph()
    start = time.perf_counter()
    for i in range(20_000):
        g.add(i, lambda i=i: i)
    assert len(g) == 20_000
    assert time.perf_counter() - start < 20  # generous: a loose bound, not a benchmark


async def fetch(x: int) -> int:
    return x


async def agen() -> Any:
    yield 1


class AsyncCall:
    async def __call__(self) -> int:
        return 1


@pytest.mark.parametrize(
    ("fn", "what"),
    [
        (fetch, "async function"),
        (functools.partial(fetch, 1), "async function"),
        (agen, "async generator function"),
        (AsyncCall(), "async function"),
    ],
)
def test_async_functions_are_rejected_with_what_to_do(fn: Any, what: str) -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=what) as info:
        g.add("t", fn)
    assert "task 't'" in str(info.value) and "asyncio.run" in str(info.value)


def test_task_decorator_rejects_var_positional_without_deps() -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=r"task 'report'.*\*rows.*@g.task\(deps="):

        @g.task
        def report(*rows: int) -> int:
            return sum(rows)

    @g.task(deps=[])  # explicit: fine
    def report2(*rows: int) -> int:
        return sum(rows)

    assert "report" not in g and "report2" in g


def test_task_decorator_with_a_string_says_to_use_name() -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=r"write @g.task\(name='load'\)"):
        g.task("load")  # type: ignore[call-overload]


def test_task_decorator_on_a_partial_needs_a_name() -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=r"functools.partial\(load, \.\.\.\) has no __name__"):
        g.task(functools.partial(load, "x"))
    assert len(g) == 0


@pytest.mark.parametrize(
    ("deps", "message"),
    [
        (None, r"got None; write deps=\(\)"),
        (5, r"got int 5; write deps=\[5\]"),
        (b"ab", r"got bytes b'ab' \(which iterates as integers\); write deps=\[b'ab'\]"),
        (bytearray(b"a"), r"got bytearray bytearray\(b'a'\) \(which iterates as integers\)"),
        ({"a", "b"}, r"deps must be ordered.*got a set"),
        ({1: "a"}, r"from parameter name to task name, got the key 1"),
    ],
)
def test_bad_deps_name_the_parameter_the_value_and_the_fix(deps: Any, message: str) -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=message) as info:
        g.add("t", load, deps=deps)
    assert str(info.value).startswith("task 't': ")
    if deps is not None:  # for @g.task, deps=None means "read them from the parameters"
        with pytest.raises(TypeError, match=message):
            g.task(name="u", deps=deps)(load)
    assert len(g) == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"args": "x"}, r"args must be a tuple of values, got str 'x'; write args=\('x',\)"),
        ({"args": 5}, r"got int 5; write args=\(5,\)"),
        ({"args": {"a": 1}}, r"pass keyword arguments as kwargs="),
        ({"kwargs": [1]}, r"kwargs must be a mapping"),
        ({"kwargs": {1: 1}}, r"kwargs keys are parameter names, got 1"),
        ({"deps": {"path": "a"}, "kwargs": {"path": 1}}, r"'path' is given both by deps"),
    ],
)
def test_bad_args_and_kwargs_are_rejected(options: dict[str, Any], message: str) -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=message):
        g.add("t", load, **options)


def test_misspelled_dependency_suggests_the_closest_names() -> None:
    g = dagexec.Graph()
    g.add("norm", load, args=("x",))
    g.add("report", load, deps=["nrom"])
    with pytest.raises(MissingDependencyError, match=r"did you mean 'norm'\?") as info:
        g.validate()
    assert info.value.suggestions == {"nrom": ("norm",)}


def test_misspelled_parameter_of_task_decorator_names_the_parameter() -> None:
    g = dagexec.Graph()
    g.add("norm", lambda: 1)

    @g.task
    def hashed(nrom: int) -> int:
        return nrom

    with pytest.raises(MissingDependencyError) as info:
        dagexec.run(g)
    assert str(info.value) == (
        "task 'hashed' depends on 'nrom' (read by @g.task from the parameter 'nrom' of "
        "test_misspelled_parameter_of_task_decorator_names_the_parameter.<locals>.hashed()), "
        "which is not in the graph; did you mean 'norm'? rename the parameter to the task it "
        "needs, or pass deps=[...] to @g.task"
    )


def test_misspelled_target_suggests_the_closest_names() -> None:
    g = dagexec.Graph()
    g.add("report", lambda: 1)
    g.add("summary", lambda: 2)
    with pytest.raises(UnknownTargetError, match=r"did you mean 'report'\?") as info:
        dagexec.run(g, targets=["reprot"])
    assert info.value.suggestions == {"reprot": ("report",)}
    with pytest.raises(UnknownTargetError, match="check the spelling"):
        dagexec.run(g, targets=["zzzzzz"])


def test_suggestions_stay_cheap_on_a_big_graph() -> None:
    """Only the error path pays, and it compares a bounded number of names."""
    names = [f"t{i}" for i in range(300_000)] + ["hashed"]
    start = time.perf_counter()
    found = dagexec.MissingDependencyError("x", ["hashde"], known=names).suggestions
    assert found == {"hashde": ("hashed",)}
    assert time.perf_counter() - start < 20  # generous; typically well under a second


def test_hostile_names_do_not_break_error_messages() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    g = dagexec.Graph()
    g.add("a", lambda x: 1, deps=[Hostile()])
    with pytest.raises(MissingDependencyError, match="Hostile name with a failing repr"):
        g.validate()


def test_tasks_stay_hashable_when_their_parts_are() -> None:
    g = dagexec.Graph()
    g.add("plain", str)
    g.add("const", load, args=("p",), kwargs={"mode": "w"})
    assert len({g["plain"], g["const"], g["const"]}) == 2


def test_a_callable_whose_attributes_raise_is_accepted_unchecked() -> None:
    class Hostile:
        def __call__(self) -> int:
            return 7

        def __getattr__(self, name: str) -> object:
            raise RuntimeError(f"no {name}")

    g = dagexec.Graph()
    g.add("h", Hostile())
    assert dagexec.run(g)["h"] == 7


def test_instances_that_override_their_signature_are_checked_each() -> None:
    """The class-level cache must not hide an instance's own __signature__."""
    import inspect

    class Flexible:
        def __init__(self, sig: inspect.Signature) -> None:
            self.__signature__ = sig

        def __call__(self, *args: Any) -> int:
            return len(args)

    one = inspect.Signature([inspect.Parameter("a", inspect.Parameter.POSITIONAL_ONLY)])
    two = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in "ab"])
    g = dagexec.Graph()
    g.add("x", lambda: 1)
    g.add("one", Flexible(one), deps=["x"])
    with pytest.raises(TypeError, match="too many positional arguments"):
        g.add("bad", Flexible(one), deps=["x", "x"])
    g.add("two", Flexible(two), deps=["x", "x"])


def test_functions_wrapped_by_one_decorator_are_checked_by_their_own_signature() -> None:
    """functools.wraps wrappers share one code object but not one signature."""

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    @logged
    def one(a: int) -> int:
        return a

    @logged
    def two(a: int, b: int) -> int:
        return a + b

    g = dagexec.Graph()
    g.add("x", lambda: 1)
    g.add("two", two, deps=["x", "x"])
    with pytest.raises(TypeError, match="too many positional arguments"):
        g.add("one", one, deps=["x", "x"])


def test_task_decorator_names_the_task_in_a_bad_args_error() -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=r"^task 'scaled': args must be a tuple of values"):

        @g.task(args="x")
        def scaled(raw: int, factor: str) -> int:
            return raw
