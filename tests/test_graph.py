"""Building and validating graphs: pure, no threads."""

from __future__ import annotations

import pytest

import dagexec
from dagexec import CycleError, DuplicateTaskError, MissingDependencyError


def noop(*args: object) -> None:
    return None


def build(edges: dict[str, list[str]]) -> dagexec.Graph:
    g = dagexec.Graph()
    for name, deps in edges.items():
        g.add(name, noop, deps=deps)
    return g


def assert_cycle(found: tuple[object, ...], expected: list[object]) -> None:
    """A cycle may be reported from any starting point: compare up to rotation."""
    assert found[0] == found[-1]
    body = list(found[:-1])
    assert len(body) == len(expected)
    doubled = body * 2
    assert any(doubled[i : i + len(expected)] == expected for i in range(len(body))), found


def test_add_returns_the_name_and_records_the_task() -> None:
    g = dagexec.Graph()
    assert g.add("raw", noop) == "raw"
    assert g.add(("norm", 1), noop, deps=["raw"]) == ("norm", 1)
    assert len(g) == 2
    assert "raw" in g and ("norm", 1) in g and "other" not in g
    assert [] not in g  # unhashable: not a name, and no TypeError
    assert g[("norm", 1)].deps == ("raw",)
    assert list(g) == ["raw", ("norm", 1)]


def test_task_decorator_takes_deps_from_parameters_without_defaults() -> None:
    g = dagexec.Graph()

    @g.task
    def raw() -> int:
        return 1

    @g.task
    def norm(raw: int, scale: int = 2) -> int:
        return raw * scale

    @g.task(name="report", deps=["norm", "raw"])
    def make_report(n: int, r: int) -> tuple[int, int]:
        return (n, r)

    assert g["norm"].deps == ("raw",)
    assert g["report"].deps == ("norm", "raw")
    assert make_report(1, 2) == (1, 2)  # the function is returned unchanged
    assert dict(dagexec.run(g, workers=1)) == {"report": (2, 1)}


def test_task_decorator_rejects_keyword_only_parameters_without_default() -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match="keyword-only parameter 'x' has no default"):

        @g.task
        def f(*, x: int) -> int:
            return x


def test_duplicate_name_is_rejected_at_add() -> None:
    g = build({"a": []})
    with pytest.raises(DuplicateTaskError, match="task 'a' is already in the graph") as info:
        g.add("a", noop)
    assert info.value.task == "a"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": [1], "fn": noop}, "task name must be hashable, got list"),
        ({"name": "a", "fn": 3}, "task 'a': fn must be callable, got int 3"),
        ({"name": "a", "fn": noop, "deps": "b"}, r"got the string 'b'; write deps=\['b'\]"),
        ({"name": "a", "fn": noop, "deps": [{}]}, "dependency names must be hashable"),
    ],
)
def test_bad_add_arguments_name_the_problem(kwargs: dict[str, object], message: str) -> None:
    g = dagexec.Graph()
    with pytest.raises(TypeError, match=message):
        g.add(**kwargs)  # type: ignore[arg-type]
    assert len(g) == 0


def test_missing_dependency_names_task_and_missing_names() -> None:
    g = build({"a": [], "b": ["a", "x", "y"]})
    with pytest.raises(MissingDependencyError) as info:
        g.validate()
    assert info.value.task == "b"
    assert info.value.missing == ("x", "y")
    assert "task 'b' depends on 'x', 'y', which are not in the graph" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_dependency_added_later_is_fine() -> None:
    g = build({"b": ["a"], "a": []})
    g.validate()
    assert g.sinks() == ("b",)


@pytest.mark.parametrize("names", ["abcde", "edcba"])
def test_cycle_reports_its_path_whatever_the_names(names: str) -> None:
    """a -> b -> c -> a, plus d and e hanging off it; names vary so order cannot matter."""
    a, b, c, d, e = names
    g = build({a: [c], b: [a], c: [b], d: [a], e: [d]})
    with pytest.raises(CycleError) as info:
        g.validate()
    assert_cycle(info.value.cycle, [a, b, c])
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith("cycle: ")


