"""The loop-closure trap is caught before the run (issue 23 item 4).

``for f in files: g.add(("load", f), lambda: load(f))`` gives every task the
last ``f``. Tasks sharing one code object that read a closure cell (a loop in a
function) or a module global (a loop at module level) rebound between their
adds get a ``dagexec.LoopClosureWarning`` naming the tasks, the variable and
the fix; the correct patterns get none.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import pytest

import dagexec
from dagexec import Graph, LoopClosureWarning

FILES = ["a.txt", "b.txt", "c.txt"]


def load(f: str) -> str:
    return f.upper()


def no_warning(g: Graph) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", LoopClosureWarning)
        g.validate()


def test_a_loop_in_a_function_shares_one_cell_and_is_warned() -> None:
    def build() -> Graph:
        g = Graph()
        for f in FILES:
            g.add(("load", f), lambda: load(f))
        return g

    g = build()
    with pytest.warns(LoopClosureWarning) as caught:
        result = dagexec.run(g, workers=1)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "('load', 'a.txt'), ('load', 'b.txt'), ('load', 'c.txt')" in message
    assert "variable 'f'" in message
    assert "args=(f,)" in message
    assert "'c.txt'" in message  # the value every task will see
    assert caught[0].filename == __file__  # points at the caller, not at dagexec
    # It is a warning, not a refusal: the run happens (with the trap's answer).
    assert set(result.values()) == {"C.TXT"}


def test_a_loop_at_module_level_rebinds_a_global_and_is_warned() -> None:
    # Module-level code: the loop variable is a global, the lambda has no closure.
    source = "g = dagexec.Graph()\nfor f in FILES:\n    g.add(('load', f), lambda: load(f))\n"
    module: dict[str, Any] = {"dagexec": dagexec, "FILES": FILES, "load": load}
    exec(compile(source, "nightly.py", "exec"), module)
    with pytest.warns(LoopClosureWarning, match=r"variable 'f'.*args=\(f,\)"):
        module["g"].validate()


def test_one_function_object_reading_a_rebound_global_is_warned() -> None:
    source = (
        "def read():\n"
        "    return load(f)\n"
        "g = dagexec.Graph()\n"
        "for f in FILES:\n"
        "    g.add(('load', f), read)\n"
    )
    module: dict[str, Any] = {"dagexec": dagexec, "FILES": FILES, "load": load}
    exec(compile(source, "nightly.py", "exec"), module)
    with pytest.warns(LoopClosureWarning, match=r"share the function read \(nightly.py:1\)"):
        module["g"].validate()


def test_the_warning_is_given_once_per_graph_version() -> None:
    def build() -> Graph:
        g = Graph()
        for f in FILES:
            g.add(("load", f), lambda: load(f))
        return g

    g = build()
    with pytest.warns(LoopClosureWarning):
        g.validate()
    no_warning(g)  # validated already: no second warning for the same graph


@pytest.mark.parametrize("pattern", ["args", "partial", "default", "factory", "kwargs"])
def test_the_correct_patterns_get_no_warning(pattern: str) -> None:
    def make(f: str) -> Any:
        return lambda: load(f)  # a cell of its own per call

    g = Graph()
    for f in FILES:
        if pattern == "args":
            g.add(("load", f), load, args=(f,))
        elif pattern == "partial":
            g.add(("load", f), functools.partial(load, f))
        elif pattern == "default":
            g.add(("load", f), lambda f=f: load(f))
        elif pattern == "factory":
            g.add(("load", f), make(f))
        else:
            g.add(("load", f), load, kwargs={"f": f})
    no_warning(g)
    assert dagexec.run(g, workers=1)[("load", "b.txt")] == "B.TXT"


def test_a_shared_constant_read_by_every_task_is_no_trap() -> None:
    def build() -> Graph:
        g = Graph()
        suffix = ".gz"
        for f in FILES:
            g.add(("load", f), lambda f=f: load(f + suffix))
        return g

    no_warning(build())


def test_a_variable_rebound_to_an_equal_value_is_no_trap() -> None:
    def build() -> Graph:
        g = Graph()
        for i in range(3):
            config = {"level": 1}  # a new but equal dict each time
            g.add(i, lambda: config["level"])
        return g

    no_warning(build())


def test_a_map_is_one_task_and_no_trap() -> None:
    g = Graph()
    g.add("files", lambda: FILES)
    g.map("loaded", load, over="files")
    no_warning(g)


def test_plain_functions_take_the_fast_path_and_record_nothing() -> None:
    """A function that reads no cell and no data global costs add nothing for
    the trap: it is not recorded, and keeps taking add's fast path."""

    def step(*args: int) -> int:
        return len(args)

    g = Graph()
    for i in range(100):
        g.add(i, step, deps=(i - 1,) if i else ())
    assert not g._watched
    assert g._plain_calls  # learned: the next adds take the fast path
