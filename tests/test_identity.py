"""Task identities: an edit changes the task and everything downstream, nothing else;
equal across processes whatever the hash seed."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagexec._core.errors import CheckpointError
from dagexec._persist.identity import task_identities

ROOT = Path(__file__).resolve().parent.parent


def define(source: str, name: str = "f", **namespace: Any) -> Callable[..., Any]:
    """Compile a function from source, as if its file had been edited."""
    exec(source, namespace)
    fn: Callable[..., Any] = namespace[name]
    return fn


def ids(fns: list[Any], deps: list[tuple[int, ...]], **columns: Any) -> list[bytes]:
    names = columns.pop("names", [f"t{i}" for i in range(len(fns))])
    result = task_identities(names, fns, deps, **columns)
    assert all(isinstance(i, bytes) and len(i) == 16 for i in result)
    return [i for i in result if i is not None]


def changed(before: list[bytes], after: list[bytes]) -> set[int]:
    return {i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b}


# A diamond and an unrelated task:   0 --> 1 --> 3      4 (alone)
#                                    0 --> 2 --> 3
DEPS: list[tuple[int, ...]] = [(), (0,), (0,), (1, 2), ()]


def base_fns() -> list[Any]:
    return [define(f"def f(*a):\n    return {i}\n") for i in range(5)]


@pytest.mark.parametrize(
    ("task", "downstream"), [(0, {0, 1, 2, 3}), (1, {1, 3}), (3, {3}), (4, {4})]
)
def test_an_edited_body_changes_the_task_and_its_downstream_only(
    task: int, downstream: set[int]
) -> None:
    fns = base_fns()
    before = ids(fns, DEPS)
    fns[task] = define("def f(*a):\n    return 'edited'\n")
    assert changed(before, ids(fns, DEPS)) == downstream


EDITS = {
    "constant": ("def f(x):\n    return x + 1\n", "def f(x):\n    return x + 2\n"),
    "nested code": (
        "def f(x):\n    def g():\n        return 1\n    return g()\n",
        "def f(x):\n    def g():\n        return 2\n    return g()\n",
    ),
    "default": ("def f(x, n=1):\n    return x\n", "def f(x, n=2):\n    return x\n"),
    "keyword default": ("def f(x, *, n=1):\n    return x\n", "def f(x, *, n=2):\n    return x\n"),
    "parameter name": ("def f(x):\n    return x\n", "def f(y):\n    return y\n"),
    "called name": ("def f(x):\n    return abs(x)\n", "def f(x):\n    return len(x)\n"),
    "set constant": (
        "def f(x):\n    return x in {'a', 'b'}\n",
        "def f(x):\n    return x in {'a', 'c'}\n",
    ),
    "docstring": ('def f(x):\n    "old"\n    return x\n', 'def f(x):\n    "new"\n    return x\n'),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_every_kind_of_code_edit_is_seen(edit: str) -> None:
    old, new = EDITS[edit]
    assert ids([define(old)], [()]) != ids([define(new)], [()])


def test_moving_a_function_down_its_file_changes_nothing() -> None:
    source = "def f(x):\n    return x + 1\n"
    assert ids([define(source)], [()]) == ids([define("\n\n\n" + source)], [()])


def test_closure_values_are_covered() -> None:
    def make(n: Any) -> Callable[[], Any]:
        return lambda: n

    assert ids([make(1)], [()]) == ids([make(1)], [()])
    assert ids([make(1)], [()]) != ids([make(2)], [()])
    # Unpicklable closure contents are the task's surroundings: covered by type.
    assert ids([make(threading.Lock())], [()]) == ids([make(threading.Lock())], [()])


def test_a_helper_in_the_same_module_is_covered() -> None:
    old = define(
        "def helper(x):\n    return x + 1\ndef f(x):\n    return helper(x) * SCALE\n",
        SCALE=2,
        __name__="pipeline",
    )
    new_helper = define(
        "def helper(x):\n    return x + 2\ndef f(x):\n    return helper(x) * SCALE\n",
        SCALE=2,
        __name__="pipeline",
    )
    new_scale = define(
        "def helper(x):\n    return x + 1\ndef f(x):\n    return helper(x) * SCALE\n",
        SCALE=3,
        __name__="pipeline",
    )
    assert len({*ids([old], [()]), *ids([new_helper], [()]), *ids([new_scale], [()])}) == 3


def test_recursive_functions_have_a_stable_identity() -> None:
    source = (
        "def even(n):\n    return n == 0 or odd(n - 1)\n"
        "def odd(n):\n    return n != 0 and even(n - 1)\n"
        "def f(n):\n    def again(k):\n        return k and again(k - 1)\n"
        "    return again(n)\n"
    )
    one = define(source, "even", __name__="m")
    two = define(source, "even", __name__="m")
    assert ids([one, one.__globals__["odd"]], [(), ()]) == ids(
        [two, two.__globals__["odd"]], [(), ()]
    )
    assert ids([define(source, "f", __name__="m")], [()]) == ids(
        [define(source, "f", __name__="m")], [()]
    )


def test_constant_arguments_are_covered() -> None:
    fns = base_fns()
    args: list[Any] = [None, (1, "x"), None, None, None]
    kwargs: list[Any] = [None, None, {"a": 1, "b": {2, 3}}, None, None]
    before = ids(fns, DEPS, args=args, kwargs=kwargs)
    assert changed(
        before, ids(fns, DEPS, args=[None, (1, "y"), None, None, None], kwargs=kwargs)
    ) == {1, 3}
    kw = [None, None, {"b": {3, 2}, "a": 1}, None, None]  # same call, other order
    assert changed(before, ids(fns, DEPS, args=args, kwargs=kw)) == set()
    kw = [None, None, {"a": 1, "b": {2, 4}}, None, None]
    assert changed(before, ids(fns, DEPS, args=args, kwargs=kw)) == {2, 3}
    # 1, 1.0 and True are equal in Python but are different arguments.
    variants = [(1,), (1.0,), (True,), ("1",), (b"1",), ([1],)]
    assert len({ids([len], [()], args=[a])[0] for a in variants}) == len(variants)


def test_large_constants_are_covered_to_the_last_byte() -> None:
    big = bytes(100_000)
    edited = big[:-1] + b"\x01"
    assert ids([len], [()], args=[(big,)]) == ids([len], [()], args=[(bytes(100_000),)])
    assert ids([len], [()], args=[(big,)]) != ids([len], [()], args=[(edited,)])


def test_numpy_arrays_as_arguments() -> None:
    np = pytest.importorskip("numpy")
    a = np.arange(10_000, dtype=np.float64)
    b = a.copy()
    b[-1] += 1
    assert ids([len], [()], args=[(a,)]) == ids([len], [()], args=[(a.copy(),)])
    assert ids([len], [()], args=[(a,)]) != ids([len], [()], args=[(b,)])
    assert ids([len], [()], args=[(a,)]) != ids([len], [()], args=[(a.astype(np.float32),)])


def test_names_and_dependency_order_are_covered() -> None:
    fns = [len, len, max]
    assert ids(fns, [(), (), (0, 1)]) != ids(fns, [(), (), (1, 0)])
    assert ids([len], [()], names=["a"]) != ids([len], [()], names=[("a",)])


def test_partials_methods_objects_and_builtins_are_covered() -> None:
    class Scale:
        def __init__(self, factor: int) -> None:
            self.factor = factor

        def __call__(self, x: int) -> int:
            return x * self.factor

        def apply(self, x: int) -> int:
            return x * self.factor

    variants = [
        functools.partial(max, 1),
        functools.partial(max, 2),
        functools.partial(max, 1, key=abs),
        Scale(1),
        Scale(2),
        Scale(1).apply,
        Scale(2).apply,
        len,
        abs,
        dict,
        frozenset,
    ]
    assert len({ids([fn], [()])[0] for fn in variants}) == len(variants)
    assert ids([Scale(3)], [()]) == ids([Scale(3)], [()])


def test_an_edited_helper_method_of_a_callable_object_is_seen() -> None:
    template = (
        "class Scale:\n"
        "    def __call__(self, x):\n        return self.helper(x)\n"
        "    def helper(self, x):\n        return x * {}\n"
        "    @property\n    def size(self):\n        return {}\n"
    )
    versions = [template.format(1, 0), template.format(2, 0), template.format(1, 9)]
    objects = [define(v, "Scale")() for v in versions]
    found = [ids([obj], [()])[0] for obj in objects]
    assert len(set(found)) == 3
    methods = [ids([obj.helper], [()])[0] for obj in objects]
    assert len(set(methods)) == 3  # a bound method covers its class's other code too
    assert ids([define(versions[0], "Scale")()], [()])[0] == found[0]


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("args", "task 'load': its constant arguments, a tuple, cannot be pickled"),
        ("kwargs", "task 'load': its constant keyword arguments, a list, cannot be pickled"),
    ],
)
def test_unpicklable_arguments_name_the_task(column: str, message: str) -> None:
    value: Any = (threading.Lock(),) if column == "args" else {"lock": threading.Lock()}
    with pytest.raises(CheckpointError, match=message) as info:
        task_identities(["load"], [len], [()], **{column: [value]})
    assert info.value.task == "load"


def test_an_unpicklable_callable_object_names_the_task() -> None:
    class Holder:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __call__(self) -> None:
            pass

    with pytest.raises(CheckpointError, match="task 'hold': its callable object, a Holder"):
        task_identities(["hold"], [Holder()], [()])


def test_a_hostile_name_still_gets_a_message() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

        def __reduce__(self) -> Any:
            raise TypeError("no pickle")

    with pytest.raises(CheckpointError, match=r"task <Hostile name whose repr\(\) raised>"):
        task_identities([Hostile()], [len], [()])


def test_a_self_referencing_argument_falls_back_to_pickle() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert ids([len], [()], args=[(loop,)]) == ids([len], [()], args=[(loop,)])


def test_a_cycle_is_refused() -> None:
    with pytest.raises(ValueError, match="is on a dependency cycle"):
        task_identities(["a", "b"], [len, len], [(1,), (0,)])


def test_only_computes_the_requested_tasks_and_their_ancestors() -> None:
    fns = base_fns()
    names = [f"t{i}" for i in range(5)]
    full = task_identities(names, fns, DEPS)
    part = task_identities(names, fns, DEPS, only=[1])
    assert part == [full[0], full[1], None, None, None]


def test_dependencies_may_come_later_in_the_columns() -> None:
    """Graphs may name a dependency before adding it: 0 <-- 1, stored as [1, 0]."""
    assert (
        ids([len, abs], [(1,), ()], names=["b", "a"])[0]
        == ids([abs, len], [(), (0,)], names=["a", "b"])[1]
    )


def test_a_million_deep_chain_does_not_recurse() -> None:
    n = 200_000
    result = task_identities(range(n), [abs] * n, [()] + [(i - 1,) for i in range(1, n)])
    assert len(set(result)) == n


@settings(deadline=None, max_examples=60)
@given(st.data())
def test_changing_any_task_changes_exactly_its_descendants(data: st.DataObject) -> None:
    """Random DAGs, edges from lower to higher index: edit one task's argument."""
    n = data.draw(st.integers(1, 12))
    deps = [
        tuple(sorted(data.draw(st.sets(st.integers(0, i - 1), max_size=3)))) if i else ()
        for i in range(n)
    ]
    target = data.draw(st.integers(0, n - 1))
    args: list[Any] = [(i,) for i in range(n)]
    before = ids([abs] * n, deps, args=args)
    args[target] = ("edited",)
    after = ids([abs] * n, deps, args=args)
    descendants = {target}
    for i in range(n):
        if descendants.intersection(deps[i]):
            descendants.add(i)
    assert changed(before, after) == descendants


