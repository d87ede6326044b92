"""The worker inbox is still a bounded queue.Queue: the fast paths keep its contract."""

from __future__ import annotations

import contextlib
import queue
import threading

import pytest
from switching import fast_switching

from dagexec._engine.workers.inbox import Inbox


def test_put_nowait_is_bounded_and_fifo() -> None:
    box: Inbox[int] = Inbox(maxsize=2)
    assert isinstance(box, queue.Queue)
    box.put_nowait(1)
    box.put_nowait(2)
    with pytest.raises(queue.Full):
        box.put_nowait(3)
    assert [box.get(), box.get_nowait()] == [1, 2]
    with pytest.raises(queue.Empty):
        box.get_nowait()
    with pytest.raises(queue.Empty):
        box.get(timeout=0)  # the general path still works


def test_get_wakes_when_an_item_arrives_and_put_never_blocks() -> None:
    box: Inbox[str] = Inbox(maxsize=1)
    got: list[str] = []
    waiting = threading.Event()

    def consumer() -> None:
        waiting.set()
        got.append(box.get())

    t = threading.Thread(target=consumer)
    t.start()
    assert waiting.wait(5)
    box.put_nowait("a")
    t.join(5)
    assert got == ["a"]

    box.put_nowait("b")  # full now: a put never waits for room
    with pytest.raises(queue.Full):
        box.put("c")
    assert box.get() == "b"


def test_a_timed_get_gives_up_when_nothing_comes_and_takes_what_does() -> None:
    box: Inbox[int] = Inbox(maxsize=1)
    with pytest.raises(queue.Empty):
        box.get(timeout=0.01)
    box.put_nowait(7)  # the sleeper's lock must be consistent after a timeout
    assert box.get(timeout=5) == 7
    box.put(1, timeout=5)  # room: goes in at once
    with pytest.raises(queue.Full):
        box.put(2, timeout=5)  # full: raises at once, whatever the timeout
    assert box.get_nowait() == 1


def test_an_inbox_must_be_bounded() -> None:
    with pytest.raises(ValueError, match="maxsize=0"):
        Inbox(maxsize=0)


def test_one_consumer_and_a_thief_lose_and_repeat_nothing() -> None:
    """The worker blocks in get() while another thread (the scheduler's balancer)
    steals with get_nowait() all the time: every item comes out exactly once,
    nobody hangs, and the worker sees its items in order."""
    box: Inbox[int | None] = Inbox(maxsize=4)
    n = 3_000
    got: list[int] = []
    stolen: list[int | None] = []
    producing = threading.Event()
    producing.set()

    def worker() -> None:
        while (item := box.get()) is not None:
            got.append(item)

    def thief() -> None:
        while producing.is_set():
            with contextlib.suppress(queue.Empty):
                stolen.append(box.get_nowait())

    def produce(n: int) -> None:
        for i in range(n):
            while True:
                with contextlib.suppress(queue.Full):
                    box.put_nowait(i)
                    break
        producing.clear()
        threads[1].join(30)
        while True:
            with contextlib.suppress(queue.Full):
                box.put_nowait(None)
                break

    threads = [threading.Thread(target=worker), threading.Thread(target=thief)]
    with fast_switching(1e-5):  # with a GIL, a spinning thief must not starve the rest
        for t in threads:
            t.start()
        produce(n)
    threads[0].join(30)
    assert not any(t.is_alive() for t in threads)
    assert None not in stolen
    assert sorted([*got, *(i for i in stolen if i is not None)]) == list(range(n))
    assert got == sorted(got)  # FIFO for the consumer


def test_put_all_puts_all_or_none_and_wakes_the_sleeping_worker() -> None:
    box: Inbox[int] = Inbox(maxsize=3)
    box.put_nowait(0)
    with pytest.raises(queue.Full):
        box.put_all([1, 2, 3])  # 4 would not fit: none goes in
    assert box.qsize() == 1
    assert box.get_nowait() == 0
    got: list[int] = []
    asleep = threading.Event()

    def worker() -> None:
        asleep.set()
        got.extend(box.get() for _ in range(3))

    t = threading.Thread(target=worker)
    t.start()
    assert asleep.wait(5)
    box.put_all([1, 2, 3])
    t.join(5)
    assert not t.is_alive()
    assert got == [1, 2, 3]


def test_a_put_cut_short_after_its_wake_up_leaves_no_worker_asleep() -> None:
    """An exception between a put's release of the sleeper and its clearing of the
    flag (a signal handler on a main thread that drives its own run) leaves the
    flag set and the lock released: the next put must not fail, and the
    consumer must still wake for every item and time out when there is none."""
    inbox: Inbox[int] = Inbox(4)
    inbox._sleeping = True
    inbox._wake.release()  # the state such a put leaves behind
    inbox.put_all([1])
    assert inbox.get(timeout=5) == 1
    with pytest.raises(queue.Empty):
        inbox.get(timeout=0.01)  # a spurious wake-up is taken in stride
    got: list[int] = []
    consumer = threading.Thread(target=lambda: got.append(inbox.get(timeout=10)))
    consumer.start()
    inbox.put_all([2])
    consumer.join()
    assert got == [2]


def test_the_first_put_starts_the_consumer_once_and_a_failed_start_is_tried_again() -> None:
    """start_on_put: the first put calls the starter; one that raises (a signal
    handler's exception, say, after the thread began) leaves the next put to call
    it again, and to wake the consumer it may have made; later puts start nothing.
    Thread-free: the consumer's wake-up is the ``_wake`` lock being released."""
    box: Inbox[int] = Inbox(maxsize=4)
    calls: list[int] = []

    def start() -> None:
        calls.append(len(box.queue))
        if len(calls) == 1:
            raise KeyboardInterrupt

    box.start_on_put(start)
    with pytest.raises(KeyboardInterrupt):
        box.put_nowait(1)
    assert calls == [1] and list(box.queue) == [1]  # the item stays for the consumer
    assert box._wake.acquire(blocking=False)  # a consumer made by then is not left asleep
    box._sleeping = True  # ...which it may have gone back to since, on an empty inbox
    box.put_all([2, 3])
    assert calls == [1, 3]  # tried again
    assert box._wake.acquire(blocking=False)  # and woken
    box._sleeping = True  # asleep again: this put wakes it and starts nothing
    box.put_nowait(4)
    assert calls == [1, 3]
    assert box._wake.acquire(blocking=False)
    assert [box.get_nowait() for _ in range(4)] == [1, 2, 3, 4]
