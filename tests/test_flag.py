"""Flag behaves as a ``threading.Event``, though it makes its Condition only for a wait."""

from __future__ import annotations

import threading

from dagexec._engine.run.flag import Flag


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


def test_a_set_then_clear_between_a_waits_two_checks_still_wakes_it() -> None:
    # threading.Event returns True for a set made after the wait began, even if
    # cleared at once. Here the waiter is held between its first check (under the
    # flag's own lock) and its second (under the Condition's): the set finds no
    # sleeper to notify, the clear undoes the field, and the wait must still see it.
    flag = Flag()
    flag.wait(0)  # makes the Condition
    at_gap, go_on = threading.Event(), threading.Event()

    class HeldAtTheGap(threading.Condition):
        def __enter__(self) -> bool:
            if threading.current_thread().name == "waiter" and not at_gap.is_set():
                at_gap.set()
                go_on.wait(60)
            return super().__enter__()

    flag._waiting = HeldAtTheGap(threading.RLock())
    results: list[bool] = []
    t = threading.Thread(target=lambda: results.append(flag.wait(30)), name="waiter")
    t.start()
    assert at_gap.wait(60)
    flag.set()
    flag.clear()
    go_on.set()
    t.join(60)
    assert results == [True]


def test_a_forked_childs_reinit_gives_a_working_flag() -> None:
    # What threading does to an Event in a forked child: a fresh lock, no waiters.
    flag = Flag()
    flag.wait(0)
    flag._at_fork_reinit()
    assert flag._waiting is None and not flag.is_set()
    flag.set()
    assert flag.wait(0) is True