def test_identities_are_equal_across_processes_and_hash_seeds() -> None:
    code = "import identity_graph; print('\\n'.join(identity_graph.identities()))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**env, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for seed in ("0", "1", "4242")
    }
    assert len(outputs) == 1
    import identity_graph

    assert outputs.pop().split() == identity_graph.identities()


# -- what decides a value in the task's own module (issue 19) ------------------------------


def _module_task(tmp_path: Path, source: str, name: str = "task") -> Any:
    """``name`` from ``source`` loaded as a fresh module, as if its file were edited."""
    import importlib.util

    path = tmp_path / f"m{abs(hash(source))}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("edited_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["edited_module"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["edited_module"]
    return getattr(module, name)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(
            "class P:\n    def parse(self, x):\n        return x + 1\n",
            "class P:\n    def parse(self, x):\n        return x + 2\n",
            id="a class's method",
        ),
        pytest.param("EXTS = ('.csv',)\n", "EXTS = ('.csv', '.tsv')\n", id="a tuple constant"),
        pytest.param("EXTS = {'a': 1}\n", "EXTS = {'a': 2}\n", id="a dict constant"),
        pytest.param("EXTS = ['a']\n", "EXTS = ['b']\n", id="a list constant"),
        pytest.param(
            "import re\nPAT = re.compile('a+')\n",
            "import re\nPAT = re.compile('b+')\n",
            id="a compiled pattern",
        ),
    ],
)
def test_what_the_task_names_in_its_module_is_covered(
    tmp_path: Path, before: str, after: str
) -> None:
    uses = "def task(x):\n    return (P, EXTS, PAT)\n"
    filler = "P = EXTS = PAT = None\n"

    def identity(source: str) -> bytes:
        fn = _module_task(tmp_path, filler + source + uses)
        return ids([fn], [()])[0]

    assert identity(before) == identity(before)
    assert identity(before) != identity(after)  # today: the edit is missed


def test_a_lower_case_list_is_state_not_a_constant(tmp_path: Path) -> None:
    # A log of calls the task appends to must not make it run again every time.
    fn = _module_task(tmp_path, "calls = []\ndef task():\n    calls.append(1)\n")
    before = ids([fn], [()])
    fn()
    assert ids([fn], [()]) == before


def test_a_compiled_pattern_is_a_constant_like_any_other() -> None:
    import re

    fn = define("def f(x, pat):\n    return pat.match(x)\n")
    a = ids([fn], [()], args=[(re.compile("a+"),)])  # today: "cannot be pickled"
    assert a == ids([fn], [()], args=[(re.compile("a+"),)])
    assert a != ids([fn], [()], args=[(re.compile("b+"),)])


def test_a_compiled_pattern_as_a_default_is_covered() -> None:
    import re

    def with_default(pattern: str) -> Any:
        return define("def f(x, pat=PAT):\n    return pat.match(x)\n", PAT=re.compile(pattern))

    assert ids([with_default("a+")], [()]) == ids([with_default("a+")], [()])
    assert ids([with_default("a+")], [()]) != ids([with_default("b+")], [()])  # today: same
