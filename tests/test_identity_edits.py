"""Edits the identity used to miss (issue 31, item 1): cached and wrapped functions,
class constants, Enum values, partial and cached helpers of the task's module.

Each edit is made the way a user makes it: the module's file is edited and loaded
again, and the task's identity before and after is compared. Each would load
yesterday's value before issue 31.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from test_identity import _module_task

import dagexec
from dagexec._persist.identity import task_identities


def _identity(tmp_path: Path, source: str, name: str = "task") -> bytes:
    fn = _module_task(tmp_path, source, name)
    (identity,) = task_identities(["t"], [fn], [()])
    assert identity is not None
    return identity


EDITS = {
    "functools.cache task": (
        "import functools\n@functools.cache\ndef task(x):\n    return x + {}\n"
    ),
    "functools.lru_cache task": (
        "import functools\n@functools.lru_cache(maxsize=8)\ndef task(x):\n    return x + {}\n"
    ),
    "a decorator object (functools.update_wrapper)": (
        "import functools\n"
        "class traced:\n"
        "    def __init__(self, fn):\n"
        "        functools.update_wrapper(self, fn)\n"
        "    def __call__(self, *a):\n"
        "        return self.__wrapped__(*a)\n"
        "@traced\ndef task(x):\n    return x + {}\n"
    ),
    "a class constant": ("class Tax:\n    RATE = 0.{}\ndef task(x):\n    return x * Tax.RATE\n"),
    "a constant of a base class": (
        "class Base:\n    RATE = 0.{}\nclass Tax(Base):\n    pass\n"
        "def task(x):\n    return x * Tax.RATE\n"
    ),
    "an Enum member's value": (
        "import enum\nclass Rate(enum.Enum):\n    LOW = 0.{}\n    HIGH = 0.5\n"
        "def task(x):\n    return x * Rate.LOW.value\n"
    ),
    "an Enum member as a global": (
        "import enum\nclass Rate(enum.Enum):\n    LOW = 0.{}\nDEFAULT = Rate.LOW\n"
        "def task(x):\n    return x * DEFAULT.value\n"
    ),
    "a functools.partial helper": (
        "import functools\nrounded = functools.partial(round, ndigits={})\n"
        "def task(x):\n    return rounded(x)\n"
    ),
    "the function of a partial helper": (
        "import functools\ndef scale(x, by):\n    return x * by + {}\n"
        "doubled = functools.partial(scale, by=2)\ndef task(x):\n    return doubled(x)\n"
    ),
    "a functools.cache helper": (
        "import functools\n@functools.cache\ndef helper(x):\n    return x + {}\n"
        "def task(x):\n    return helper(x)\n"
    ),
    "a cached method of a class the task uses": (
        "import functools\nclass Prices:\n    @functools.cache\n    def of(self, x):\n"
        "        return x + {}\ndef task(x):\n    return Prices().of(x)\n"
    ),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_each_edit_changes_the_identity(tmp_path: Path, edit: str) -> None:
    template = EDITS[edit]
    before = _identity(tmp_path, template.format(1))
    assert _identity(tmp_path, template.format(1)) == before  # loading again is no edit
    assert _identity(tmp_path, template.format(2)) != before  # before issue 31: equal


def test_a_cache_that_fills_does_not_change_the_identity(tmp_path: Path) -> None:
    source = EDITS["a decorator object (functools.update_wrapper)"].format(1)
    source = source.replace(
        "        functools.update_wrapper(self, fn)\n",
        "        functools.update_wrapper(self, fn)\n        self.seen = {}\n",
    ).replace(
        "        return self.__wrapped__",
        "        self.seen[a] = 1\n        return self.__wrapped__",
    )
    task = _module_task(tmp_path, source)
    (before,) = task_identities(["t"], [task], [()])
    assert task(1) == 2  # its state (a cache, a counter) changed
    assert task_identities(["t"], [task], [()]) == [before]  # before: it differed


def test_class_state_and_python_names_do_not_count(tmp_path: Path) -> None:
    # A registry (a lower-case dict) and a counter under a sunder name change as
    # the task runs: like a lower-case global list, they are state, not constants.
    source = (
        "class Plugin:\n    registry = {}\n    _made_ = 0\n    RATE = 2\n"
        "def task(x):\n    Plugin.registry[x] = x\n    Plugin._made_ += 1\n"
        "    return x * Plugin.RATE\n"
    )
    task = _module_task(tmp_path, source)
    (before,) = task_identities(["t"], [task], [()])
    task(1)
    assert task_identities(["t"], [task], [()]) == [before]


def test_a_partial_over_another_modules_function_counts_by_name(tmp_path: Path) -> None:
    source = "import functools, json\ndumps = functools.partial(json.dumps, indent={})\n"
    source += "def task(x):\n    return dumps(x)\n"
    assert _identity(tmp_path, source.format(1)) != _identity(tmp_path, source.format(2))
    assert _identity(tmp_path, source.format(1)) == _identity(tmp_path, source.format(1))


def test_an_unpicklable_partial_helper_counts_by_its_type() -> None:
    import threading

    namespace: dict[str, Any] = {"functools": functools, "threading": threading}
    exec(
        "guarded = functools.partial(print, threading.Lock())\ndef task():\n    return guarded\n",
        namespace,
    )
    # Surroundings, not data: the run is not refused (a lock cannot be pickled).
    assert task_identities(["t"], [namespace["task"]], [()])[0] is not None


def test_a_cached_task_edited_between_runs_runs_again(tmp_path: Path) -> None:
    """End to end: the run and explain see the edit (before: both said "load")."""
    template = EDITS["functools.cache task"]
    path = tmp_path / "c.sqlite"

    def graph(k: int) -> dagexec.Graph:
        g = dagexec.Graph()
        g.add("x", _module_task(tmp_path, template.format(k)), args=(1,))
        return g

    assert dagexec.run(graph(1), checkpoint=path)["x"] == 2
    e = dagexec.explain(graph(2), checkpoint=path)
    assert e.run["x"].kind == "code changed" and e.load == ()
    result = dagexec.run(graph(2), checkpoint=path)
    assert result["x"] == 3 and result.stats.tasks_run == 1


def test_a_cached_property_of_a_class_the_task_uses_is_covered(tmp_path: Path) -> None:
    template = (
        "import functools\nclass Prices:\n    @functools.cached_property\n"
        "    def base(self):\n        return {}\n"
        "def task(x):\n    return x + Prices().base\n"
    )
    assert _identity(tmp_path, template.format(1)) != _identity(tmp_path, template.format(2))
