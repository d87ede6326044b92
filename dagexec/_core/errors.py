"""The exceptions dagexec raises for bad graphs and bad targets.

Every error derives from :class:`DagexecError` and also from the builtin a caller
would naturally catch (``ValueError`` for a malformed graph, ``KeyError`` for an
unknown target), the way :mod:`graphlib` makes ``CycleError`` a ``ValueError``.
Each keeps its data as attributes *and* names the offender in its message, so a
program can react to it and a person can fix it from the message alone.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Hashable, Iterable, Sequence
from typing import Any

__all__ = [
    "Cancelled",
    "CheckpointError",
    "CycleError",
    "DagexecError",
    "DuplicateTaskError",
    "MissingDependencyError",
    "TaskTimeout",
    "UnknownTargetError",
    "WorkerCrashed",
    "close_names",
    "describe",
]

# "Did you mean" compares the misspelled name with at most this many names (those
# sharing its first character first, then those of the most similar lengths):
# about 0.2 s on the error path of a million-task graph, where comparing with
# every name would take seconds. A larger value finds matches in more crowded
# graphs and costs proportionally more.
_SUGGEST_MAX_CANDIDATES = 20_000


def describe(name: Hashable) -> str:
    """Render a task name for a message: ``repr`` keeps ``'1'`` apart from ``1``.

    Never raises: a name whose ``repr`` fails is described by its type, so an
    error about a hostile name is still reported.
    """
    try:
        return repr(name)
    except Exception:
        return f"<{type(name).__name__} name with a failing repr>"


def close_names(word: Hashable, known: Iterable[Hashable], n: int = 3) -> tuple[str, ...]:
    """Up to ``n`` string names in ``known`` that look like ``word`` (difflib ratio >= 0.6).

    Only for error messages: it walks ``known`` once, so it costs time only when
    an error is being raised. Non-string names are not compared.
    """
    if not isinstance(word, str) or not word:
        return ()
    size, first = len(word), word[0]
    slack = max(2, size // 3)
    # Names sharing the first character, then closest in length, are compared first:
    # typos rarely hit the first character, and difflib's ratio needs similar lengths.
    buckets: dict[tuple[bool, int], list[str]] = {}
    for name in known:
        if type(name) is str and name and name != word:
            gap = abs(len(name) - size)
            if gap <= slack:
                buckets.setdefault((name[0] != first, gap), []).append(name)
    candidates: list[str] = []
    for key in sorted(buckets):
        candidates += buckets[key][: _SUGGEST_MAX_CANDIDATES - len(candidates)]
        if len(candidates) >= _SUGGEST_MAX_CANDIDATES:
            break
    return tuple(difflib.get_close_matches(word, candidates, n=n))


def _did_you_mean(suggestions: dict[Hashable, tuple[str, ...]]) -> str:
    parts = []
    for missing, names in suggestions.items():
        if names:
            options = " or ".join(repr(x) for x in names)
            parts.append(
                f"did you mean {options}?"
                if len(suggestions) == 1
                else f"for {describe(missing)}, did you mean {options}?"
            )
    return " ".join(parts) + " " if parts else ""


def _path_item(name: Hashable) -> str:
    # A cycle reads best as ``a -> b -> a``; only non-strings need repr to be unambiguous.
    return name if isinstance(name, str) else repr(name)


class DagexecError(Exception):
    """Base class of every error dagexec raises about a graph or its use."""


class CycleError(DagexecError, ValueError):
    """The graph has a cycle, so no task on it could ever become ready.

    ``cycle`` is the path in data-flow order (each task feeds the next), with the
    first name repeated at the end so the loop is explicit, as in :mod:`graphlib`.
    """

    def __init__(self, cycle: Sequence[Hashable]) -> None:
        self.cycle: tuple[Hashable, ...] = tuple(cycle)
        path = " -> ".join(_path_item(n) for n in self.cycle)
        super().__init__(
            f"cycle: {path} (each task depends on the one before it); "
            "remove one of these dependencies"
        )


class MissingDependencyError(DagexecError, ValueError):
    """A task depends on names that are not in the graph.

    With ``known`` (the graph's task names), ``suggestions`` maps each missing name
    to the closest existing ones, and the message asks "did you mean". With
    ``inferred_from`` (a function name), the dependencies were read from that
    function's parameter names by ``@g.task``, and the message says so.
    """

    def __init__(
        self,
        task: Hashable,
        missing: Sequence[Hashable],
        *,
        known: Iterable[Hashable] | None = None,
        inferred_from: str | None = None,
        message: str | None = None,
    ) -> None:
        self.task = task
        self.missing: tuple[Hashable, ...] = tuple(missing)
        self.suggestions: dict[Hashable, tuple[str, ...]] = {}
        if known is not None:
            known = known if isinstance(known, Collection) else list(known)
            self.suggestions = {m: close_names(m, known) for m in self.missing}
        names = ", ".join(describe(m) for m in self.missing)
        which = "which is" if len(self.missing) == 1 else "which are"
        if inferred_from is None:
            fix = "add the missing task or drop the dependency"
        else:
            params = "parameter" if len(self.missing) == 1 else "parameters"
            names += f" (read by @g.task from the {params} {names} of {inferred_from}())"
            fix = "rename the parameter to the task it needs, or pass deps=[...] to @g.task"
        super().__init__(
            message
            or f"task {describe(task)} depends on {names}, {which} not in the graph; "
            f"{_did_you_mean(self.suggestions)}{fix}"
        )


class DuplicateTaskError(DagexecError, ValueError):
    """A task name was added twice; names identify results, so they must be unique."""

    def __init__(self, task: Hashable, message: str | None = None) -> None:
        self.task = task
        super().__init__(
            message
            or f"task {describe(task)} is already in the graph; give the new task another name"
        )


class UnknownTargetError(DagexecError, KeyError):
    """A requested target is not a task of the graph.

    With ``known`` (the graph's task names), ``suggestions`` maps each unknown
    target to the closest existing names, and the message asks "did you mean".
    """

    def __init__(
        self,
        targets: Sequence[Hashable],
        known: Iterable[Hashable] | None = None,
        *,
        message: str | None = None,
    ) -> None:
        self.targets: tuple[Hashable, ...] = tuple(targets)
        self.target = self.targets[0]
        self.suggestions: dict[Hashable, tuple[str, ...]] = {}
        if known is not None:
            known = known if isinstance(known, Collection) else list(known)
            self.suggestions = {t: close_names(t, known) for t in self.targets}
        names = ", ".join(describe(t) for t in self.targets)
        noun = "target" if len(self.targets) == 1 else "targets"
        hint = _did_you_mean(self.suggestions) or "check the spelling"
        self.message = (
            message or f"unknown {noun} {names}: not a task of this graph; {hint.strip()}"
        )
        super().__init__(self.message)

    def __str__(self) -> str:
        # KeyError.__str__ would repr() the message and wrap it in quotes.
        return self.message


class TaskTimeout(DagexecError, TimeoutError):
    """An attempt of a task ran longer than its ``timeout=``.

    The attempt's thread cannot be killed: it keeps running, and keeps its
    resources, until the function returns; its worker slot gets a new thread,
    its value is discarded and ``current_task().cancelled`` is set for it. The
    run does not wait for it (docs/attempts.md).

    A process task's attempt (``isolate="process"``) is not left running: its
    worker kills the child at the deadline, and says so with ``killed``. One that
    the task's own code raised, or returned, has ``killed`` False.
    """

    # Set by the one place a process task times out (ChildSlot.time_out): how the
    # run tells a killed child from a TaskTimeout the task's code raised itself.
    killed = False

    def __init__(self, task: Hashable, timeout: float, attempt: int = 1) -> None:
        self.task = task
        self.timeout = timeout
        self.attempt = attempt
        super().__init__(
            f"task {describe(task)} timed out: attempt {attempt} ran longer than its "
            f"timeout={timeout:g} s; raise the timeout, or make the task check "
            "dagexec.current_task().cancelled and return early"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # With its state: notes (and marks such as a dask run's failing task) survive
        # a pickle from a dask worker or a child process, as for other exceptions.
        return (type(self), (self.task, self.timeout, self.attempt), self.__dict__)


class WorkerCrashed(DagexecError, RuntimeError):
    """The child process running a task (``isolate="process"``) died before it answered.

    A segfault, ``os._exit``, the out-of-memory killer: only this task fails; the
    next process task on the same worker gets a new child. ``exitcode`` is the
    child's exit status as :attr:`subprocess.Popen.returncode` gives it (negative:
    killed by that signal).
    """

    def __init__(self, task: Hashable, exitcode: int | None, pid: int = 0) -> None:
        self.task = task
        self.exitcode = exitcode
        self.pid = pid
        super().__init__(
            f"task {describe(task)}: its child process (pid {pid}) died while running it, "
            f"{_exit_status(exitcode)}; the task's work is lost (its next attempt or the "
            "next process task gets a new child). Look for a crash in native code, "
            "os._exit or the out-of-memory killer"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.task, self.exitcode, self.pid))


def _exit_status(exitcode: int | None) -> str:
    if exitcode is None:
        return "with an unknown exit status"
    if exitcode < 0:
        import signal

        try:
            signame = signal.Signals(-exitcode).name
        except ValueError:
            signame = "an unknown signal"
        return f"killed by signal {signame} ({-exitcode})"
    return f"with exit code {exitcode}"


class Cancelled(DagexecError):
    """Raised by ``current_task().check()`` once the attempt's cancellation token is set
    (its timeout passed, or the run is stopping)."""


class LoopClosureWarning(UserWarning):
    """Tasks that will all read the last value of a variable their adds changed.

    ``for f in files: g.add(("load", f), lambda: load(f))`` makes tasks that
    share one function body reading ``f`` when they *run*, after the loop has
    ended: every task loads the last file. Warned before the run (when the graph
    is validated), naming the tasks, the variable and the fix: pass the value
    as a constant, ``g.add(("load", f), load, args=(f,))``.
    """


class CheckpointError(DagexecError):
    """A value could not be checkpointed, or the checkpoint file cannot be used.

    ``task`` is the name of the task at fault (None for a problem with the file),
    ``path`` the checkpoint file. The original exception, if any, is ``__cause__``.
    Defined here, not with the store, so that ``import dagexec`` exports it
    without loading ``sqlite3``.
    """

    def __init__(self, message: str, *, task: Hashable | None = None, path: str = "") -> None:
        super().__init__(message)
        self.task = task
        self.path = path
