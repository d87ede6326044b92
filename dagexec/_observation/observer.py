"""Feeding the trace recorder and the callbacks from the run's one event stream.

Runs on the scheduler thread, like the state machine whose events it reads. A
callback that raises stops the run like a failing task: its exception goes to
the state machine (``fail``), noted with the callback's name, and is kept so
that the scheduler frames its traceback reaches can be cleared once the run is
over (:func:`release_frames`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Sequence
from time import perf_counter
from typing import Any

from .._core.hooks import Hooks
from .._core.result import _FINAL
from .._core.safe import add_note, hook_for_message
from .._state.events import (
    DISPATCH,
    END,
    EXPAND,
    RELEASE,
    RELEASE_HOW,
    RETRY,
    START,
    TIMEOUT,
    Event,
)
from .trace import Recorder

__all__ = ["OWN_FILES", "SILENT", "Observer", "release_frames"]

# Source files whose frames a callback error's traceback may reach (through
# f_back) and that hold the run: this one, and the driver's (added there).
OWN_FILES = {__file__}


class Observer:
    """Trace and callbacks for one run. Scheduler thread only."""

    __slots__ = ("errors", "fail", "hooks", "names", "recorder")

    def __init__(
        self,
        hooks: Hooks,
        names: Sequence[Hashable],
        recorder: Recorder | None,
        fail: Callable[[BaseException], None],
    ) -> None:
        self.hooks = hooks
        self.names = names  # the run's task names (a list that grows with maps)
        self.recorder = recorder
        self.fail = fail
        self.errors: list[BaseException] = []  # callback errors, for release_frames

    def drain(self, events: list[Event]) -> None:
        """Hand every event to the recorder and the hooks, in order; then clear them."""
        hooks, names, recorder = self.hooks, self.names, self.recorder
        now = perf_counter()
        for event in events:  # a callback error appends the cancels it causes
            if recorder is not None:
                recorder.record(event, now)
            kind = event.kind
            if kind == END:
                if hooks.task_end:
                    seconds = event.ended - event.started
                    self.call(hooks.task_end, names[event.task], _FINAL[event.state], seconds)
            elif kind == DISPATCH:
                if hooks.task_dispatch:
                    self.call(hooks.task_dispatch, names[event.task], event.worker)
            elif kind == START:
                if hooks.task_start:
                    self.call(hooks.task_start, names[event.task], event.worker)
                if hooks.attempt_start:
                    self.call(hooks.attempt_start, names[event.task], event.attempt, event.worker)
            else:
                self._other(event)
        events.clear()

    def _other(self, event: Event) -> None:
        """An event of the kinds not seen once per task: a release, a map's
        expansion, a retry, a timeout (off the path of END, DISPATCH and START)."""
        hooks, name, kind = self.hooks, self.names[event.task], event.kind
        if kind == RELEASE:
            if hooks.attempt_release:
                how = RELEASE_HOW[event.state]
                self.call(hooks.attempt_release, name, event.attempt, how)
        elif kind == EXPAND:
            if hooks.map_expand:
                self.call(hooks.map_expand, name, event.items)
        elif kind == RETRY:
            if hooks.task_retry:
                self.call(hooks.task_retry, name, event.attempt)
        elif kind == TIMEOUT and hooks.task_timeout:
            self.call(hooks.task_timeout, name, event.attempt)

    def call(self, hooks: tuple[Callable[..., Any], ...], *args: Any) -> None:
        """Call each hook; one that raises stops the run like a failing task."""
        for hook in hooks:
            try:
                hook(*args)
            except BaseException as exc:
                add_note(exc, f"dagexec: raised by callback {hook_for_message(hook)}")
                # Drop this frame from the traceback; release_frames clears the
                # rest of the scheduler's frames it links to once the run is over.
                if exc.__traceback__ is not None and exc.__traceback__.tb_next is not None:
                    exc.__traceback__ = exc.__traceback__.tb_next
                self.errors.append(exc)
                self.fail(exc)


def _never_fails(exc: BaseException) -> None:
    raise AssertionError("the silent observer calls no hook, so nothing of it fails") from exc


# The observer of every run with no callbacks and no trace: it records nothing and
# calls nothing (such a run makes no events, and its run hooks are empty), so one
# serves them all, where making one per run was a call and an object of each small run.
SILENT = Observer(Hooks(()), (), None, _never_fails)


def release_frames(exc: BaseException) -> None:
    """Clear the scheduler's finished frames that a callback error's traceback reaches.

    The callback's frame links to its caller's frame (``f_back``), and so on up
    the scheduler thread's stack, and those frames hold the run (``self``): all
    its values would live as long as the user keeps the exception. Frames still
    executing (``Run.main`` itself) cannot be cleared and drop their locals as
    they return.
    """
    tb = exc.__traceback__
    # From the innermost frame we kept: call's own when the hook is C code.
    frame = tb.tb_frame if tb is not None else None
    while frame is not None:
        if frame.f_code.co_filename in OWN_FILES:
            with contextlib.suppress(RuntimeError):  # still executing
                frame.clear()
        frame = frame.f_back
