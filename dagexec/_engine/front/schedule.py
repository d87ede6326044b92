"""A schedule of an explored run as a short string, and the failure that carries one.

Two forms, one class. The *steps* of a run, exactly: ``"a@0 b@1+c@0 d@1"`` is
``a`` alone on worker 0, then ``b`` on worker 1 and ``c`` on worker 0 together
(held until both have started), then ``d``; each step starts once the one before
has ended. And *pairs*, the smallest form of a failing schedule: ``"b<a"`` is a
plain run's order (one task at a time) except that ``b`` ends before ``a``
starts. A name that is a plain word (not a keyword such as ``None``) prints
bare; any other name prints as its ``repr`` (a map's item ``('m', 0)``, ``b'x'``,
``None``; infinity as ``1e999``), which :meth:`Schedule.parse` reads back with
:func:`ast.literal_eval`, trying a literal before a bare word.
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["Schedule", "ScheduleDivergence"]

_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/\-]*")
_DELIMITERS = "@<+ "


def _name(name: Hashable) -> str:
    """``name`` as a schedule prints it: bare if a plain word that is no Python
    keyword (``None``, ``True`` and ``False`` are the literals), else a literal
    :func:`ast.literal_eval` reads back (infinity has none of its own: 1e999)."""
    if isinstance(name, str) and _BARE.fullmatch(name) and not keyword.iskeyword(name):
        return name
    if type(name) is float and math.isinf(name):
        return "1e999" if name > 0 else "-1e999"
    return repr(name)


@dataclass(frozen=True)
class Schedule:
    """How an explored run went: its ``steps`` (each a tuple of ``(task, worker)``
    started together), or, in its smallest form, ``pairs`` of tasks ``(a, b)``
    where ``a`` ends before ``b`` starts. ``str()`` gives the short string that
    :meth:`parse` reads back; :func:`dagexec.testing.replay_schedule` reruns it."""

    steps: tuple[tuple[tuple[Hashable, int], ...], ...] = ()
    pairs: tuple[tuple[Hashable, Hashable], ...] | None = None

    def __post_init__(self) -> None:
        # A step is tasks that start together, each on its own worker: a worker
        # named twice could never hold both (the step would wait for a partner
        # that cannot start), a task named twice cannot start twice at once.
        for k, step in enumerate(self.steps, 1):
            _check_step(k, step)

    def __str__(self) -> str:
        if self.pairs is not None:
            return " ".join(f"{_name(a)}<{_name(b)}" for a, b in self.pairs)
        return " ".join("+".join(f"{_name(t)}@{w}" for t, w in step) for step in self.steps)

    @property
    def order(self) -> tuple[Hashable, ...]:
        """The tasks in the order their steps started (a retried task twice)."""
        return tuple(t for step in self.steps for t, _ in step)

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """The schedule ``str(schedule)`` printed.

        Raises:
            TypeError: ``text`` is not a string.
            ValueError: it is not a schedule; the message says where.
        """
        if not isinstance(text, str):
            raise TypeError(f"Schedule.parse: expected a str, got {type(text).__name__}")
        return _Parser(text).schedule()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.at = text.strip(), 0

    def fail(self, what: str) -> ValueError:
        return ValueError(
            f"Schedule.parse: {what} at character {self.at} of {self.text!r}; a schedule "
            "reads like 'a@0 b@1+c@0' (steps) or 'b<a' (pairs)"
        )

    def name(self) -> Hashable:
        text, start = self.text, self.at
        bare = _BARE.match(text, start)
        word = None
        if bare is not None and (bare.end() == len(text) or text[bare.end()] in _DELIMITERS):
            word = bare.group()
            if not keyword.iskeyword(word):  # None, True, False: the literals
                self.at = bare.end()
                return word
        for end in range(start + 1, len(text) + 1):
            if end == len(text) or text[end] in _DELIMITERS:
                try:
                    value = ast.literal_eval(text[start:end])
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    continue
                self.at = end
                return value  # type: ignore[no-any-return]
        if word is not None:  # a keyword that is no literal ('if'): a name all the same
            self.at = start + len(word)
            return word
        raise self.fail("no task name")

    def expect(self, char: str) -> bool:
        if self.at < len(self.text) and self.text[self.at] == char:
            self.at += 1
            return True
        return False

    def worker(self) -> int:
        digits = re.compile(r"\d+").match(self.text, self.at)
        if digits is None:
            raise self.fail("no worker number after '@'")
        self.at = digits.end()
        return int(digits.group())

    def schedule(self) -> Schedule:
        steps: list[tuple[tuple[Hashable, int], ...]] = []
        pairs: list[tuple[Hashable, Hashable]] = []
        text = self.text
        if not text:
            raise self.fail("an empty string (the plain order is Schedule(pairs=()))")
        while self.at < len(text):
            first = self.name()
            if self.expect("<"):
                pairs.append((first, self.name()))
            elif self.expect("@"):
                step = [(first, self.worker())]
                while self.expect("+"):
                    task = self.name()
                    if not self.expect("@"):
                        raise self.fail("no '@' after a task name")
                    step.append((task, self.worker()))
                steps.append(tuple(step))
            else:
                raise self.fail("expected '@' or '<' after a task name")
            if steps and pairs:
                raise self.fail("steps and pairs mixed")
            if self.at < len(text) and not self.expect(" "):
                raise self.fail("expected a space")
            while self.expect(" "):
                pass
        if pairs:
            return Schedule(pairs=tuple(pairs))
        return Schedule(steps=tuple(steps))


class ScheduleDivergence(AssertionError):
    """A schedule gave a different result than the plain order did: a task's
    value or state differed (``task`` names the first), or ``check`` failed.

    Attributes:
        seed: the seed of the run that diverged (``explore(seed=...)`` with
            ``runs=1`` runs that schedule first).
        schedule: that run's :class:`Schedule`.
        orders: the two dispatch orders: the plain order, and this run's.
        task: the first task (in this run's order) whose value or state differed;
            None when only ``check`` failed.
        shrunk: the smallest schedule that still diverges (pairs: removing any
            one makes the run agree); the full schedule if the pairs alone do not.
    """

    def __init__(
        self,
        message: str,
        *,
        seed: int,
        schedule: Schedule,
        orders: tuple[tuple[Hashable, ...], tuple[Hashable, ...]],
        task: Hashable | None,
        shrunk: Schedule,
    ) -> None:
        super().__init__(message)
        self.seed, self.schedule, self.orders = seed, schedule, orders
        self.task, self.shrunk = task, shrunk


def _check_step(k: int, step: tuple[tuple[Hashable, int], ...]) -> None:
    """Step ``k`` of a schedule: not empty, each worker a number >= 0 named once,
    each task named once."""
    where = f"Schedule: step {k} ({'+'.join(f'{_name(t)}@{w}' for t, w in step)})"
    if not step:
        raise ValueError(f"Schedule: step {k} is empty; a step starts one task or more")
    for _, w in step:
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise ValueError(f"{where}: a worker is a number >= 0, got {w!r}")
    twice = _named_twice([w for _, w in step])
    if twice is not None:
        raise ValueError(
            f"{where} puts two tasks on worker {twice[0]}; tasks that start "
            "together each need their own worker"
        )
    again = _named_twice([t for t, _ in step])
    if again is not None:
        raise ValueError(
            f"{where} starts task {_name(again[0])} twice; a task starts once a step "
            "(a retry is a later step)"
        )


def _named_twice(names: list[Hashable]) -> tuple[Hashable] | None:
    """The first of ``names`` that is there twice (in a 1-tuple: it may be None), or None."""
    if len(set(names)) == len(names):
        return None
    return (next(n for n in names if names.count(n) > 1),)
