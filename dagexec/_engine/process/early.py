"""The next call sent early: a worker hands its child its next process task while
the current one runs, so that the child need not wait for the parent between calls.

Off by default (:data:`EARLY_SEND`): measured on this project's 2-CPU machine it
did not pay (docs/performance.md, "The next call sent early"). How it goes, on the
worker thread alone::

    worker thread, waiting for call A     its inbox           its child
      sender.begin: inbox.watch(wake) <-- put(B) writes wake
      woken: take_first(B) ---------- CALL B (early) ------>  (queued in the pipe)
      A's answer <--------------------------------------------- A ends
      worker loop: B is its next item                          BEGAN B (stamp), loads B
      run_sent: waits for B, its deadline from the stamp <---  B's answer

Who owns what: the :class:`Sender` is its worker thread's (kept on its
``Running``), and so is the item it took early (``Running.next``); the
:class:`EarlyCall` is on the worker's ``ChildSlot`` (``slot.early``) from the send
until its turn ends. Only that thread touches either. The inbox's side is
:meth:`Inbox.watch` / :meth:`Inbox.take_first`, under the inbox's mutex.

What stays as it was: B was dispatched as any task, so it counts in flight and
holds its resources from dispatch, and no other worker can take it any more (a
task queued behind a long one waits for it: one reason this is off). B counts as
not started until the child says BEGAN: a crash of the child before that, a
timeout of A, a kill, leave B to be sent again, to a new child, when its turn
comes (no attempt is used up); a stop or a cancel before it withdraws B
(:func:`withdraw`): the child drops it (DROPPED) and stays, and B is reported
NOT_STARTED, never saved. If the child had begun B, B is a running call as any.

Never sent early (:func:`eligible`): a cleanup task, a checkpointed run's task
(its function is wrapped by the saver), a task with a test helper's hold (a
gate or a probe, entered on the worker thread before the send), a task of
another run, a call whose pickle is over :data:`EARLY_MAX_BYTES` or has
out-of-band buffers. The child side is ``child.py`` and ``transfer.EarlyCalls``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import time
from typing import Any

from ..._core.errors import WorkerCrashed
from ..._core.isolate import IsolatedCall
from ..._core.policy import Attempt, CurrentTask
from ..._observation.capture import child_wanted, from_child
from .loading import extra_for
from .transfer import BEGAN, CALL, DROPPED, LOG, WITHDRAW, dumps, lift, receive, send, shm_dir
from .travel import parts, travelling_name

# A process_pool.ChildSlot, whose module imports this one: named, not imported.
ChildSlot = Any

__all__ = [
    "EARLY_MAX_BYTES",
    "EARLY_SEND",
    "EarlyCall",
    "Sender",
    "clear",
    "eligible",
    "note",
    "run_sent",
    "sender_for",
    "withdraw",
]

# Whether a worker sends its child the next process task before the current one
# returns. On: the child starts its next call without waiting for its worker to
# wake, read the answer, report and send; off (the default): no task is taken off
# an inbox early, so an idle worker may still take it (measured not to pay here).
EARLY_SEND = False
# The largest call sent early (its pickle, envelope included). The child does not
# read its requests while a call runs, so the send must fit in the pipe's buffer
# (64 KiB on Linux) or the worker thread would block in it with the answer it
# waits for unread. Higher sends more calls early; lower leaves more room.
EARLY_MAX_BYTES = 16 * 1024
# How long a worker waits for the child's word on a call it withdraws (DROPPED or
# BEGAN); the child answers at once, its stop listener being free. Past it the
# child is killed and the call counts as not started.
_VERDICT = 5.0
_SEQ_BYTES = 8


class EarlyCall:
    """A call sent to a child before its turn: its worker's item and what it became."""

    __slots__ = (
        "began",
        "call",
        "dropped",
        "extra",
        "fn",
        "info",
        "item",
        "seq",
        "stop",
        "waited",
        "withdrawn",
    )

    def __init__(self, item: Any, fn: Attempt, stop: Any, seq: int, extra: Any) -> None:
        self.item, self.fn, self.stop, self.seq, self.extra = item, fn, stop, seq, extra
        self.call: IsolatedCall = fn.fn  # type: ignore[assignment]  # eligible() checked
        self.info: CurrentTask = fn.info
        self.began: float | None = None  # the child's stamp (time.monotonic()) at BEGAN
        self.dropped = False  # the child said DROPPED: it never ran
        self.withdrawn = False  # WITHDRAW was sent
        self.waited = False  # its turn came: its worker waits for its answer


