"""Hooks, the scheduler's view of a run's callbacks: thread-free."""

from __future__ import annotations

from dagexec._core.hooks import _HOOK_NAMES, Hooks


def test_hooks_per_task_is_set_by_each_per_task_hook_and_only_by_them() -> None:
    """The scheduler asks Hooks.per_task whether to report each task's events;
    it used to list the hooks itself. Every slot of Hooks but run_start and
    run_end is a per-task hook: a new one missing from per_task fails here."""
    per_run = {"run_start", "run_end"}
    summaries = {"any", "per_task", "starts"}  # fields that sum up the hooks, not hooks
    hook_slots = [slot for slot in Hooks.__slots__ if slot not in summaries]
    assert {"on_" + slot for slot in hook_slots} == set(_HOOK_NAMES)
    for slot in hook_slots:
        callback = type("One", (), {"on_" + slot: lambda self, *args: None})()
        hooks = Hooks([callback])
        assert hooks, slot
        assert hooks.per_task is (slot not in per_run), slot
    assert not Hooks([]).per_task
    assert not Hooks([])
