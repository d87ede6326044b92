"""One shape for tasks (issue 23 item 3): g.map takes what g.add takes.

Also: a map item as a target is refused with the fix, resource names get
"did you mean", map item names equal to an index collide whatever their number
type (issue 19), and huge resource amounts are refused when added.
"""

from __future__ import annotations

import math
import threading
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

import dagexec
from dagexec import MISSING, DuplicateTaskError, Graph, TaskState, UnknownTargetError
from dagexec._core.policy import Policy
from dagexec._core.task_options import TaskOptions, TaskRecord


def xs() -> list[int]:
    return [1, 2, 3]


def base() -> Graph:
    g = Graph()
    g.add("xs", xs)
    return g


# ------------------------------------------------------------ g.map like g.add
def test_map_takes_args_and_kwargs_after_the_item() -> None:
    g = base()
    g.map("m", lambda x, k, scale=1: x * k * scale, over="xs", args=(2,), kwargs={"scale": 10})
    assert dagexec.run(g, ["m"], workers=2)["m"] == [20, 40, 60]


def test_map_takes_positional_deps_then_args() -> None:
    g = base()
    g.add("offset", lambda: 100)
    g.map("m", lambda x, off, sign: sign * (x + off), over="xs", deps=["offset"], args=(-1,))
    assert dagexec.run(g, ["m"], workers=2)["m"] == [-101, -102, -103]


def test_map_takes_deps_by_keyword_with_args_after_the_item() -> None:
    g = base()
    g.add("sep", lambda: "|")
    g.map(
        "m",
        lambda x, suffix, *, sep: f"{x}{sep}{suffix}",
        over="xs",
        deps={"sep": "sep"},
        args=("!",),
    )
    assert dagexec.run(g, ["m"], workers=2)["m"] == ["1|!", "2|!", "3|!"]
    task = g["m"]
    assert task.deps == ("xs", "sep") and task.dep_params == ("sep",) and task.args == ("!",)


def test_map_call_is_checked_at_add_with_its_constants() -> None:
    g = base()
    with pytest.raises(TypeError, match=r"task 'm': .*cannot be called as .*kwargs\['nope'\]"):
        g.map("m", lambda x: x, over="xs", kwargs={"nope": 1})
    assert "m" not in g


def test_map_as_a_decorator_is_named_after_the_function_and_returns_it() -> None:
    g = base()
    g.add("factor", lambda: 3)

    @g.map(over="xs")
    def scaled(x: int, factor: int) -> int:  # factor: a dependency, read from its name
        return x * factor

    @g.map("squares", over="xs")
    def square(x: int) -> int:
        return x * x

    assert scaled(2, 5) == 10  # the function itself, unchanged
    assert g["scaled"].deps == ("xs", "factor")
    result = dagexec.run(g, ["scaled", "squares"], workers=2)
    assert result["scaled"] == [3, 6, 9]
    assert result["squares"] == [1, 4, 9]


def test_map_decorator_reports_an_unknown_parameter_as_read_from_its_name() -> None:
    g = base()

    @g.map(over="xs")
    def scaled(x: int, factr: int) -> int:
        return x * factr

    g.add("factor", lambda: 3)
    with pytest.raises(dagexec.MissingDependencyError, match=r"read by @g.task .*factr"):
        g.validate()


def test_a_decorated_task_that_fails_to_add_leaves_no_note_on_where_its_deps_came_from() -> None:
    """A refused @g.task leaves nothing behind: the next task at its position,
    added plainly, is not reported as having read its deps off a function."""
    g = Graph()
    g.add("taken", lambda: 1)
    with pytest.raises(DuplicateTaskError):

        @g.task(name="taken")
        def reads(nrom: int) -> int:
            return nrom

    g.add("plain", lambda x: x, deps=["nrom"])
    with pytest.raises(dagexec.MissingDependencyError) as caught:
        g.validate()
    assert "read by @g.task" not in str(caught.value)
    assert "'nrom'" in str(caught.value)


