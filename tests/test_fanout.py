"""g.map: one task per item of a value known only at run time."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dagexec
from dagexec import Graph, TaskState
from dagexec.testing import (
    ConcurrencyProbe,
    Gate,
    ResourceRecorder,
    assert_resource_reached,
    assert_within_bounds,
    run_in_thread,
)


def test_map_runs_once_per_item_and_dependents_get_the_list_in_order() -> None:
    """xs -> sq[i] -> total"""
    g = Graph()
    g.add("xs", lambda: (x for x in [3, 1, 2]))  # any iterable, read once
    g.add("k", lambda: 10)
    g.map("sq", lambda x, k: x * x + k, over="xs", deps=["k"])
    g.add("listed", lambda values: values, deps=["sq"])
    result = dagexec.run(g, workers=2, trace=True)
    assert result["listed"] == [19, 11, 14]
    assert result.status[("sq", 0)] is TaskState.DONE
    assert {r.name for r in result.trace} >= {("sq", 0), ("sq", 1), ("sq", 2)}
    assert "sq" not in {r.name for r in result.trace}  # assembled, never ran
    assert_within_bounds(result)


def test_an_empty_map_gives_an_empty_list() -> None:
    g = Graph()
    g.add("xs", list)
    g.map("m", lambda x: x, over="xs")
    assert dict(dagexec.run(g, workers=1)) == {"m": []}


def test_callbacks_see_each_item_by_name() -> None:
    ends: list[object] = []

    class Ends:
        def on_task_end(self, name: object, state: TaskState, seconds: float) -> None:
            ends.append(name)

    g = Graph()
    g.add("xs", lambda: "ab")
    g.map("up", str.upper, over="xs")
    dagexec.run(g, workers=1, callbacks=[Ends()])
    assert sorted(map(str, ends)) == sorted(map(str, ["xs", ("up", 0), ("up", 1), "up"]))


def test_chained_maps_go_item_by_item() -> None:
    """(b, 0) finishes while (a, 1) is still held: b did not wait for all of a."""
    gate = Gate()
    b0_done = threading.Event()
    g = Graph()
    g.add("xs", lambda: [0, 1])
    g.map("a", lambda x: gate.wait() if x == 1 else x, over="xs")
    g.map("b", lambda y: b0_done.set() if y == 0 else y, over="a")
    with dagexec.Executor(workers=2) as ex:
        future = run_in_thread(ex.run, g)
        assert b0_done.wait(10)
        assert gate.wait_for_waiting(1)  # (a, 1) cannot end before the gate opens
        gate.open()
        result = future.result(timeout=30)
    assert result.status[("b", 1)] is TaskState.DONE


def test_a_failing_item_skips_its_gather_and_its_chained_item() -> None:
    g = Graph()
    g.add("xs", lambda: range(4))
    g.map("inv", lambda x: 1 / (x - 2), over="xs")
    g.map("again", lambda y: y * 2, over="inv")
    g.add("total", sum, deps=["again"])
    result = dagexec.run(g, workers=2, on_error="continue")
    assert result.status[("inv", 2)] is TaskState.FAILED
    assert result.status[("again", 2)] is TaskState.SKIPPED
    assert result.status[("again", 3)] is TaskState.DONE
    assert result.status["again"] is TaskState.SKIPPED
    assert result.status["total"] is TaskState.SKIPPED
    assert list(result.errors) == [("inv", 2)]


def test_a_failing_item_is_raised_naming_the_item() -> None:
    g = Graph()
    g.add("xs", lambda: [1, 0])
    g.map("inv", lambda x: 1 / x, over="xs")
    with pytest.raises(ZeroDivisionError) as info:
        dagexec.run(g, workers=1)
    assert "dagexec: raised by task ('inv', 1)" in info.value.__notes__


def test_a_value_that_is_not_iterable_fails_the_map() -> None:
    g = Graph()
    g.add("n", lambda: 5)
    g.map("m", lambda x: x, over="n")
    with pytest.raises(TypeError) as info:
        dagexec.run(g, workers=1)
    assert any("map 'm' iterates the value of 'n'" in n for n in info.value.__notes__)


def test_items_hold_the_maps_resources() -> None:
    gate, probe = Gate(), ConcurrencyProbe()
    g = Graph()
    g.add("xs", lambda: range(6))
    g.map("use", probe.wrap(gate.gated(lambda x: x)), over="xs", resources={"gpu": 1})
    g.map("plain", lambda x: x, over="xs")
    recorder = ResourceRecorder(g)
    with dagexec.Executor(workers=4, resources={"gpu": 2}) as ex:
        future = run_in_thread(ex.run, g, callbacks=[recorder])
        assert recorder.wait_for_held("gpu", 2)
        assert gate.wait_for_waiting(2)
        assert probe.active == 2
        gate.open()
        result = future.result(timeout=30)
    assert result["use"] == list(range(6))
    assert probe.peak == 2
    assert result.stats.peak_resources == {"gpu": 2} == recorder.peak
    assert_resource_reached(result, "gpu")


def test_partial_run_of_a_map() -> None:
    ran: list[str] = []
    g = Graph()
    g.add("xs", lambda: [1, 2])
    g.map("m", lambda x: x + 1, over="xs")
    g.add("other", lambda: ran.append("other"))
    assert dict(dagexec.run(g, ["m"], workers=1)) == {"m": [2, 3]}
    assert ran == []


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_random_map_pipelines_match_a_serial_run(data: Any) -> None:
    """A source list, then random maps over earlier maps or over the source, with
    random extra deps, priorities and resources; every map's list is checked."""
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    items = data.draw(st.lists(st.integers(-5, 5), max_size=12))
    g = Graph()
    g.add("src", lambda: list(items))
    g.add("c", lambda: 3)
    expected: dict[str, list[int]] = {}
    maps: list[str] = []
    for j in range(data.draw(st.integers(1, 4))):
        over = rng.choice(["src", *maps])
        source = items if over == "src" else expected[over]
        extra = ["c"] if rng.random() < 0.5 else []
        plus = 3 if extra else 0
        name = f"m{j}"
        g.map(
            name,
            lambda x, *k, j=j: x * 2 + j + sum(k),
            over=over,
            deps=extra,
            priority=rng.randint(-1, 1),
            resources={"gpu": 1} if rng.random() < 0.5 else None,
        )
        expected[name] = [x * 2 + j + plus for x in source]
        maps.append(name)
    result = dagexec.run(
        g, maps, workers=data.draw(st.integers(1, 3)), queue_cap=2, resources={"gpu": 1}
    )
    assert {m: result[m] for m in maps} == expected
    assert_within_bounds(result)
    assert result.stats.peak_resources["gpu"] <= 1