def test_cycle_message_reads_in_data_flow_order() -> None:
    g = build({"a": ["c"], "b": ["a"], "c": ["b"]})
    with pytest.raises(CycleError, match=r"^cycle: a -> b -> c -> a "):
        g.validate()


def test_self_dependency_is_a_cycle() -> None:
    g = build({"a": ["a"]})
    with pytest.raises(CycleError, match="cycle: a -> a") as info:
        g.validate()
    assert info.value.cycle == ("a", "a")


def test_non_string_names_are_shown_unambiguously() -> None:
    g = dagexec.Graph()
    g.add(1, noop, deps=["1"])
    g.add("1", noop, deps=[1])
    with pytest.raises(CycleError, match="cycle: 1 -> 1 -> 1|cycle: 1 -> '1'"):
        g.validate()


def test_validation_is_cached_until_the_graph_changes() -> None:
    g = build({"a": [], "b": ["a"]})
    g.validate()
    first = g._compile()
    assert g._compile() is first
    g.add("c", noop, deps=["zzz"])
    with pytest.raises(MissingDependencyError):
        g.validate()


def test_a_200000_task_chain_validates_without_recursion() -> None:
    g = dagexec.Graph()
    g.add(0, noop)
    for i in range(1, 200_000):
        g.add(i, noop, deps=[i - 1])
    g.validate()
    # Reversed insertion order takes the full DFS path, not the fast path.
    r = dagexec.Graph()
    for i in range(199_999, 0, -1):
        r.add(i, noop, deps=[i - 1])
    r.add(0, noop)
    r.validate()
    r.add("loop", noop, deps=["loop"])
    with pytest.raises(CycleError):
        r.validate()


def test_sinks_are_tasks_nothing_depends_on() -> None:
    g = build({"a": [], "b": ["a"], "c": ["a"], "d": []})
    assert g.sinks() == ("b", "c", "d")


def test_unhashable_dependency_after_one_not_added_yet_is_rejected_at_add() -> None:
    """Dependencies are looked up when a task is added; a miss must not skip the
    hashability check of the names after it."""
    g = dagexec.Graph()
    with pytest.raises(TypeError, match="task 't': dependency names must be hashable, got dict"):
        g.add("t", noop, deps=["later", {}])
    assert len(g) == 0


def test_dependencies_added_before_and_after_a_task_both_resolve() -> None:
    g = dagexec.Graph()
    g.add("c", lambda b, a: b + a, deps=["b", "a"])  # both added later
    g.add("a", lambda: 1)
    g.add("b", lambda a: a + 1, deps=["a"])  # added before
    g.add("d", lambda c, b: c * b, deps=["c", "b"])
    assert dict(dagexec.run(g, workers=1)) == {"d": 6}


def test_a_function_seen_before_is_checked_again_for_another_call_shape() -> None:
    """The signature verdict is remembered per function and dependency count only."""

    def one(a: int) -> int:
        return a

    g = build({"r": []})
    g.add("ok", one, deps=["r"])
    g.add("ok2", one, deps=["r"])
    for deps, kwargs in [(["r", "r"], {}), ([], {}), (["r"], {"args": (1,)})]:
        with pytest.raises(TypeError, match=r"cannot be called as \S*one\("):
            g.add("bad", one, deps=deps, **kwargs)  # type: ignore[arg-type]
    assert list(g) == ["r", "ok", "ok2"]


def test_a_failed_add_teaches_nothing_about_its_function() -> None:
    """A function whose add failed after its signature was checked is not kept
    alive by the graph, so its id may be reused by another function: that one
    must be checked on its own."""
    g = build({"r": []})
    first = lambda a: a  # noqa: E731
    with pytest.raises(TypeError, match="priority must be an int"):
        g.add("t", first, deps=["r"], priority="high")  # type: ignore[arg-type]
    del first
    for _ in range(20):  # likely to land on the freed function's id
        second = lambda a, b: a  # noqa: E731
        with pytest.raises(TypeError, match="cannot be called as"):
            g.add("t", second, deps=["r"])
    assert list(g) == ["r"]


