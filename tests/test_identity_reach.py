"""How far an identity reaches, and at what cost (review of issue 31): deep chains of
wrappers, and module-level instances of the task module's own classes."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_identity import _module_task

import dagexec
from dagexec._persist import encoding
from dagexec._persist.identity import task_identities


def _identity(fn: Callable[..., Any]) -> bytes:
    (identity,) = task_identities(["t"], [fn], [()])
    assert identity is not None
    return identity


def _wraps_chain(base: Callable[[int], int], depth: int) -> Callable[..., int]:
    """``depth`` functools.wraps wrappers, each reaching the one below twice: through
    ``__wrapped__`` and through its default ``_f``."""
    fn: Callable[..., int] = base
    for _ in range(depth):
        fn = functools.wraps(fn)(lambda *a, _f=fn: _f(*a))
    return fn


def _plus_one(x: int) -> int:
    return x + 1


def _plus_two(x: int) -> int:
    return x + 2


def test_a_deep_chain_of_wrappers_is_encoded_once_per_level() -> None:
    # Before: each level was encoded twice, so 200 levels took longer than 150 s.
    calls = 0
    parts = encoding._Encoder._function_parts

    def counted(self: encoding._Encoder, fn: Any) -> list[bytes]:
        nonlocal calls
        calls += 1
        return parts(self, fn)

    encoding._Encoder._function_parts = counted  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        _identity(_wraps_chain(_plus_one, 300))
        elapsed = time.perf_counter() - started
    finally:
        encoding._Encoder._function_parts = parts  # type: ignore[method-assign]
    assert calls <= encoding._MAX_DEPTH + 1  # the levels below the cut count by name
    assert elapsed < 5.0  # generous: about a millisecond


def test_an_edit_within_the_depth_limit_is_seen() -> None:
    depth = encoding._MAX_DEPTH - 2
    assert _identity(_wraps_chain(_plus_one, depth)) != _identity(_wraps_chain(_plus_two, depth))
    assert _identity(_wraps_chain(_plus_one, depth)) == _identity(_wraps_chain(_plus_one, depth))


def test_beyond_the_depth_limit_a_function_counts_by_name_only() -> None:
    # Documented in docs/checkpoints.md ("does not see"): deeper than _MAX_DEPTH
    # references, an edit is not seen. Pinned, so that changing it is a choice.
    depth = encoding._MAX_DEPTH + 5
    bases = [lambda x: x + 1, lambda x: x + 2]  # one name (its body is what differs)
    one, two = (_wraps_chain(base, depth) for base in bases)
    assert _identity(one) == _identity(two)
    assert _identity(one) != _identity(_wraps_chain(_plus_one, depth - 1))  # its depth counts


INSTANCES = {
    "a frozen dataclass's field": (
        "import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass C:\n    rate: int\n"
        "CFG = C({})\ndef task(x):\n    return x * CFG.rate\n"
    ),
    "a method of an instance's class": (
        "class Tax:\n    def f(self, x):\n        return x + {}\n"
        "T = Tax()\ndef task(x):\n    return T.f(x)\n"
    ),
    "a class constant of an instance's class": (
        "class Tax:\n    RATE = {}\n    def f(self, x):\n        return x * self.RATE\n"
        "T = Tax()\ndef task(x):\n    return T.f(x)\n"
    ),
    "an attribute set in __init__": (
        "class Tax:\n    def __init__(self, rate):\n        self.rate = rate\n"
        "T = Tax({})\ndef task(x):\n    return x * T.rate\n"
    ),
    "a slot": (
        "class Tax:\n    __slots__ = ('rate',)\n    def __init__(self, rate):\n"
        "        self.rate = rate\nT = Tax({})\ndef task(x):\n    return x * T.rate\n"
    ),
    "a slots dataclass's field": (
        "import dataclasses\n@dataclasses.dataclass(slots=True)\nclass C:\n    rate: int\n"
        "CFG = C({})\ndef task(x):\n    return x * CFG.rate\n"
    ),
    "a NamedTuple's field": (
        "import typing\nclass C(typing.NamedTuple):\n    rate: int\n"
        "CFG = C({})\ndef task(x):\n    return x * CFG.rate\n"
    ),
    "a nested instance": (
        "class Inner:\n    def __init__(self, r):\n        self.r = r\n"
        "class Outer:\n    def __init__(self, inner):\n        self.inner = inner\n"
        "CFG = Outer(Inner({}))\ndef task(x):\n    return x * CFG.inner.r\n"
    ),
    "a callable instance's __call__": (
        "class Scale:\n    def __call__(self, x):\n        return x * {}\n"
        "scale = Scale()\ndef task(x):\n    return scale(x)\n"
    ),
    "an instance as a class constant": (
        "class C:\n    def __init__(self, r):\n        self.r = r\n"
        "class Tax:\n    DEFAULT = C({})\ndef task(x):\n    return x * Tax.DEFAULT.r\n"
    ),
}


def _module_identity(tmp_path: Path, source: str) -> bytes:
    return _identity(_module_task(tmp_path, source))


@pytest.mark.parametrize("edit", sorted(INSTANCES))
def test_an_edit_of_a_module_level_instance_is_seen(tmp_path: Path, edit: str) -> None:
    template = INSTANCES[edit]
    before = _module_identity(tmp_path, template.format(1))
    assert _module_identity(tmp_path, template.format(1)) == before  # loading again: no edit
    assert _module_identity(tmp_path, template.format(2)) != before  # before: equal


def test_an_instance_that_refers_to_itself_has_a_stable_identity(tmp_path: Path) -> None:
    source = (
        "class Node:\n    def __init__(self, r):\n        self.r = r\n        self.me = self\n"
        "        self.PEERS = [self]\nN = Node({})\ndef task(x):\n    return x * N.r\n"
    )
    before = _module_identity(tmp_path, source.format(1))
    assert _module_identity(tmp_path, source.format(1)) == before
    assert _module_identity(tmp_path, source.format(2)) != before


def test_an_instances_lower_case_containers_are_state_not_seen(tmp_path: Path) -> None:
    # Documented: by the rule of globals, a lower-case list or dict attribute is
    # state (a log, a cache the task fills), so filling it does not re-run the task.
    source = (
        "class Log:\n    def __init__(self):\n        self.seen = []\n        self.RATES = [2]\n"
        "LOG = Log()\ndef task(x):\n    LOG.seen.append(x)\n    return x * LOG.RATES[0]\n"
    )
    task = _module_task(tmp_path, source)
    before = _identity(task)
    task(1)
    assert _identity(task) == before
    assert _module_identity(tmp_path, source.replace("[2]", "[3]")) != before


def test_an_instance_with_an_unencodable_attribute_still_identifies(tmp_path: Path) -> None:
    source = (
        "import threading\nclass Guarded:\n    def __init__(self):\n"
        "        self.lock = threading.Lock()\n        self.rate = {}\n"
        "G = Guarded()\ndef task(x):\n    return x * G.rate\n"
    )
    assert _module_identity(tmp_path, source.format(1)) != _module_identity(
        tmp_path, source.format(2)
    )


def test_a_stale_instance_is_not_loaded_end_to_end(tmp_path: Path) -> None:
    """The reviewer's case: run, edit CFG = C(1) -> C(2), explain and run again."""
    template = INSTANCES["a frozen dataclass's field"]
    path = tmp_path / "c.sqlite"

    def graph(k: int) -> dagexec.Graph:
        g = dagexec.Graph()
        g.add("src", lambda: 10)
        g.add("out", _module_task(tmp_path, template.format(k)), deps=["src"])
        return g

    assert dagexec.run(graph(1), checkpoint=path)["out"] == 10
    e = dagexec.explain(graph(2), checkpoint=path)
    assert e.run["out"].kind == "code changed" and e.load == ("src",)
    result = dagexec.run(graph(2), checkpoint=path)
    assert result["out"] == 20 and result.stats.tasks_run == 1  # before: 10, loaded


