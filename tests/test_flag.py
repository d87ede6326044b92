"""Flag behaves as a ``threading.Event``, though it makes its Condition only for a wait."""

from __future__ import annotations

import threading

from dagexec._engine.flag import Flag


def test_set_clear_and_is_set_agree_with_the_field_the_workers_read() -> None:
    flag = Flag()
    assert isinstance(flag, threading.Event)
    assert not flag.is_set() and not flag._flag
    flag.set()
    assert flag.is_set() and flag._flag
    flag.set()  # again: still set, nobody to wake
    flag.clear()
    assert not flag.is_set() and not flag._flag
    assert flag._waiting is None  # no wait yet: no Condition was made


def test_a_wait_returns_at_once_when_set_and_times_out_when_not() -> None:
    flag = Flag()
    assert flag.wait(0) is False
    assert flag.wait(0.01) is False
    flag.set()
    assert flag.wait() is True
    assert flag.wait(0) is True
    flag.clear()
    assert flag.wait(0) is False


def test_every_waiting_thread_wakes_on_set() -> None:
    flag = Flag()
    inside = threading.Semaphore(0)
    results: list[bool] = []
    lock = threading.Lock()

    def waiter() -> None:
        inside.release()
        woke = flag.wait(60)
        with lock:
            results.append(woke)

    threads = [threading.Thread(target=waiter) for _ in range(8)]
    for t in threads:
        t.start()
    for _ in threads:
        assert inside.acquire(timeout=60)
    flag.set()
    for t in threads:
        t.join(60)
    assert results == [True] * 8


def test_a_set_racing_a_first_wait_is_never_lost() -> None:
    # The waiter makes the Condition while the setter may be between setting the
    # field and looking for one: either the waiter sees the field or it is woken.
    def waiter(flag: Flag, go: threading.Barrier, out: list[bool]) -> None:
        go.wait()
        out.append(flag.wait(60))

    for _ in range(300):
        flag = Flag()
        go = threading.Barrier(2)
        results: list[bool] = []
        t = threading.Thread(target=waiter, args=(flag, go, results))
        t.start()
        go.wait()
        flag.set()
        t.join(60)
        assert results == [True]
