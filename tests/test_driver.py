"""The driver only moves messages (issue 20, step 3), and the parts that decide for it.

No threads: runs are made but never driven; reports are built by hand and handed
to the report handler, the balancer and the run's stop the way the driver would.
"""

from __future__ import annotations

import ast
import gc
import io
import sys
import tokenize
from pathlib import Path
from types import FrameType

from dagexec import Graph
from dagexec._core.hooks import Hooks
from dagexec._core.plan import plan_run
from dagexec._core.result import CANCELLED, DONE
from dagexec._engine.run.attempts import AttemptBook, LiveAttempt
from dagexec._engine.run.balance import Balance
from dagexec._engine.run.driver import Driver
from dagexec._engine.run.items import head
from dagexec._engine.run.reports import handle
from dagexec._engine.run.run_stop import RunStop
from dagexec._engine.run.scheduler import Run
from dagexec._engine.workers.inbox import Inbox
from dagexec._engine.workers.wire import ABORT, FREED, NOT_STARTED, Message
from dagexec._engine.workers.wire import CHAIN as R_CHAIN
from dagexec._engine.workers.wire import DONE as R_DONE
from dagexec._engine.workers.wire import FAILED as R_FAILED
from dagexec._engine.workers.wire import MEMBER as R_MEMBER

# The source of the Driver under test (the installed one when CI tests the wheel).
DRIVER = Path(sys.modules[Driver.__module__].__file__ or "")

# The bound: the loop that moves messages stays small enough to read at once.
MAX_CODE_LINES = 150

_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def test_the_line_count_skips_blanks_comments_and_docstrings_only() -> None:
    source = (
        '"""Module doc,\n\non three lines."""\n'
        "\n"
        "# a comment\n"
        "x = 1  # code with a comment\n"
        "def f(a):\n"
        '    """Its doc."""\n'
        "    s = '''a string that is\n"
        "    not a docstring'''\n"
        "    return (a +\n"
        "            s)\n"
    )
    # x = 1; def f; the two lines of s; the two lines of the return.
    assert code_lines(source) == 6


def test_the_driver_is_at_most_150_code_lines() -> None:
    lines = code_lines(DRIVER.read_text(encoding="utf-8"))
    assert 0 < lines <= MAX_CODE_LINES, (
        f"_engine/run/driver.py has {lines} code lines; it only moves messages: a decision "
        "goes to the module that owns it (reports.py, run_stop.py, balance.py, timers.py)"
    )


def _run(n: int = 6, workers: int = 2) -> Run:
    """A run of ``n`` independent tasks on ``workers`` bare inboxes, never driven."""
    g = Graph()
    for i in range(n):
        g.add(i, lambda: None)
    plan = plan_run(g._compile(), None)
    inboxes: list[Inbox[object]] = [Inbox(4) for _ in range(workers)]
    return Run(
        plan,
        inboxes,  # type: ignore[arg-type]
        queue_cap=4,
        max_in_flight=workers * 5,
        on_error="raise",
        hooks=Hooks([]),
        trace=False,
    )


def test_a_run_is_one_record_in_layers_set_in_one_place() -> None:
    """Issue 29 (step 2, item 1): the stop, the driver and the run are one record, not
    three objects each handed the same references. The stop and the driver are
    layers of the run (each a subclass of the one below, as RunState's are); only
    the run's constructor sets fields, and it sets every field a layer declares
    and every slot."""
    assert Run.__mro__[:4] == (Run, Driver, RunStop, object)
    assert "__init__" not in vars(Driver) and "__init__" not in vars(RunStop)
    run = _run()
    declared = {name for layer in (RunStop, Driver) for name in layer.__annotations__}
    slots = {name for layer in (RunStop, Driver, Run) for name in layer.__slots__}
    assert declared <= slots and not hasattr(run, "__dict__")  # every field a slot
    slots -= {"__weakref__", "control"}  # control: an explored run's (explore_driver.py)
    unset = sorted(name for name in slots if not hasattr(run, name))
    assert not unset, f"fields of the run never set by Run.__init__: {unset}"
    # Nothing besides the run holds what the whole run shares: no part was handed
    # its results queue or its stop flags (no item is out yet to carry them).
    # (A plan without cleanup tasks makes no hard stop: no item could carry it.)
    assert run.hard_stop is None
    for field in ("results", "stop", "cancelled"):
        shared = getattr(run, field)
        holders = [o for o in gc.get_referrers(shared) if o is not run and o is not vars(run)]
        holders = [o for o in holders if not isinstance(o, FrameType)]
        assert not holders, f"besides the run, {len(holders)} objects hold its {field}"