@pytest.mark.parametrize("edit", [("FACTOR = 2", "FACTOR = 3"), ("RATE = 1", "RATE = 5")])
def test_an_edited_constant_is_not_reported_as_the_functions_own_code(
    tmp_path: Path, edit: tuple[str, str]
) -> None:
    # The review: "its code changed (function 'sq')" for FACTOR = 2 -> 3 read as an
    # edit of sq. One digest covers sq and what it uses, so the reason says both.
    source = "FACTOR = 2\nclass Tax:\n    RATE = 1\ndef sq(x):\n    return x * FACTOR * Tax.RATE\n"
    path = tmp_path / "c.sqlite"

    def graph(text: str) -> dagexec.Graph:
        g = dagexec.Graph()
        g.add("src", lambda: 1)
        g.add("out", _module_task(tmp_path, text, "sq"), deps=["src"])
        g.map("each", _module_task(tmp_path, text, "sq"), over="src_list")
        g.add("src_list", lambda: [1, 2])
        return g

    dagexec.run(graph(source), checkpoint=path)
    e = dagexec.explain(graph(source.replace(*edit)), checkpoint=path)
    for task in ("out", "each"):
        assert e.run[task].kind == "code changed"
        assert str(e.run[task]).startswith(
            "its code changed (function 'sq', or a helper, class or constant of its module"
        )
    assert e.items["each"].run == 2


def test_a_hostile_instance_in_a_cycle_still_identifies(tmp_path: Path) -> None:
    source = (
        "class Odd:\n    def __getattr__(self, name):\n        raise RuntimeError(name)\n"
        "O = Odd()\nO.__dict__['me'] = O\nO.__dict__['rate'] = {}\n"
        "def task(x):\n    return x * O.rate\n"
    )
    assert _module_identity(tmp_path, source.format(1)) != _module_identity(
        tmp_path, source.format(2)
    )


def test_an_instance_of_another_modules_class_is_not_seen(tmp_path: Path) -> None:
    # Documented in docs/checkpoints.md ("does not see"): only the module's own
    # classes' instances are followed (another module's object may be anything:
    # a connection, a large frame). Pinned, so that changing it is a choice.
    source = "import types\nCFG = types.SimpleNamespace(rate={})\ndef task(x):\n"
    source += "    return x * CFG.rate\n"
    assert _module_identity(tmp_path, source.format(1)) == _module_identity(
        tmp_path, source.format(2)
    )
