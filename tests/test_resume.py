"""Resume planning: stored tasks cut the graph; unreadable values are planned again."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagexec._persist.checkpoint import CheckpointStore
from dagexec._persist.resume import plan_resume, resume

# a --> b --> d        (indices 0..4)
# a --> c --> d
#       c --> e
DEPS: list[tuple[int, ...]] = [(), (0,), (0,), (1, 2), (2,)]
A, B, C, D, E = range(5)


def test_stored_tasks_cut_the_graph() -> None:
    assert plan_resume(DEPS, [D], {B, C}) == ({D}, {B, C})  # 'a' is not even loaded
    assert plan_resume(DEPS, [D], {D, A}) == (set(), {D})
    assert plan_resume(DEPS, [D, E], {A}) == ({B, C, D, E}, {A})
    assert plan_resume(DEPS, [D, E], set()) == ({A, B, C, D, E}, set())
    assert plan_resume(DEPS, [E], {C, D}) == ({E}, {C})


@settings(deadline=None, max_examples=100)
@given(st.data())
def test_the_plan_is_complete_and_minimal(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 14))
    deps = [
        tuple(sorted(data.draw(st.sets(st.integers(0, i - 1), max_size=3)))) if i else ()
        for i in range(n)
    ]
    stored = data.draw(st.sets(st.integers(0, n - 1)))
    targets = data.draw(st.sets(st.integers(0, n - 1), min_size=1))
    run, load = plan_resume(deps, targets, stored)
    assert not run & load
    assert load <= stored and not run & stored
    assert targets <= run | load
    needed = set(targets)
    for i in run:
        assert set(deps[i]) <= run | load  # everything a running task needs is there
        needed.update(deps[i])
    assert run | load == needed  # and nothing else is run or loaded


def _store_chain(path: Path) -> list[bytes]:
    ids = [bytes([i]) * 16 for i in range(5)]
    with CheckpointStore(path) as store:
        for i, identity in enumerate(ids):
            store.save_nowait(identity, f"value {i}", name=f"t{i}")
    return ids


def test_resume_loads_only_what_the_run_needs(tmp_path: Path) -> None:
    ids = _store_chain(tmp_path / "c.sqlite")
    with CheckpointStore(tmp_path / "c.sqlite") as store:
        partial = [ids[A], None, ids[C], None, None]  # b, d, e not stored / not computed
        run, values = resume(store, partial, DEPS, [D, E])
    assert run == {B, D, E}
    assert values == {A: "value 0", C: "value 2"}


def test_an_unreadable_value_is_run_after_all(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ids = _store_chain(tmp_path / "c.sqlite")
    with sqlite3.connect(tmp_path / "c.sqlite") as db:
        db.execute("UPDATE dagexec_values SET value = x'00' WHERE identity = ?", (ids[C],))
    db.close()
    with (
        caplog.at_level(logging.WARNING, logger="dagexec"),
        CheckpointStore(tmp_path / "c.sqlite") as store,
    ):
        # d and e stored, c damaged: targets d and e load; target c must run, from a.
        run, values = resume(store, ids, DEPS, [C, D, E])
    assert run == {C}
    assert values == {A: "value 0", D: "value 3", E: "value 4"}
    assert "task 't2' is damaged" in caplog.text