def test_map_without_a_name_says_how_to_write_it() -> None:
    g = base()
    with pytest.raises(TypeError, match=r"g.map\('name', fn, over=...\)"):
        g.map(xs, over="xs")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="needs the map's name"):
        g.map(fn=xs, over="xs")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"g.map\(...\) decorates a function, got int"):
        g.map(over="xs")(5)  # type: ignore[type-var]
    assert list(g) == ["xs"]


def test_map_takes_the_task_options_for_its_items() -> None:
    g = base()
    tries: dict[int, int] = {}
    lock = threading.Lock()

    def flaky(x: int) -> int:
        with lock:
            tries[x] = tries.get(x, 0) + 1
            if tries[x] == 1:
                raise OSError("first try fails")
        return x

    g.map("m", flaky, over="xs", retries=1, retry_on=OSError, priority=2, resources={"db": 1})
    result = dagexec.run(g, ["m"], workers=2, resources={"db": 1})
    assert result["m"] == [1, 2, 3]
    assert tries == {1: 2, 2: 2, 3: 2}
    assert result.stats.peak_resources["db"] == 1


# ------------------------------------------------------------ run_if on a map
def test_run_if_all_done_on_a_map_applies_to_its_extra_deps() -> None:
    g = base()

    def broken() -> int:
        raise KeyError("no config")

    g.add("config", broken)
    g.add("gone", lambda c: c, deps=["config"])  # skipped: gives MISSING
    g.map(
        "report",
        lambda x, err, gone: (x, type(err).__name__, gone is MISSING),
        over="xs",
        deps=["config", "gone"],
        run_if="all_done",
    )
    result = dagexec.run(g, ["report"], workers=2, on_error="continue")
    assert result["report"] == [(1, "KeyError", True), (2, "KeyError", True), (3, "KeyError", True)]
    assert result.status["gone"] is TaskState.SKIPPED


def test_run_if_all_done_map_is_skipped_when_over_fails_and_cleanup_still_runs() -> None:
    g = Graph()

    def no_files() -> list[int]:
        raise OSError("cannot list")

    ended = []
    g.add("files", no_files)
    g.add("config", lambda: 1)
    g.map("each", lambda f, c: f, over="files", deps=["config"], run_if="all_done")
    g.add("after", lambda v: ended.append(v), deps=["each"], run_if="all_done")
    g.add("plain", lambda v: v, deps=["each"])
    result = dagexec.run(g, ["after", "plain"], workers=2, on_error="continue")
    assert result.status["each"] is TaskState.SKIPPED
    assert result.status["plain"] is TaskState.SKIPPED
    assert ended == [MISSING]
    assert not any(isinstance(n, tuple) for n in result.status)  # no items


def test_run_if_all_done_map_gathers_like_any_map_when_an_item_fails() -> None:
    g = base()
    g.add("config", lambda: 1)

    def item(x: int, c: int) -> int:
        if x == 2:
            raise ValueError("bad item")
        return x

    g.map("each", item, over="xs", deps=["config"], run_if="all_done")
    g.add("total", sum, deps=["each"])
    result = dagexec.run(g, ["total"], workers=2, on_error="continue")
    assert result.status[("each", 1)] is TaskState.FAILED
    assert result.status["each"] is TaskState.SKIPPED  # its list would miss a value
    assert result.status["total"] is TaskState.SKIPPED


def test_run_if_all_done_map_over_a_map_skips_items_whose_source_failed() -> None:
    g = base()

    def first(x: int) -> int:
        if x == 2:
            raise ValueError("bad")
        return x

    g.add("boom", lambda: 1 / 0)
    g.map("a", first, over="xs")
    g.map("b", lambda x, err: (x, type(err).__name__), over="a", deps=["boom"], run_if="all_done")
    result = dagexec.run(g, ["b"], workers=2, on_error="continue")
    assert result.status[("b", 0)] is TaskState.DONE
    assert result.status[("b", 1)] is TaskState.SKIPPED  # its source item failed
    assert result.status[("b", 2)] is TaskState.DONE