def test_readme_fanout_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "graphs.md").read_text("utf-8")
    section = page[page.index("## Dynamic fan-out") : page.index("## Retries, timeouts")]
    [block] = re.findall(r"```python\n(.*?)```", section, re.S)
    exec(compile(block, "docs/graphs.md", "exec"), {})
    assert capsys.readouterr().out == "21 TaskState.DONE\n"


def test_a_skipped_chained_map_lets_the_items_it_would_read_go() -> None:
    """a's items are counted for b (a map over a); when b is skipped (its other
    dependency failed) before it expands, their values must not stay alive."""
    import gc
    import weakref

    class Big:
        pass

    refs: list[weakref.ref[Big]] = []
    gate = Gate()

    def make(x: int) -> Big:
        big = Big()
        refs.append(weakref.ref(big))
        return big

    def fail_later() -> None:
        gate.wait()
        raise ValueError("extra fails")

    g = Graph()
    g.add("xs", lambda: range(3))
    g.map("a", make, over="xs")
    g.add("extra", fail_later)
    g.map("b", lambda big, extra: big, over="a", deps=["extra"])
    seen: list[int] = []
    items_done: list[object] = []

    class Check:
        def on_task_end(self, name: object, state: TaskState, seconds: float) -> None:
            if isinstance(name, tuple) and name[0] == "a":
                items_done.append(name)
                if len(items_done) == 3:
                    gate.open()  # every item of a is done: now let 'extra' fail
            if name == "b":
                gc.collect()
                seen.append(sum(r() is not None for r in refs))

    result = dagexec.run(g, ["b"], workers=2, on_error="continue", callbacks=[Check()])
    assert result.status["b"] is TaskState.SKIPPED
    assert seen == [0]


def _alive_at_run_end(g: Graph, refs: list[Any], **kw: Any) -> tuple[dagexec.RunResult, int]:
    import gc

    seen: list[int] = []

    class Check:
        def on_run_end(self, result: dagexec.RunResult) -> None:
            gc.collect()
            seen.append(sum(r() is not None for r in refs))

    result = dagexec.run(g, workers=2, on_error="continue", callbacks=[Check()], **kw)
    return result, seen[0]


def test_a_failed_item_lets_its_siblings_values_go() -> None:
    """With "continue", a failed item skips its map's gather; the values of the
    items that did succeed were counted for that gather and must be let go."""
    import weakref

    class Big:
        pass

    refs: list[weakref.ref[Big]] = []

    def make(x: int) -> Big:
        if x == 0:
            raise ValueError("item 0")
        big = Big()
        refs.append(weakref.ref(big))
        return big

    g = Graph()
    g.add("src", lambda: range(20))
    g.map("m", make, over="src")
    g.add("use", len, deps=["m"])
    result, alive = _alive_at_run_end(g, refs)
    assert result.status["use"] is TaskState.SKIPPED
    assert len(refs) == 19
    assert alive == 0


