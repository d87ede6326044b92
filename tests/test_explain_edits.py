"""explain's prediction is the next run's decision, on random graphs with maps that are
edited every way a user edits them (issue 31, item 4).

Each task's function comes from a small module made from a template, as if its file
were edited: a plain function, a ``functools.cache`` task, one reading a class
constant, an ``Enum`` value, a ``functools.partial`` helper or a cached helper. An
edit bumps the version the template writes in (so the value changes) or switches the
template; constants grow; dependencies toggle; rows are deleted or damaged under the
file. After each round of edits, ``explain`` is asked and the graph run: every task it
says runs must run, every task it says loads must not, and every map it counts must
run exactly that many items.

A few seconds by default; ``DAGEXEC_STRESS=N`` runs N times the examples.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import tempfile
import threading
import types
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dagexec

STRESS = int(os.environ.get("DAGEXEC_STRESS") or 0)


class Recorder:
    """The tasks (and map items) that really ran, by name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: list[Any] = []

    def __call__(self) -> None:
        with self.lock:
            self.names.append(dagexec.current_task().name)

    def take(self) -> list[Any]:
        with self.lock:
            names, self.names = self.names, []
        return names


recorder = Recorder()


def ints(xs: tuple[Any, ...]) -> int:
    """The sum of the int arguments (a task also gets its own name, so that no two
    calls of a cached function share a cache entry)."""
    return sum(x for x in xs if type(x) is int)


def sum_list(xs: list[int], *rest: Any) -> int:
    recorder()
    return sum(xs) + ints(rest)


def lister(n: int) -> list[int]:
    recorder()
    return list(range(n))


# Templates of a task's module; {v} is the version an edit bumps. Each is injective in
# its arguments' sum, so a map's items are distinct and so are the next map's elements.
TEMPLATES = {
    "plain": "def f(*xs):\n    recorder()\n    return ints(xs) + {v}\n",
    "cached": ("@functools.cache\ndef f(*xs):\n    recorder()\n    return ints(xs) + {v}\n"),
    "class constant": (
        "class Rate:\n    STEP = {v}\n"
        "def f(*xs):\n    recorder()\n    return ints(xs) + Rate.STEP\n"
    ),
    "enum": (
        "class Level(enum.Enum):\n    LOW = {v}\n"
        "def f(*xs):\n    recorder()\n    return ints(xs) + Level.LOW.value\n"
    ),
    "partial helper": (
        "plus = functools.partial(operator.add, {v})\n"
        "def f(*xs):\n    recorder()\n    return plus(ints(xs))\n"
    ),
    "cached helper": (
        "@functools.cache\ndef step():\n    return {v}\n"
        "def f(*xs):\n    recorder()\n    return ints(xs) + step()\n"
    ),
}
KINDS = sorted(TEMPLATES)


def function(kind: str, version: int) -> Any:
    """A fresh module's ``f`` (fresh: a cache never answers for a run)."""
    import enum
    import functools
    import operator

    module = types.ModuleType(f"edited_{KINDS.index(kind)}")
    module.__dict__.update(
        recorder=recorder, ints=ints, functools=functools, enum=enum, operator=operator
    )
    exec(TEMPLATES[kind].format(v=version), module.__dict__)
    return module.f


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 5))
    fn = st.tuples(st.sampled_from(KINDS), st.just(0))
    tasks = [
        {
            "fn": draw(fn),
            "const": draw(st.integers(0, 2)),
            "deps": sorted(draw(st.sets(st.integers(0, i - 1), max_size=2))) if i else [],
            "checkpoint": draw(st.sampled_from([True, True, True, False])),
        }
        for i in range(n)
    ]
    maps = []
    for j in range(draw(st.integers(1, 3))):
        maps.append(
            {
                "fn": draw(fn),
                "const": draw(st.integers(0, 2)),
                "over": draw(st.sampled_from(["stored", "fresh", *(f"m{k}" for k in range(j))])),
                "extra": sorted(draw(st.sets(st.integers(0, n - 1), max_size=2))),
                "checkpoint": draw(st.sampled_from([True, True, True, True, False])),
                "after": draw(st.none() | st.integers(0, n - 1)),
            }
        )
    lengths = {"stored": draw(st.integers(0, 4)), "fresh": draw(st.integers(0, 4))}
    return {"tasks": tasks, "maps": maps, "lengths": lengths, "seed": draw(st.integers())}


