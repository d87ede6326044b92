"""A graph of every kind of task function, for identity tests across processes.

``python identity_graph.py`` prints the identities, one hex line each; the test
runs it under several ``PYTHONHASHSEED`` values and compares with its own.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

from dagexec._persist.identity import task_identities

LIMIT = 3


def helper(x: int) -> int:
    return x * LIMIT


def source() -> set[str]:
    return {"alpha", "beta", "gamma"} | {x for x in ("delta",)}


def member(s: set[str]) -> bool:
    return "alpha" in s and helper(1) == 3


class Scale:
    def __init__(self, factor: int, tags: set[str]) -> None:
        self.factor = factor
        self.tags = tags

    def __call__(self, x: Any) -> Any:
        return x


def columns() -> tuple[list[Any], list[Any], list[tuple[int, ...]], list[Any], list[Any]]:
    names: list[Any] = ["src", ("member", 1), "partial", "builtin", "object", "class", 7]
    fns: list[Any] = [
        source,
        member,
        functools.partial(max, 1, key=abs),
        len,
        Scale(2, {"x", "y", "z"}),
        frozenset,
        operator.itemgetter(0),
    ]
    deps: list[tuple[int, ...]] = [(), (0,), (1,), (0,), (3,), (0,), (2, 5)]
    args: list[Any] = [None, None, None, None, None, None, ({"s", "t", "u"}, 1.5)]
    kwargs: list[Any] = [
        None,
        {"b": frozenset("abc"), "a": [None, True]},
        None,
        None,
        None,
        None,
        None,
    ]
    return names, fns, deps, args, kwargs


def identities() -> list[str]:
    ids = task_identities(*columns())
    return [i.hex() for i in ids if i is not None]


if __name__ == "__main__":
    print("\n".join(identities()))