def _dispatched(run: Run) -> list[tuple[int, int]]:
    """Dispatch what the run has ready as its driver would; (worker, task) of each item."""
    assert not run._dispatch()
    sent = []
    for worker, inbox in enumerate(run.inboxes):
        while not inbox.empty():
            item = inbox.get_nowait()
            assert item is not None
            sent.append((worker, head(item)))
    return sent


def _done(sent: list[tuple[int, int]]) -> list[Message]:
    return [(worker, task, R_DONE, task * 10, 0.0, 0.0) for worker, task in sent]


def test_a_batch_of_returned_values_takes_the_same_path_as_one_with_other_reports() -> None:
    """The handler's shortcut (every report a DONE) leaves what the general loop leaves."""
    plain, mixed = _run(), _run()
    sent = _dispatched(plain)
    assert _dispatched(mixed) == sent and len(sent) == 6
    assert sum(plain.balance.held) == 6
    batch = _done(sent)
    # A FREED report of an attempt this run never lent to is a no-op, so the
    # mixed batch differs only in the path it takes.
    other: Message = (-1, object(), FREED, None, 0.0, 0.0)
    handle(plain, batch, 5.0)
    handle(mixed, [*_done(sent[:3]), other, *_done(sent[3:])], 5.0)
    for run in (plain, mixed):
        assert list(run.state.state) == [DONE] * 6
        assert run.state.in_flight == 0 and run.state.unfinished == 0
        assert run.balance.held == [0, 0]
        assert run.balance.last_seen == [5.0, 5.0]
    assert plain.state.values == mixed.state.values
    assert batch == []  # let go of: values are not kept alive by the batch


def test_off_workers_notes_returned_values_and_chains_only() -> None:
    inboxes: list[Inbox[object]] = [Inbox(4), Inbox(4)]
    balance = Balance(inboxes, 4)
    balance.dispatched(0, 1.0, 4)
    balance.dispatched(1, 1.0, 2)
    only_done: list[Message] = [(0, 1, R_DONE, None, 0.0, 0.0), (1, 2, R_DONE, None, 0.0, 0.0)]
    assert balance.off_workers(only_done, 2.0) == []
    assert balance.held == [3, 1] and balance.last_seen == [2.0, 2.0]
    failed: Message = (0, 3, R_FAILED, ValueError(), 0.0, 0.0)
    member: Message = (0, 5, R_MEMBER, None, 0.0, 0.0)  # the chain is still on it
    chain: Message = (0, 5, R_CHAIN, None, 0.0, 0.0)
    batch = [(1, 4, R_DONE, None, 0.0, 0.0), failed, ABORT, member, chain]
    assert balance.off_workers(batch, 3.0) == [1, 2, 3, 4]  # all but the DONE
    assert balance.held == [2, 0]  # the failure is the handler's to note (Balance.off)
    assert balance.last_seen == [3.0, 3.0]
    balance.off(0, 4.0)
    assert balance.held == [1, 0] and balance.last_seen == [4.0, 3.0]


def test_at_rest_fails_a_stuck_run_and_ends_a_stopping_one() -> None:
    run = _run(n=2)
    stops = run  # the stop is a layer of the run
    # Nothing dispatched, nothing in flight: as the driver would find a run whose
    # tasks can never be handed out (a bug), it must fail, not end as a success.
    assert stops.at_rest() is False
    assert isinstance(run.state.first_error, RuntimeError)
    assert run.state.stopping
    assert list(run.state.state) == [CANCELLED, CANCELLED]
    assert stops.at_rest() is True  # stopping now: nothing can report any more


def test_at_rest_waits_for_an_attempt_that_holds_resources() -> None:
    run = _run(n=2)
    run.state.stop()
    attempt = LiveAttempt(AttemptBook(), "x", 1, 0, 1.0, (), 1)
    run.lent[attempt] = ()
    assert run.at_rest() is None  # its FREED report is still to come
    del run.lent[attempt]
    assert run.at_rest() is True


def test_a_refused_item_outside_a_stop_aborts_the_run_at_once() -> None:
    """A worker refuses items only once abort() set the stop flag: the driver stops
    the run then, even before the abort's own message arrives."""
    run = _run(n=3)
    assert not run._dispatch()  # two to worker 0, one to worker 1
    item = run.inboxes[0].get_nowait()  # taken by its worker, which refuses it:
    run.stop.set()  # abort() set the flag on another thread; its ABORT is on its way
    assert item is not None
    handle(run, [(0, head(item), NOT_STARTED, None, 0.0, 0.0)], 1.0)
    assert run.aborted and run.state.stopping
    assert run.cancelled.is_set()  # no cleanup task to wait for
    assert run.balance.held == [0, 0]  # the refused one, and the two taken back
    assert list(run.state.state) == [CANCELLED] * 3