def build(spec: dict[str, Any]) -> dagexec.Graph:
    g = dagexec.Graph()
    g.add("stored", lister, args=(spec["lengths"]["stored"],))
    g.add("fresh", lister, args=(spec["lengths"]["fresh"],), checkpoint=False)
    for i, task in enumerate(spec["tasks"]):
        name = f"t{i}"
        g.add(
            name,
            function(*task["fn"]),
            deps=[f"t{d}" for d in task["deps"]],
            args=(task["const"], name),
            checkpoint=task["checkpoint"],
        )
    for j, m in enumerate(spec["maps"]):
        g.map(
            f"m{j}",
            function(*m["fn"]),
            over=m["over"],
            deps=[f"t{d}" for d in m["extra"]],
            args=(m["const"],),
            checkpoint=m["checkpoint"],
        )
        after = [] if m["after"] is None else [f"t{m['after']}"]
        g.add(f"after{j}", sum_list, deps=[f"m{j}", *after])
    return g


def length(spec: dict[str, Any], j: int) -> int:
    """How many items map ``j`` has (its list's length)."""
    over = spec["maps"][j]["over"]
    return spec["lengths"][over] if over in spec["lengths"] else length(spec, int(over[1:]))


def edit(spec: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Each kind of edit, at random; versions and constants only grow."""
    new = {
        "tasks": [dict(t) for t in spec["tasks"]],
        "maps": [dict(m) for m in spec["maps"]],
        "lengths": dict(spec["lengths"]),
        "seed": spec["seed"],
    }
    for i, thing in enumerate(new["tasks"] + new["maps"]):
        roll = rng.random()
        if roll < 0.15:
            kind = rng.choice(KINDS) if rng.random() < 0.3 else thing["fn"][0]
            thing["fn"] = (kind, thing["fn"][1] + 1)
        elif roll < 0.3:
            thing["const"] += 1
        elif roll < 0.4 and "deps" in thing and i:
            thing["deps"] = sorted(set(thing["deps"]) ^ {rng.randrange(i)})
        elif roll < 0.45 and "extra" in thing:
            thing["extra"] = sorted(set(thing["extra"]) ^ {rng.randrange(len(new["tasks"]))})
        elif roll < 0.5:
            thing["checkpoint"] = not thing["checkpoint"]
    for key in new["lengths"]:
        if rng.random() < 0.2:
            new["lengths"][key] += 1
    return new


def damage(path: str, maps: set[str], rng: random.Random) -> None:
    """Delete or garble rows of tasks and items under the file (not a map's mark:
    the file's record that it ever saved items under an identity)."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        rows = conn.execute("SELECT identity, name FROM dagexec_values").fetchall()
        for identity, name in rows:
            if name in maps:
                continue
            roll = rng.random()
            if roll < 0.15:
                conn.execute("DELETE FROM dagexec_values WHERE identity = ?", (identity,))
            elif roll < 0.22:
                conn.execute(
                    "UPDATE dagexec_values SET value = CAST(X'00' || value AS BLOB)"
                    " WHERE identity = ?",
                    (identity,),
                )


def check(spec: dict[str, Any], prediction: Any, ran: list[Any]) -> None:
    tasks = {name for name in ran if not isinstance(name, tuple)}
    items: dict[str, int] = {}
    for name in ran:
        if isinstance(name, tuple):
            items[name[0]] = items.get(name[0], 0) + 1
    assert len(tasks) == len([n for n in ran if not isinstance(n, tuple)]), ran  # once each
    names = ["stored", "fresh", *(f"t{i}" for i in range(len(spec["tasks"])))]
    names += [f"after{j}" for j in range(len(spec["maps"]))]
    for name in names:
        if name in prediction.run:
            assert name in tasks, (name, prediction)
        elif name not in prediction.during_run:
            assert name not in tasks, (name, prediction)  # loaded, or spared
    for j in range(len(spec["maps"])):
        name = f"m{j}"
        counts = prediction.items[name]
        if counts.load is None:
            assert name in prediction.during_run
            continue
        total = length(spec, j) if counts.total is None else counts.total
        assert total == length(spec, j), (name, prediction)
        assert items.get(name, 0) == total - counts.load, (name, prediction, items)
        if name in prediction.load:  # every item loads
            assert counts.total is not None and counts.load == counts.total, prediction


@settings(
    max_examples=40 * max(STRESS, 1),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(specs())
def test_explain_foretells_the_next_run_after_every_kind_of_edit(spec: dict[str, Any]) -> None:
    rng = random.Random(spec["seed"])
    maps = {repr(f"m{j}") for j in range(len(spec["maps"]))}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "c.sqlite")
        dagexec.run(build(spec), checkpoint=path, workers=2)
        for _ in range(3):
            spec = edit(spec, rng)
            damage(path, maps, rng)
            graph = build(spec)
            prediction = dagexec.explain(graph, checkpoint=path)
            recorder.take()
            dagexec.run(graph, checkpoint=path, workers=2)
            check(spec, prediction, recorder.take())