def test_run_if_all_done_map_runs_its_items_after_a_stop() -> None:
    """on_error="raise": a failure stops the run, and a cleanup map still runs,
    items included (they keep the map's run_if), before the error is raised."""
    g = base()
    seen: list[int] = []
    lock = threading.Lock()

    def fail(*_: object) -> None:
        raise RuntimeError("stop")

    def record(x: int, _err: object) -> int:
        with lock:
            seen.append(x)
        return x

    g.add("fails", fail, deps=["xs"])
    g.map("cleanup", record, over="xs", deps=["fails"], run_if="all_done")
    with pytest.raises(RuntimeError, match="stop"):
        dagexec.run(g, ["cleanup"], workers=2)
    assert sorted(seen) == [1, 2, 3]


# ------------------------------------------------------------ a map item as a target
def test_a_map_item_as_a_target_says_to_target_the_map_and_index_its_list() -> None:
    g = base()
    g.map("squares", lambda x: x * x, over="xs")
    with pytest.raises(UnknownTargetError) as caught:
        dagexec.run(g, [("squares", 0)], workers=1)
    message = str(caught.value)
    assert "item 0 of map 'squares'" in message
    assert "check the spelling" not in message
    assert "run(g, targets=['squares'])['squares'][0]" in message
    assert dagexec.run(g, ["squares"], workers=1)["squares"][0] == 1  # the fix works


def test_an_unknown_tuple_target_still_gets_the_usual_message() -> None:
    g = base()
    g.map("squares", lambda x: x * x, over="xs")
    with pytest.raises(UnknownTargetError, match="not a task of this graph"):
        dagexec.run(g, [("cubes", 0)], workers=1)


# ------------------------------------------------------------ resources: did you mean
def test_a_resource_typo_suggests_the_declared_name() -> None:
    g = Graph()
    g.add("upload", lambda: 1, resources={"DB": 1})
    with pytest.raises(ValueError, match=r"needs resource 'DB'.*did you mean 'db'\?") as caught:
        dagexec.run(g, workers=1, resources={"db": 2})
    assert "pass resources={'DB'" not in str(caught.value)
    g2 = Graph()
    g2.add("train", lambda: 1, resources={"gpus": 1})
    with pytest.raises(ValueError, match=r"did you mean 'gpu'\?"):
        dagexec.run(g2, workers=1, resources={"gpu": 1, "mem": 8})


def test_an_undeclared_resource_with_nothing_close_says_to_declare_it() -> None:
    g = Graph()
    g.add("upload", lambda: 1, resources={"db": 1})
    with pytest.raises(ValueError, match=r"declared: 'gpu'\); pass resources=\{'db': ...\}"):
        dagexec.run(g, workers=1, resources={"gpu": 1})


# ------------------------------------------------------------ issue 19: names and amounts
@pytest.mark.parametrize(
    "index",
    [0, 0.0, 0j, Decimal(0), Fraction(0), False, 1.0, True, Decimal("2.0"), Fraction(4, 2)],
    ids=repr,
)
def test_a_task_named_like_a_map_item_collides_whatever_the_number_type(index: Any) -> None:
    g = base()
    g.map("m", lambda x: x, over="xs")
    g.add(("m", index), lambda: 0)
    with pytest.raises(DuplicateTaskError, match=r"has the name of item \d of map 'm'"):
        g.validate()


@pytest.mark.parametrize("index", [-1, 0.5, 1j, Decimal("NaN"), math.inf, "0", (0,)], ids=repr)
def test_names_that_are_no_index_do_not_collide(index: Any) -> None:
    g = base()
    g.map("m", lambda x: x, over="xs")
    g.add(("m", index), lambda: 0)
    g.validate()