def sender_for(here: Any) -> Sender | None:
    """The worker's sender while :data:`EARLY_SEND` is on (made on first use); None
    off, or on a thread that is not a worker's."""
    if not EARLY_SEND or here.inbox is None:
        return None
    sender: Sender | None = here.early
    if sender is None:
        sender = here.early = Sender(here)
    return sender


class Sender:
    """One worker's early sending: its ``Running`` (its inbox, and ``next``, the item
    taken early, which the worker loop runs before any other) and the pipe the
    inbox wakes it through."""

    __slots__ = ("here", "wake_r", "wake_w", "watching")

    def __init__(self, here: Any) -> None:
        self.here = here
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.watching = False

    def begin(self, slot: ChildSlot) -> None:
        """A call's wait begins: watch the inbox, unless a call went early already."""
        if slot.early is not None or self.here.next is not None or slot.poller is None:
            return
        if self.here.inbox.watch(self.wake_w):
            self._take(slot)  # an item is there already
        else:
            slot.poller.register(self.wake_r, select.POLLIN)
            self.watching = True

    def woken(self, slot: ChildSlot, events: list[tuple[int, int]]) -> bool:
        """The poll woke: take an item that came (the inbox wrote ``wake``); whether
        the reply pipe has something too."""
        reply = False
        for fd, _ in events:
            if fd == self.wake_r:
                self.end(slot)
                self._take(slot)
            else:
                reply = True
        return reply

    def end(self, slot: ChildSlot) -> None:
        """Stop watching the inbox (a wait ended, or an item came)."""
        if not self.watching:
            return
        self.watching = False
        self.here.inbox.unwatch()
        if slot.poller is not None:  # None: the child was killed, its poller went too
            slot.poller.unregister(self.wake_r)
        with contextlib.suppress(BlockingIOError):
            os.read(self.wake_r, 64)

    def _take(self, slot: ChildSlot) -> None:
        item = self.here.inbox.take_first(lambda first: eligible(first, slot))
        if item is None:
            return
        self.here.next = item  # the worker's now, early call or not (a thief raced us)
        if eligible(item, slot):
            slot.early = send_early(slot, item)

    def tick(self, slot: ChildSlot) -> None:
        """No answer yet: withdraw the call sent early if its run stopped or its
        attempt was cancelled (the call running goes on: a cleanup task)."""
        sent = slot.early
        if sent is None or sent.withdrawn:
            return
        if sent.stop._flag or sent.info.cancelled.is_set():
            _ask_withdraw(slot, sent)

    def dropped(self, sent: EarlyCall) -> None:
        """The child dropped ``sent`` while the call before it ran: if it is still
        this worker's next item, report it NOT_STARTED now (its resources free)."""
        if self.here.next is sent.item:
            self.here.next = None
            self.here.refuse(sent.item)

    def began(self, fn: Any) -> bool:
        """The worker loop reached the item of ``fn`` with its run stopped: withdraw
        it if it went early; True if the child had begun it (it runs, as any call)."""
        slot = self.here.child
        sent = None if slot is None else slot.early
        if sent is None or sent.fn is not fn:
            return False
        return withdraw(slot, sent)

    def close(self) -> None:
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def eligible(item: Any, slot: ChildSlot) -> bool:
    """Whether ``item`` may go early to ``slot``'s child (see the module doc)."""
    if type(item) is not tuple:  # a chain, or the STOP sentinel
        return False
    _, _, fn, _, _, stop, _ = item  # a wire.Job (unpacked: this room is below wire's)
    if type(fn) is not Attempt:
        return False
    call = fn.fn
    if type(call) is not IsolatedCall or call.isolate != "process" or call.cleanup or call.holds:
        return False
    key = slot.run_key
    if stop._flag or fn.info.cancelled.is_set() or slot.proc is None:
        return False
    # The run the child is up to date for: a cleanup task's item carries the hard
    # stop, whose mate is its run's stop.
    if stop is key:
        return True
    mate = getattr(key, "mate", None)
    return mate is not None and mate() is stop