def test_a_chained_map_skipped_before_its_source_expands_lets_the_items_go() -> None:
    """b (over map a) is skipped by its failed extra dependency before a expands:
    a's items must not be counted for b then."""
    import weakref

    class Big:
        pass

    refs: list[weakref.ref[Big]] = []
    failed = threading.Event()

    def make(x: int) -> Big:
        big = Big()
        refs.append(weakref.ref(big))
        return big

    class Release:
        def on_task_end(self, name: object, state: TaskState, seconds: float) -> None:
            if name == "bad":
                failed.set()

    def src() -> list[int]:
        assert failed.wait(30)  # b is skipped before a can expand
        return [1, 2, 3]

    g = Graph()
    g.add("bad", lambda: 1 / 0)
    g.add("src", src)
    g.map("a", make, over="src")
    g.map("b", lambda big, e: None, over="a", deps=["bad"])
    import gc

    seen: list[int] = []

    class Check(Release):
        def on_run_end(self, result: dagexec.RunResult) -> None:
            gc.collect()
            seen.append(sum(r() is not None for r in refs))

    result = dagexec.run(g, ["b"], workers=2, on_error="continue", callbacks=[Check()])
    assert result.status["b"] is TaskState.SKIPPED
    assert result.status[("a", 2)] is TaskState.DONE
    assert len(refs) == 3
    assert seen == [0]


def test_a_skipped_map_does_not_let_its_source_go_twice() -> None:
    """An expanded map let go of its source's value when it expanded; skipped
    later (an item failed), it must not count that again, or the value was
    dropped while another task still needed it ('late' got None)."""
    g = Graph()
    g.add("src", lambda: [0, 1, 2])
    g.map("m", lambda x: 1 / x, over="src")
    g.add("use", lambda m: m, deps=["m"])
    g.add("late", lambda s: s, deps=["src"], priority=-5)  # after m is skipped
    result = dagexec.run(g, workers=1, max_in_flight=1, on_error="continue")
    assert result.status["m"] is TaskState.SKIPPED
    assert result["late"] == [0, 1, 2]


@pytest.mark.parametrize("map_first", [False, True])
def test_a_task_named_like_a_map_item_is_rejected_before_anything_runs(map_first: bool) -> None:
    """("rows", 0) would be overwritten by item 0 of map "rows" at run time."""
    ran: list[str] = []
    g = Graph()
    g.add("files", lambda: ran.append("files") or [1, 2])
    if map_first:
        g.map("rows", lambda x: x, over="files")
        g.add(("rows", 0), lambda: "static")
    else:
        g.add(("rows", 0), lambda: "static")
        g.map("rows", lambda x: x, over="files")
    with pytest.raises(dagexec.DuplicateTaskError, match=r"item 0 of map 'rows'") as info:
        dagexec.run(g)
    assert info.value.task == ("rows", 0)
    with pytest.raises(dagexec.DuplicateTaskError):
        g.validate()
    assert ran == []


def test_tuple_names_that_are_not_item_names_are_fine() -> None:
    g = Graph()
    g.add("files", lambda: [1])
    g.map("rows", lambda x: x, over="files")
    g.add(("rows", "header"), lambda: "h")
    g.add(("rows", -1), lambda: "last")
    g.add(("other", 0), lambda: 0)
    assert dagexec.run(g)[("rows", "header")] == "h"


@pytest.mark.parametrize("fatal", [SystemExit, KeyboardInterrupt, GeneratorExit])
def test_a_fatal_exception_while_iterating_a_maps_source_names_the_map(
    fatal: type[BaseException],
) -> None:
    """The source is iterated on the scheduler thread; a BaseException there is the
    map's failure (it reaches the caller as itself, noted with the map), not an
    "internal error in the scheduler"."""

    def items() -> Any:
        yield 1
        raise fatal("from the source")

    g = Graph()
    g.add("src", items)
    g.map("m", lambda x: x, over="src")
    g.add("other", lambda: 1)
    with dagexec.Executor(workers=2) as ex:
        with pytest.raises(fatal) as info:
            ex.run(g, on_error="continue")
        notes = getattr(info.value, "__notes__", [])
        assert "dagexec: map 'm' iterates the value of 'src'" in notes
        assert not any("internal error" in note for note in notes)
        assert dict(ex.run(g, targets=["other"])) == {"other": 1}  # still usable


def test_map_deps_by_keyword_pass_the_tasks_values_not_the_keys() -> None:
    # Once refused (iterating the mapping would have passed the task named by
    # its key, "sep"): now the value of "b" goes to the parameter sep.
    g = Graph()
    g.add("a", lambda: ["x", "y"])
    g.add("b", lambda: ",")
    g.add("sep", lambda: "not this one")
    g.map("mm", lambda x, sep: x + sep, over="a", deps={"sep": "b"})
    assert dagexec.run(g, ["mm"], workers=2)["mm"] == ["x,", "y,"]
