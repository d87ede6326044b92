"""Whether two explored runs agree, which task differed first, and the smallest
schedule that still makes them differ: the judging half of ``explore``.

Pure functions of what the runs saw (:class:`Observed`); running is
:mod:`dagexec._engine.front.explore`'s. A run's *outcome* is its tasks' states
(errors by type and message), the values they returned (by ``equal``), and, for
a run that raised (``on_error="raise"``), its exception, by type and message.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Container, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._core.item_names import item_of
from ..._core.result import RunResult, TaskState
from ..._core.safe import task_for_message
from .schedule import Schedule

__all__ = [
    "Observed",
    "describe_difference",
    "describe_unstable",
    "first_difference",
    "inversions",
    "shrink",
]

# Most runs one shrink may take: each is a whole run of the graph. Enough for a
# few hundred candidate pairs (ddmin takes O(k log n) runs for k needed pairs).
SHRINK_BUDGET = 300

_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60
_long = reprlib.Repr()
_long.maxstring = 400


@dataclass
class Observed:
    """One explored run: its schedule, every value returned (by task), and its
    result, or what it raised (``raised_by_task``: a task's own exception, under
    ``on_error="raise"``), and ``check``'s failure if any."""

    schedule: Schedule
    values: dict[Hashable, Any]
    result: RunResult | None
    raised: BaseException | None = None
    check_failed: BaseException | None = None
    raised_by_task: bool = False
    order: tuple[Hashable, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.order = tuple(dict.fromkeys(self.schedule.order))


def _error(exc: BaseException | None) -> tuple[str, str] | None:
    return None if exc is None else (type(exc).__qualname__, str(exc))


def _same(equal: Callable[[Any, Any], Any], name: Hashable, a: Any, b: Any) -> bool:
    try:
        same = equal(a, b)
    except Exception as exc:  # a dict of arrays under ==: "truth value ... is ambiguous"
        raise TypeError(
            f"explore: equal(a, b) (default ==) raised {type(exc).__qualname__} comparing "
            f"the values of task {task_for_message(name)}: {_short.repr(str(exc))[1:-1]}; "
            "pass equal= a function that compares such values and returns True or False"
        ) from exc
    if type(same) is bool:
        return same
    if getattr(same, "shape", None) == () and hasattr(same, "__bool__"):  # numpy.bool_
        return bool(same)
    raise TypeError(
        f"explore: equal(a, b) gave {type(same).__name__}, not a bool, comparing the values "
        f"of task {task_for_message(name)} (an array compares element by element); pass "
        "equal= a function that returns True or False, e.g. equal=numpy.array_equal"
    )


def _state_text(state: TaskState | None, error: BaseException | None) -> str:
    if state is TaskState.FAILED and error is not None:
        return f"failed with {type(error).__qualname__}: {_short.repr(str(error))[1:-1]}"
    return "did not run" if state is None else f"ended {state.name}"


def _raised_text(exc: BaseException | None) -> str:
    """What a run as a whole did, whole: its errors are the engine's (a timeout
    says how many tasks had finished), which a short form would cut to look alike."""
    if exc is None:
        return "returned"
    return f"raised {type(exc).__qualname__}: {_long.repr(str(exc))[1:-1]}"


def first_difference(
    ref: Observed, obs: Observed, equal: Callable[[Any, Any], Any]
) -> tuple[Hashable | None, str] | None:
    """The first task (in ``obs``'s order) whose state or value differs from
    ``ref``'s, and how it differs; (None, how) when only the run as a whole did
    (it raised differently); None when the runs agree."""
    if _error(ref.raised) != _error(obs.raised):
        return (
            None,
            f"{_raised_text(obs.raised)} (in the plain order it {_raised_text(ref.raised)})",
        )
    a_status = ref.result.status if ref.result is not None else {}
    b_status = obs.result.status if obs.result is not None else {}
    a_errors = ref.result.errors if ref.result is not None else {}
    b_errors = obs.result.errors if obs.result is not None else {}
    names = dict.fromkeys([*obs.order, *ref.order, *b_status, *a_status])
    for name in names:
        sa, sb = a_status.get(name), b_status.get(name)
        ea, eb = a_errors.get(name), b_errors.get(name)
        if sa != sb or _error(ea) != _error(eb):
            return name, _state_text(sb, eb) + f" (in the plain order it {_state_text(sa, ea)})"
        if name in ref.values and name in obs.values:
            va, vb = ref.values[name], obs.values[name]
            if not _same(equal, name, va, vb):
                return name, (
                    f"gave a different value ({_short.repr(vb)}; in the plain order "
                    f"{_short.repr(va)})"
                )
    return None


def inversions(ref: Observed, obs: Observed) -> list[tuple[Hashable, Hashable]]:
    """Pairs ``(b, a)``: ``a`` ended before ``b`` started in the plain order, but
    ``b`` started before ``a`` ended in ``obs`` (earlier, or in the same step)."""
    step: dict[Hashable, int] = {}
    for k, members in enumerate(obs.schedule.steps):
        for name, _ in members:
            step.setdefault(name, k)
    order = [name for name in ref.order if name in step]
    return [(b, a) for i, a in enumerate(order) for b in order[i + 1 :] if step[b] <= step[a]]


def shrink(
    pairs: Sequence[tuple[Hashable, Hashable]],
    diverges: Callable[[Sequence[tuple[Hashable, Hashable]]], bool],
    budget: int = SHRINK_BUDGET,
) -> list[tuple[Hashable, Hashable]] | None:
    """The smallest subset of ``pairs`` that still ``diverges`` (delta debugging,
    Zeller's ddmin: removing any one pair of it makes the run agree), or None if
    all of them together do not (the divergence needed an overlap).

    ``diverges`` runs the graph under a :class:`~dagexec._engine.run.strategies.Pairs`
    schedule; at most ``budget`` runs in all, after which the smallest found so far.
    """
    runs = [0]

    def test(subset: Sequence[tuple[Hashable, Hashable]]) -> bool:
        if runs[0] >= budget:
            return False
        runs[0] += 1
        return diverges(subset)

    items = list(pairs)
    if not test(items):
        return None
    n = 2
    while len(items) >= 2:
        size = -(-len(items) // n)
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        for k, chunk in enumerate(chunks):
            rest = [p for j, c in enumerate(chunks) if j != k for p in c]
            if test(chunk):
                items, n = chunk, 2
                break
            if n > 2 and test(rest):
                items, n = rest, max(n - 1, 2)
                break
        else:
            if n >= len(items):
                break
            n = min(len(items), 2 * n)
    return items


def describe_difference(
    task: Hashable | None,
    how: str,
    shrunk: Schedule,
    obs: Observed,
    ref: Observed,
    tasks: Container[Hashable] = (),
) -> str:
    """The first line of a divergence: the task, how it differed, and the likely
    missing dependency (from the shrunk pairs, else from the inversions). A map's
    item (``tasks`` are the graph's, to tell) gets the dependency on its map."""
    pairs = list(shrunk.pairs) if shrunk.pairs is not None else inversions(ref, obs)
    ordered = [p for p in pairs if p[0] == task] or pairs
    if task is None:
        return f"the run {how}"
    verb = how.split(" (", 1)[0]
    if not ordered:
        return f"task {task_for_message(task)} {how} under this schedule"
    reader, writer = ordered[0]
    r, w = task_for_message(reader), task_for_message(writer)
    owner, _ = (None, 0) if reader in tasks else item_of(reader, tasks) or (None, 0)
    where = "" if owner is None else f" to the map {task_for_message(owner)}"
    if reader == task:
        first = (
            f"task {r} {verb} when it started before {w} ended: does {r} read something "
            f"{w} writes? add deps=[{w}]{where}"
        )
    else:
        first = (
            f"task {task_for_message(task)} {verb} when {r} started before {w} ended: "
            f"does {r} read something {w} writes? add deps=[{w}] to "
            f"{r if owner is None else task_for_message(owner)}"
        )
    return f"{first}\n  task {task_for_message(task)} {how}"


def describe_unstable(task: Hashable | None, how: str) -> str:
    """The first lines of a divergence that the plain order, run again, repeats:
    no order is to blame, the task (or ``check``) differs by itself."""
    who = "the run" if task is None else f"task {task_for_message(task)}"
    verb = how.split(" (", 1)[0]
    return (
        f"{who} {verb} even in the plain order, run again: no order is to blame, it "
        "differs from run to run by itself (random numbers, the clock, state that setup= "
        "does not reset); make it deterministic, or pass equal= (or check=) a comparison "
        f"that accepts the difference\n  {who} {how}"
    )