def test_huge_resource_amounts_are_refused_at_add_and_as_capacities() -> None:
    g = Graph()
    with pytest.raises(ValueError, match=r"resources\['db'\] must be a positive finite"):
        g.add("t", lambda: 1, resources={"db": 10**400})
    assert "t" not in g
    with pytest.raises(ValueError, match=r"resources\['db'\] is an int of 401 digits"):
        dagexec.Executor(1, resources={"db": 10**400})
    g.add("t", lambda: 1, resources={"db": 1})
    with pytest.raises(ValueError, match="write math.inf for no limit"):
        dagexec.run(g, workers=1, resources={"db": 10**400})
    assert dagexec.run(g, workers=1, resources={"db": math.inf})["t"] == 1


def test_a_map_item_as_a_dependency_says_to_depend_on_the_map() -> None:
    g = base()
    g.map("squares", lambda x: x * x, over="xs")
    g.add("first", lambda v: v, deps=[("squares", 0)])
    with pytest.raises(dagexec.MissingDependencyError) as caught:
        g.validate()
    message = str(caught.value)
    assert "item 0 of map 'squares'" in message and "deps=['squares']" in message
    assert "did you mean" not in message


def test_map_decorator_takes_deps_by_keyword_and_options() -> None:
    g = base()
    g.add("unit", lambda: "kg")

    @g.map(over="xs", deps={"unit": "unit"}, kwargs={"digits": 1}, priority=3)
    def weigh(x: int, *, unit: str, digits: int) -> str:
        return f"{x:.{digits}f}{unit}"

    assert g._options[len(g) - 1].priority == 3
    assert dagexec.run(g, ["weigh"], workers=2)["weigh"] == ["1.0kg", "2.0kg", "3.0kg"]


def test_over_must_name_a_task() -> None:
    g = base()
    with pytest.raises(TypeError, match=r"map 'm': over must be the name of a task"):
        g.map("m", lambda x: x, over=["xs"])
    with pytest.raises(ValueError, match=r"map 'm': over='m' names the map itself"):
        g.map("m", lambda x: x, over="m")
    assert list(g) == ["xs"]


# A value other than the default for every task option.
OPTION_VALUES: dict[str, Any] = {
    "priority": 2,
    "resources": {"db": 1},
    "retries": 1,
    "retry_delay": 0.5,
    "retry_on": OSError,
    "timeout": 5.0,
    "run_if": "all_done",
    "checkpoint": False,
    "isolate": "process",
}


def test_every_task_option_has_a_value_below() -> None:
    """A new option (checkpoint=, isolate=) must join OPTION_VALUES, so the test
    below checks that add, task and map all store it."""
    assert set(OPTION_VALUES) == set(TaskOptions._fields)


def _one() -> int:  # module level: isolate="process" needs a function found by name
    return 1


def _ident(x: Any) -> Any:
    return x


@pytest.mark.parametrize(("option", "value"), list(OPTION_VALUES.items()))
@pytest.mark.parametrize("how", ["add", "task", "map"])
def test_every_task_option_is_stored_whichever_way_the_task_is_added(
    option: str, value: Any, how: str
) -> None:
    """One record: an option given to add, task or map is never dropped (by a fast
    path or a forgotten pass-through)."""
    g = base()
    if how == "add":
        g.add("t", _one, **{option: value})
    elif how == "task":
        g.task(name="t", **{option: value})(_one)
    else:
        g.map("t", _ident, over="xs", **{option: value})
    assert _stored(g._options[1], option) == value


def _stored(record: TaskRecord, option: str) -> Any:
    """``option`` as :class:`TaskRecord` keeps it, in the form it was given."""
    policy = record.policy or Policy()
    if option == "resources":
        return dict(record.needs)
    if option == "retry_on":
        (only,) = policy.retry_on
        return only
    if option == "run_if":
        return "all_done" if policy.cleanup else "all_success"
    if option in ("priority", "checkpoint"):
        return getattr(record, option)
    return getattr(policy, option)
