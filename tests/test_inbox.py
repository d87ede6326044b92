"""The worker inbox is still a bounded queue.Queue: the fast paths keep its contract."""

from __future__ import annotations

import queue
import threading

import pytest

from dagexec._inbox import Inbox


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


def test_get_wakes_when_an_item_arrives_and_a_blocked_put_wakes_on_get() -> None:
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

    box.put_nowait("b")  # full now; a blocking put must be woken by get_nowait
    putter = threading.Thread(target=box.put, args=("c",))
    putter.start()
    assert box.get_nowait() == "b"
    putter.join(5)
    assert not putter.is_alive()
    assert box.get() == "c"