def send_early(slot: ChildSlot, item: Any) -> EarlyCall | None:
    """Send ``item``'s call now; its record, or None if it must wait its turn."""
    _, _, fn, args, _, stop, _ = item
    call, info = fn.fn, fn.info
    try:
        data, buffers = dumps((*parts(call.call), lift(args)))
    except Exception:
        return None  # it fails when its turn comes, with the usual message
    if buffers or len(data) > EARLY_MAX_BYTES:
        return None
    loaded, sent_path = set(slot.loaded), slot.sent_path
    extra = extra_for(slot, call, data)
    meta = (CALL, slot.seq + 1, travelling_name(info.name), info.attempt, shm_dir(), extra, True)
    if len(data) + len(pickle.dumps(meta, protocol=5)) > EARLY_MAX_BYTES:
        slot.loaded, slot.sent_path = loaded, sent_path  # as if never sent
        return None
    try:
        slot._tell(child_wanted())
        send(slot.requests, meta, data, [], None)
    except OSError:  # the child died: the wait for the call running sees it
        return None
    slot.seq += 1
    return EarlyCall(item, fn, stop, slot.seq, extra)


def note(slot: ChildSlot, meta: Any) -> None:
    """The child said BEGAN or DROPPED of a call sent early (waited for now, or not)."""
    sent = slot.early
    if sent is None or sent.seq != meta[1]:
        sent = slot.turn
        if sent is None or sent.seq != meta[1]:
            return
    if meta[0] == BEGAN:
        sent.began = min(meta[2], time.monotonic())  # one clock on Linux and macOS
        if sent.waited and sent.call.timeout is not None:
            slot.deadline = sent.began + sent.call.timeout
        return
    sent.dropped = True
    slot.early = None
    if sent.extra is not None:  # never loaded there: send again next time
        slot.loaded.difference_update(sent.extra[1])
        if sent.extra[0] is not None:
            slot.sent_path = None
    if slot.sender is not None:
        slot.sender.dropped(sent)


def run_sent(slot: ChildSlot, sent: EarlyCall, dep_values: tuple[Any, ...], run_key: object) -> Any:
    """Its turn came: wait for the answer to the call sent early. Its deadline counts
    from the child's BEGAN; a child that died before it began leaves it not started,
    and it is sent again, to a new child, now."""
    call, info = sent.call, sent.info
    slot.run_key = run_key  # the same run as the call before (eligible)
    sent.waited = True
    slot.early, slot.turn = None, sent  # the next call may go early now
    slot.busy, slot.waiting = True, sent.seq
    slot.deadline = None
    if sent.began is not None and call.timeout is not None:
        slot.deadline = sent.began + call.timeout
    try:
        return slot.finish(call, info, shm_dir(), sent.extra)
    except WorkerCrashed:
        if sent.began is not None:
            raise
    finally:
        if slot.turn is sent:
            slot.turn = None
    return slot.run(call, dep_values, info, run_key)


def _ask_withdraw(slot: ChildSlot, sent: EarlyCall) -> None:
    sent.withdrawn = True
    with contextlib.suppress(OSError):  # died: the wait sees its end of file
        os.write(slot.stops, (sent.seq | WITHDRAW).to_bytes(_SEQ_BYTES, "little"))


def withdraw(slot: ChildSlot, sent: EarlyCall) -> bool:
    """Withdraw ``sent`` and wait for the child's word: True if it had begun (it is a
    running call now), False if it never will (dropped, or the child is gone)."""
    if sent.began is None and not sent.withdrawn:
        _ask_withdraw(slot, sent)
    deadline = time.monotonic() + _VERDICT
    reader, poller = slot.reader, slot.poller
    while sent.began is None and not sent.dropped:
        left = deadline - time.monotonic()
        if reader is None or poller is None or left <= 0:
            slot.kill()  # no word in time: it must never run now
            return False
        if not reader.has_frame() and not poller.poll(left * 1000.0):
            continue
        try:
            meta, data, _ = receive(reader, unlink=True)
        except EOFError:  # the child died: the call never began
            slot.kill()
            return False
        if meta[0] == LOG:
            from_child(data)
        elif meta[0] != BEGAN and meta[0] != DROPPED:
            slot.kill()  # an answer with no call waiting for it: never read as one
            return False
        else:
            note(slot, meta)
    return not sent.dropped


def clear(slot: ChildSlot) -> None:
    """A call went early and another is to be sent instead: it must never run."""
    sent = slot.early
    if sent is not None and withdraw(slot, sent):
        slot.kill()  # it began, and nobody would wait for it
    slot.early = None
