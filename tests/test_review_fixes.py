"""Regression tests for the defects of the outside review (issue 8), one section each."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

import pytest

import dagexec
from dagexec import Graph


def diamond() -> Graph:
    """::

    raw --> norm --> report
    raw --> side
    """
    g = Graph()
    g.add("raw", lambda: 2)
    g.add("norm", lambda raw: raw * 10, deps=["raw"])
    g.add("side", lambda raw: raw + 1, deps=["raw"])
    g.add("report", lambda norm: f"n={norm}", deps=["norm"])
    return g


# --- 1. targets given as a one-shot iterable -------------------------------------


def _one_shot(names: Iterable[Hashable]) -> Iterable[Hashable]:
    return (n for n in names)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda names: _one_shot(names), id="generator"),
        pytest.param(lambda names: iter(list(names)), id="iterator"),
        pytest.param(lambda names: map(str, names), id="map"),
        pytest.param(lambda names: dict.fromkeys(names).keys(), id="keys-view"),
    ],
)
def test_run_and_executor_run_read_any_iterable_of_targets_once(
    make: Callable[[Iterable[Hashable]], Iterable[Hashable]],
) -> None:
    expected = {"norm": 20, "side": 3}
    assert dict(dagexec.run(diamond(), targets=make(["norm", "side"]), workers=2)) == expected
    with dagexec.Executor(workers=2) as ex:
        assert dict(ex.run(diamond(), targets=make(["norm", "side"]))) == expected


def test_a_generator_of_targets_is_consumed_exactly_once() -> None:
    pulled: list[str] = []

    def names() -> Iterable[Hashable]:
        for n in ("side", "norm"):
            pulled.append(n)
            yield n

    result = dagexec.run(diamond(), targets=names(), workers=1)
    assert dict(result) == {"side": 3, "norm": 20}
    assert pulled == ["side", "norm"]