def test_a_validated_graph_keeps_its_names_when_the_graph_grows() -> None:
    g = build({"a": [], "b": ["a"]})
    result = dagexec.run(g, workers=1)
    compiled = g._compile()
    g.add("c", noop, deps=["b"])
    assert "c" not in result.status and "c" not in compiled.index
    assert len(compiled.index) == 2
    assert dict(dagexec.run(g, workers=1)) == {"c": None}
    assert g._compile().index == {"a": 0, "b": 1, "c": 2}


def test_plans_list_dependents_roots_and_sinks_in_task_order() -> None:
    """The planner's transposed edges, against a direct reading of the graph,
    on graphs with forward references, repeated deps and isolated tasks."""
    import random

    from dagexec._core.plan import plan_run

    rng = random.Random(7)
    for size in (0, 1, 2, 50, 400):
        g = dagexec.Graph()
        order = list(range(size))
        rng.shuffle(order)  # tasks may name tasks added later
        for t in order:
            deps = [rng.randrange(t) for _ in range(rng.randrange(4))] if t else []
            g.add(t, noop, deps=deps)
        compiled = g._compile()
        plan = plan_run(compiled, None)
        deps = compiled.deps
        n = len(deps)
        expected = tuple(tuple(i for i in range(n) for d in deps[i] if d == j) for j in range(n))
        assert plan.dependents == expected
        assert plan.roots == tuple(i for i in range(n) if not deps[i])
        assert plan.targets == compiled.sinks == tuple(i for i in range(n) if not expected[i])
        assert g.sinks() == tuple(compiled.names[i] for i in compiled.sinks)


def test_a_failed_add_leaves_nothing_for_the_next_task() -> None:
    """Options and constants are stored only once every check passed: a task
    added after a failed one (at the same position) must not inherit them."""

    def anything(*args: object, **kwargs: object) -> None:
        return None

    g = dagexec.Graph()
    with pytest.raises(ValueError, match="retries must be >= 0"):
        g.add("a", noop, priority=5, resources={"gpu": 1}, retries=-1)
    with pytest.raises(TypeError, match="priority must be an int"):
        g.add("c", anything, kwargs={"x": 1}, priority="high")  # type: ignore[arg-type]
    g.add("b", noop)
    assert g["b"] == dagexec.Task("b", noop, ())
    assert (g._options, g._originals) == ({}, {})


def test_the_fast_add_path_keeps_every_check_of_the_general_one() -> None:
    """Once a function is known for a dependency count, ``add`` stores such tasks
    on a short path; every case it does not handle must still meet the checks."""

    def step(*xs: int) -> int:
        return sum(xs)

    g = dagexec.Graph()
    g.add("a", step)
    g.add("b", step, deps=("a",))
    g.add("c", step, deps=("a", "b"))  # step is now known for 0, 1 and 2 deps
    with pytest.raises(DuplicateTaskError):
        g.add("b", step, deps=("a",))
    with pytest.raises(TypeError, match="hashable"):
        g.add(["x"], step, deps=("a",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hashable"):
        g.add("x", step, deps=(["a"],))  # type: ignore[arg-type]
    assert dagexec.run(g)["c"] == 0
    g.add("d", step, deps=("c", "later"))  # a dependency not added yet
    with pytest.raises(MissingDependencyError, match="later"):
        g.validate()  # the change dropped the cached validation
    g.add("later", step, deps=("a",))
    assert dagexec.run(g, targets=["d"])["d"] == 0
    assert dagexec.run(g, targets=["b"])["b"] == 0  # the earlier compiled index was not changed
    assert len(g) == 5
