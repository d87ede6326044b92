"""Balance.share: the batch split must equal handing tasks out one at a time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dagexec._engine.run.balance import Balance
from dagexec._engine.workers.inbox import Inbox


def one_at_a_time(
    held: list[int], depth: list[int], cap: int, avoid: set[int], n: int
) -> list[int]:
    """The reference: each task to the worker holding the fewest (lowest index on a
    tie) with room in its inbox; to a stalled one only when no other has room."""
    held, depth = list(held), list(depth)
    counts = [0] * len(held)
    for _ in range(n):
        for group in ([w for w in range(len(held)) if w not in avoid], sorted(avoid)):
            fits = [w for w in group if depth[w] < cap]
            if fits:
                w = min(fits, key=lambda w: (held[w], w))
                break
        else:
            break
        counts[w] += 1
        held[w] += 1
        depth[w] += 1
    return counts


def loaded(workers: int, cap: int, depth: list[int], running: list[int]) -> Balance:
    """A Balance over inboxes holding ``depth`` items each, its workers each also
    running ``running`` (0 or 1) tasks."""
    inboxes: list[Inbox[int]] = [Inbox(cap) for _ in range(workers)]
    for inbox, d in zip(inboxes, depth, strict=True):
        for _ in range(d):
            inbox.put_nowait(0)
    balance = Balance(inboxes, cap)
    balance.held[:] = [d + r for d, r in zip(depth, running, strict=True)]
    return balance


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_share_equals_one_task_at_a_time(data: st.DataObject) -> None:
    workers = data.draw(st.integers(1, 6), label="workers")
    cap = data.draw(st.integers(1, 10), label="queue_cap")
    depth = data.draw(st.lists(st.integers(0, cap), min_size=workers, max_size=workers))
    running = data.draw(st.lists(st.integers(0, 1), min_size=workers, max_size=workers))
    avoid = data.draw(st.sets(st.integers(0, workers - 1)), label="stalled")
    n = data.draw(st.integers(0, 3 * workers * (cap + 1)), label="n")
    balance = loaded(workers, cap, depth, running)
    balance.avoid = frozenset(avoid)
    expected = one_at_a_time(balance.held, depth, cap, avoid, n)
    assert balance.share(n) == expected
    assert [len(q) for q in balance.queues] == depth  # it only counts; nothing moves


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_one_task_fast_path_equals_the_level_loop(data: st.DataObject) -> None:
    """share(1) with nothing stalled or lost takes its own path (in share itself): it
    must give what the general level loop gives, and what one-at-a-time gives."""
    workers = data.draw(st.integers(1, 6), label="workers")
    cap = data.draw(st.integers(1, 4), label="queue_cap")
    depth = data.draw(st.lists(st.integers(0, cap), min_size=workers, max_size=workers))
    running = data.draw(st.lists(st.integers(0, 1), min_size=workers, max_size=workers))
    balance = loaded(workers, cap, depth, running)
    fast = balance.share(1)
    assert fast == balance._share_levels(1)
    assert fast == one_at_a_time(balance.held, depth, cap, set(), 1)
    assert sum(fast) == (1 if min(depth) < cap else 0)


def test_one_task_skips_a_lost_worker() -> None:
    """A worker whose thread was lost (dead) gets nothing, one task or many."""
    inboxes: list[Inbox[int]] = [Inbox(4) for _ in range(3)]
    balance = Balance(inboxes, 4, dead=frozenset({0}))
    balance.held[:] = [0, 2, 1]
    assert balance.share(1) == [0, 0, 1]
    assert balance.share(3) == [0, 1, 2]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_even_split_fast_path_equals_the_level_loop(data: st.DataObject) -> None:
    """share(n > 1) to workers all alike (inboxes empty, each holding as many) takes
    its own path: it must give what the level loop and one-at-a-time give."""
    workers = data.draw(st.integers(1, 6), label="workers")
    cap = data.draw(st.integers(1, 10), label="queue_cap")
    running = data.draw(st.integers(0, 3), label="held")
    n = data.draw(st.integers(2, 3 * workers * (cap + 1)), label="n")
    balance = loaded(workers, cap, [0] * workers, [running] * workers)
    fast = balance.share(n)
    assert fast == balance._share_levels(n)
    assert fast == one_at_a_time(balance.held, [0] * workers, cap, set(), n)
