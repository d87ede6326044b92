"""dagexec.explain sees maps (issue 31, item 2): a map's own identity is known before
the run, and so are its items when the list it maps over is stored."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagexec

seen_lock = threading.Lock()
seen_names: list[Any] = []


_USES = ", or a helper, class or constant of its module that it uses)"


def _ran() -> list[Any]:
    with seen_lock:
        names = list(seen_names)
        seen_names.clear()
    return names


def _record() -> None:
    with seen_lock:
        seen_names.append(dagexec.current_task().name)


def listing(n: int) -> list[int]:
    _record()
    return list(range(n))


def size(x: int) -> int:
    _record()
    return x * 10


def bigger(x: int) -> int:
    _record()
    return x * 100


def parity(x: int) -> int:
    _record()
    return x % 2  # many elements, few values: the next map's inputs come back equal


def total(xs: list[int]) -> int:
    _record()
    return sum(xs)


def _nightly(fn: Callable[[int], int] = size, n: int = 300) -> dagexec.Graph:
    """The README's nightly pattern: a checkpoint=False lister, then maps."""
    g = dagexec.Graph()
    g.add("files", listing, args=(n,), checkpoint=False)
    g.map("sizes", fn, over="files")
    g.map("scaled", size, over="sizes")
    g.add("total", total, deps=["scaled"])
    return g


def test_an_edited_map_function_is_reported_with_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    dagexec.run(_nightly(), checkpoint=path)
    e = dagexec.explain(_nightly(bigger), checkpoint=path)
    # Before issue 31: "a map: each item loads or runs by its element, once the list
    # exists", for every stage, though the function's edit is known before the run.
    assert e.run["sizes"].kind == "code changed"
    assert str(e.run["sizes"]) == f"its code changed (function 'bigger'{_USES}: every item runs"
    assert e.items["sizes"] == dagexec._persist.explain.MapItems(None, 0)
    assert "sizes" not in e.during_run
    _ran()
    dagexec.run(_nightly(bigger), checkpoint=path)
    assert sum(1 for name in _ran() if name[0] == "sizes") == 300  # as foretold


def test_an_unchanged_map_over_a_list_made_in_the_run_is_decided_by_its_elements(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.sqlite"
    dagexec.run(_nightly(), checkpoint=path)
    e = dagexec.explain(_nightly(n=301), checkpoint=path)
    assert "the list it maps over ('files') is made during the run" in e.during_run["sizes"]
    assert "loads if its items come back equal" in e.during_run["total"]
    _ran()
    dagexec.run(_nightly(n=301), checkpoint=path)
    assert [name for name in _ran() if name[0] == "sizes"] == [("sizes", 300)]


def _stored_list(fn: Callable[[int], int] = size, n: int = 5, after: Any = total) -> Any:
    g = dagexec.Graph()
    g.add("files", listing, args=(n,))  # checkpointed: the list is in the file
    g.map("sizes", fn, over="files")
    g.add("total", after, deps=["sizes"])
    return g


def test_a_map_over_a_stored_list_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    first = dagexec.explain(_stored_list(), checkpoint=path)
    assert str(first.run["sizes"]) == "not stored yet: every item runs"
    dagexec.run(_stored_list(), checkpoint=path)

    same = dagexec.explain(_stored_list(), checkpoint=path)
    assert same.load == ("files", "sizes", "total")  # total: downstream, foreseen
    assert same.items["sizes"].total == 5 and same.items["sizes"].load == 5
    assert same.during_run == {} and same.run == {}
    assert "load  'sizes' (its 5 items)" in str(same)

    edited = dagexec.explain(_stored_list(bigger), checkpoint=path)
    assert (
        str(edited.run["sizes"])
        == f"its code changed (function 'bigger'{_USES}: every item runs (5 items)"
    )
    assert edited.items["sizes"].run == 5
    assert edited.run["total"].kind == "upstream changed"  # foreseen, not "decided later"

    with dagexec.Executor() as ex:
        ex.run(_stored_list(), checkpoint=path)  # nothing to do: all stored
    _ran()
    dagexec.run(_stored_list(bigger), checkpoint=path)
    assert sorted(_ran(), key=str) == [*(("sizes", i) for i in range(5)), "total"]


def test_a_map_with_some_items_stored_says_how_many(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    dagexec.run(_stored_list(n=3), checkpoint=path)
    e = dagexec.explain(_stored_list(n=5), checkpoint=path)
    assert e.run["files"].kind == "constant changed"
    # The list itself is recomputed in the run, so its items are decided then.
    assert "sizes" in e.during_run
    dagexec.run(_stored_list(n=5), checkpoint=path)
    e = dagexec.explain(_stored_list(n=5), checkpoint=path)
    assert e.items["sizes"] == dagexec._persist.explain.MapItems(5, 5)


def test_downstream_tasks_load_when_their_inputs_come_back_equal(tmp_path: Path) -> None:
    """A map edited so that its items come back equal: what is after it loads."""

    def graph(fn: Callable[[int], int]) -> dagexec.Graph:
        g = dagexec.Graph()
        g.add("files", listing, args=(4,))
        g.map("kind", fn, over="files")
        g.map("named", size, over="kind")
        g.add("total", total, deps=["named"])
        return g

    def parity_again(x: int) -> int:
        _record()
        return x & 1  # the same values, other code

    path = tmp_path / "c.sqlite"
    dagexec.run(graph(parity), checkpoint=path)
    e = dagexec.explain(graph(parity_again), checkpoint=path)
    assert e.items["kind"].run == 4
    assert "element comes back equal to a stored one loads" in e.during_run["named"]
    assert "loads if its items come back equal" in e.during_run["total"]
    _ran()
    result = dagexec.run(graph(parity_again), checkpoint=path)
    ran = _ran()
    assert sorted(name[1] for name in ran if name[0] == "kind") == [0, 1, 2, 3]
    assert not [name for name in ran if name[0] == "named"] and "total" not in ran
    assert result.stats.tasks_loaded >= 3  # files, named's items, total


def test_a_checkpoint_false_map_runs_every_item_every_time(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    g = dagexec.Graph()
    g.add("files", listing, args=(3,))
    g.map("sizes", size, over="files", checkpoint=False)
    dagexec.run(g, checkpoint=path)
    e = dagexec.explain(g, checkpoint=path)
    assert e.run["sizes"].kind == "not checkpointed"
    assert e.items["sizes"].run == 3 and "every item runs, every time (3 items)" in str(e)
