"""Driving one run of a dagexec graph on a ``distributed`` client: :class:`ClusterRun`.

What is sent was decided and checked by :mod:`.dask_translate` (keys, annotations,
refusals) and is wrapped for the workers by :mod:`.dask_worker`. Here: the
first dask graph goes out at once; then the client drives what one dask graph
cannot say, in dependency order: a ``g.map`` (it reads the ``over`` value, or a
chained map's items, submits one task per item and one that gathers them) and
a cleanup task (``run_if="all_done"``, submitted once all its dependencies
ended, with each one's value, exception or ``MISSING``). Then it collects
statuses and errors as a local run reports them (``on_error="continue"``:
FAILED, SKIPPED downstream, DONE), and with a checkpoint saves the values it
holds (:mod:`.dask_checkpoint`).

Threads: :class:`ClusterRun` drives the client-side part on the thread that
asks for its result, or on a thread of its own when started with
``submit_on``; the distributed client is thread-safe for these calls.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping
from concurrent.futures import CancelledError
from time import perf_counter
from typing import Any

from .._core.policy import MISSING
from .._core.result import RunResult, RunStats, TaskState
from .._core.safe import add_note, task_for_message
from .dask_checkpoint import ClusterCheckpoint
from .dask_translate import ClusterGraph, dask_annotations
from .dask_worker import Named, failed_task, gather_items

__all__ = ["ClusterRun"]


class ClusterRun:
    """One run of a dagexec graph on a distributed client.

    ``result()`` waits for it and returns a :class:`dagexec.RunResult`;
    ``futures`` are the distributed futures of its targets known so far (what
    ``distributed.progress(run)`` follows); ``cancel()`` releases everything.
    """

    def __init__(
        self,
        client: Any,
        cg: ClusterGraph,
        on_error: str,
        client_kwargs: Any,
        checkpoint: ClusterCheckpoint | None = None,
    ) -> None:
        self.client = client
        self.cg = cg
        self.checkpoint = checkpoint
        self.on_error = on_error
        self.client_kwargs = dict(client_kwargs or {})
        self.started = perf_counter()
        self.futures_by_task: dict[int, Any] = {}  # plan task -> its future
        self.items: dict[int, list[Any]] = {}  # expanded map -> its items' futures
        self.item_names: dict[int, list[Hashable]] = {}
        self.lock = threading.Lock()
        self.spare: set[int] = set()  # watched for their status only (see _collect)
        self._outcome: RunResult | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._cancelled = False  # cancel() was called before the run ended
        self._thread: threading.Thread | None = None
        self._send_first_graph()

    # ------------------------------------------------------------------ public
    @property
    def futures(self) -> list[Any]:
        with self.lock:
            return [
                self.futures_by_task[t] for t in self.cg.plan.targets if t in self.futures_by_task
            ]

    def __dask_graph__(self) -> dict[Any, Any]:
        """The futures so far, by key: what ``distributed.progress`` reads."""
        return {f.key: f for f in self.futures}

    def __dask_keys__(self) -> list[Any]:
        return [f.key for f in self.futures]

    def __dask_postcompute__(self) -> Any:  # pragma: no cover - not a real collection
        raise TypeError("a ClusterRun is not a dask collection; call run.result()")

    def __dask_tokenize__(self) -> str:
        return self.cg.token

    def start(self) -> ClusterRun:
        """Drive the client-side part on a thread of its own (``submit_on``)."""
        self._thread = threading.Thread(
            target=self._finish, name="dagexec-cluster-run", daemon=True
        )
        self._thread.start()
        return self

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> RunResult:
        if self._thread is None and not self._done.is_set():
            self._finish()
        elif not self._done.wait(timeout):
            raise TimeoutError(f"the run on the cluster did not end within {timeout} s")
        if self._cancelled:
            # As a local run's future: not distributed's FuturesCancelledError (a
            # subclass), whatever the cancel interrupted (a map reading its input).
            raise CancelledError("the run was cancelled") from self._error
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return self._outcome

    def cancelled(self) -> bool:
        """Whether :meth:`cancel` stopped the run (it had not ended by then)."""
        return self._cancelled

    def cancel(self) -> None:
        """Stop what has not run and let go of every value of the run on the cluster;
        ``result()`` then raises ``concurrent.futures.CancelledError``, as a local
        run's does. A run that had ended already keeps its result.

        The rest is :meth:`_release`.
        """
        if not self._done.is_set():
            self._cancelled = True
        self._release()

    def _release(self) -> None:
        """Let go of every value of the run on the cluster, which stops what has not run.

        By releasing the run's futures, not by ``Client.cancel``: once no client
        wants a key, the scheduler forgets it and every task of the run that only
        it needed, run or not (a task already running on a worker finishes there,
        its value dropped), and a future no one else holds ends cancelled here,
        which wakes whatever waits for it. ``Client.cancel`` also cancels each
        key's dependents, and distributed's scheduler (``stimulus_cancel``, 2026.8)
        fails an assertion on a dependent that no client wants, such as ``b`` of
        ``a -> b -> c`` run for the targets ``a`` and ``c``; it then drops the
        client's connection, and the client cancels every future it holds,
        another run's on the same client included.
        """
        with self.lock:
            futures = list(self.futures_by_task.values())
            for items in self.items.values():
                futures.extend(items)
        for fut in futures:
            fut.release()  # a future held twice (a map over a failed input) is released once

    # ------------------------------------------------------------------ driving
    def _send_first_graph(self) -> None:
        cg = self.cg
        dsk, tasks = cg.first_graph(layered=True)
        if not tasks:
            return
        wanted = self._watched(tasks)
        keys = [cg.keys[t] for t in wanted]
        futures = self.client.get(dsk, keys, sync=False, **self.client_kwargs)
        for t, fut in zip(wanted, futures, strict=True):
            self.futures_by_task[t] = fut

    def _watched(self, tasks: list[int]) -> list[int]:
        """The tasks of the first graph whose future the client needs: targets, inputs
        of the tasks it drives, and (on_error="continue") all, for their status;
        those wanted for their status alone go into ``spare``."""
        plan, staged = self.cg.plan, self.cg.staged
        wanted = set(plan.targets)
        for t in staged:
            wanted.update(plan.deps[t])
        if self.on_error == "continue":
            self.spare = {t for t in tasks if t not in wanted}
            return tasks
        return [t for t in tasks if t in wanted]

    def _finish(self) -> None:
        try:
            self._drive()
            self._outcome = self._collect()
        except BaseException as exc:
            self._error = exc
        finally:
            try:
                if self.checkpoint is not None:
                    self.checkpoint.close()
            finally:
                self._done.set()

    def _drive(self) -> None:
        """Submit the tasks the client drives, in dependency order."""
        cg, plan, client = self.cg, self.cg.plan, self.client
        for t in cg.order:
            if t not in cg.staged:
                continue
            extra = {"key": cg.keys[t], "pure": False, **dask_annotations(cg.options(t))}
            deps = [self.futures_by_task[d] for d in plan.deps[t]]
            fn = cg.function(t)
            if plan.maps is not None and t in plan.maps:
                self._expand(t, fn, deps, extra)
                continue
            policy = plan.policy[t] if plan.policy is not None else None
            if policy is not None and policy.cleanup:
                args = self._ended(plan.deps[t])
                fut = client.submit(fn, *args, **extra)
            else:
                fut = client.submit(fn, *deps, **extra)
            with self.lock:
                self.futures_by_task[t] = fut

    def _expand(self, t: int, fn: Named, deps: list[Any], extra: dict[str, Any]) -> None:
        """Submit one task per item of map ``t``, then one gathering their values."""
        plan, client = self.cg.plan, self.client
        over, rest = plan.deps[t][0], deps[1:]
        name, key = plan.names[t], extra.pop("key")
        if over in self.items:  # a chained map: item i follows item i of the one before
            sources = self.items[over]
            inputs = list(sources)
        else:
            over_future = self.futures_by_task[over]
            try:
                inputs = list(over_future.result())
            except Exception:
                inputs = []
                gathered = over_future  # fails as over failed: the map is downstream of it
                with self.lock:
                    self.futures_by_task[t] = gathered
                self.items[t], self.item_names[t] = [], []
                return
        futures: list[Any] = []
        names: list[Hashable] = []
        base = key if isinstance(key, str) else str(key)
        for i, item in enumerate(inputs):
            item_name = (name, i)
            names.append(item_name)
            futures.append(
                client.submit(
                    self.cg.function(t, item_name), item, *rest, key=(f"{base}-item", i), **extra
                )
            )
        self.items[t], self.item_names[t] = futures, names
        gathered = client.submit(gather_items, *futures, key=key, pure=False)
        with self.lock:
            self.futures_by_task[t] = gathered

    def _ended(self, deps: tuple[int, ...]) -> list[Any]:
        """A cleanup task's arguments once all ``deps`` ended: the value (its future),
        the exception of a dependency that failed itself, or MISSING."""
        from distributed import wait

        plan = self.cg.plan
        futures = [self.futures_by_task[d] for d in deps]
        wait(futures)  # type: ignore[no-untyped-call]
        args: list[Any] = []
        for d, fut in zip(deps, futures, strict=True):
            if fut.status == "finished":
                args.append(fut)
                continue
            exc = fut.exception() if fut.status == "error" else None
            if exc is not None and failed_task(exc) == plan.names[d]:
                args.append(exc)  # it failed itself
            else:
                args.append(MISSING)  # skipped (downstream of a failure) or cancelled
        return args

    # ------------------------------------------------------------------ results
    def _collect(self) -> RunResult:
        plan = self.cg.plan
        errors, failed_here = self._await_all()
        status = self._statuses(failed_here)
        raising = bool(errors) and self.on_error == "raise"
        savable = self._savable(status)
        values = self._values(savable if raising else [*plan.targets, *savable])
        if self.checkpoint is not None:
            self.checkpoint.save(values, savable)
        if raising:
            self._release()  # stop what still runs, as a local run stops at a failure
            raise _first(errors)
        threads = sum(self.client.nthreads().values())
        self._release()  # all ended: this only lets go of the run's values on the cluster
        stats = self._stats(status, threads)
        result = {plan.names[t]: values[t] for t in plan.targets if t in values}
        return RunResult(result, status, errors, stats, targets=plan.target_names)

    def _await_all(self) -> tuple[dict[Hashable, BaseException], set[Hashable]]:
        """Wait for every future of the run, noting which tasks failed themselves and
        their first exception; the spare ones are let go as each ends, the rest
        waited for together, so a partial failure is known whole before collecting."""
        from distributed import as_completed, wait

        kept = set(self.cg.plan.targets)
        with self.lock:
            watched = dict(self.futures_by_task)
            for t, futures in self.items.items():
                for name, fut in zip(self.item_names[t], futures, strict=True):
                    watched[("item", name)] = fut  # type: ignore[index]
            # Watched only for their status (on_error="continue"): each is let go
            # as soon as it is known, so the cluster drops the value once its
            # dependents have it, as a local run drops values.
            spare = [f for t, f in watched.items() if t not in kept and t in self.spare]
            for t in self.spare:
                self.futures_by_task.pop(t, None)
        errors: dict[Hashable, BaseException] = {}
        failed_here: set[Hashable] = set()
        for fut in as_completed(spare) if spare else ():  # type: ignore[no-untyped-call]
            _note_failure(fut, failed_here, errors)
            fut.release()
        rest = [f for t, f in watched.items() if t in kept or t not in self.spare]
        wait(rest)  # type: ignore[no-untyped-call]
        for fut in rest:
            _note_failure(fut, failed_here, errors)
        return errors, failed_here

    def _stats(self, status: Mapping[Hashable, TaskState], threads: int) -> RunStats:
        """The run's figures as a local run reports them; the queue and in-flight
        figures are 0 because the cluster, not dagexec, holds those."""
        loaded = len(self.checkpoint.loaded) if self.checkpoint is not None else 0
        ran = sum(s is TaskState.DONE or s is TaskState.FAILED for s in status.values())
        return RunStats(
            tasks_planned=len(status),
            tasks_run=ran - loaded,
            tasks_loaded=loaded,
            wall_seconds=perf_counter() - self.started,
            workers=threads,
            queue_cap=0,
            max_in_flight=0,
            effective_cap=0,
            peak_in_flight=0,
            peak_queue_depth=(),
            tasks_per_worker=(),
        )

    def _values(self, tasks: list[int]) -> dict[int, Any]:
        """The values of those of ``tasks`` that finished, gathered in one call."""
        with self.lock:
            held = [(t, self.futures_by_task.get(t)) for t in dict.fromkeys(tasks)]
        done = [(t, fut) for t, fut in held if fut is not None and fut.status == "finished"]
        gathered = self.client.gather([fut for _, fut in done]) if done else []
        return dict(zip([t for t, _ in done], gathered, strict=True))

    def _savable(self, status: Mapping[Hashable, TaskState]) -> list[int]:
        """The tasks whose values the checkpoint saves: those the client holds a future
        of that ended DONE and have an identity, a cleanup task only if every one of
        its dependencies ended DONE too (it was not given an exception or MISSING)."""
        checkpoint = self.checkpoint
        if checkpoint is None:
            return []
        plan, policy = self.cg.plan, self.cg.policy
        done = TaskState.DONE
        out: list[int] = []
        for t in list(self.futures_by_task):
            if checkpoint.identity[t] is None or status.get(plan.names[t]) is not done:
                continue
            p = policy(t)
            given_all = all(status.get(plan.names[d]) is done for d in plan.deps[t])
            if p is not None and p.cleanup and not given_all:
                continue
            out.append(t)
        return out

    def _statuses(self, failed_here: set[Hashable]) -> dict[Hashable, TaskState]:
        """Every task's end, as a local run reports it: FAILED if it raised, SKIPPED if
        downstream of one that did, else DONE. A map item is downstream of its map's
        other dependencies and of its own input only: the map's ``over`` task, or,
        for a chained map, the item of the same index of the map before (its other
        items are not its inputs, so their failures leave it DONE)."""
        plan = self.cg.plan
        status: dict[Hashable, TaskState] = {}
        broken = [False] * len(plan.names)
        items_broken: dict[int, list[bool]] = {}
        policy = plan.policy
        for t in self.cg.order:
            name = plan.names[t]
            cleanup = policy is not None and policy[t] is not None and policy[t].cleanup  # type: ignore[union-attr]
            upstream = any(broken[d] for d in plan.deps[t])
            if t in self.items:
                flags = self._item_statuses(t, broken, items_broken, failed_here, status)
                items_broken[t] = flags
                upstream = upstream or any(flags)
            if name in failed_here:
                status[name] = TaskState.FAILED
                broken[t] = True
            elif upstream and not cleanup:
                status[name] = TaskState.SKIPPED
                broken[t] = True
            else:
                status[name] = TaskState.DONE
        return status

    def _item_statuses(
        self,
        t: int,
        broken: list[bool],
        items_broken: dict[int, list[bool]],
        failed_here: set[Hashable],
        status: dict[Hashable, TaskState],
    ) -> list[bool]:
        """The end of each item of map ``t`` into ``status``, and which items are
        broken: an item depends on its own input only (the same index of a chained
        map before), so one item's failure does not skip its siblings."""
        deps = self.cg.plan.deps[t]
        over = deps[0]
        rest_broken = any(broken[d] for d in deps[1:])
        inputs = items_broken.get(over)
        flags: list[bool] = []
        for i, item in enumerate(self.item_names[t]):
            before = rest_broken or (inputs[i] if inputs is not None else broken[over])
            if item in failed_here:
                status[item] = TaskState.FAILED
            else:
                status[item] = TaskState.SKIPPED if before else TaskState.DONE
            flags.append(before or item in failed_here)
        return flags


def _note_failure(
    fut: Any, failed_here: set[Hashable], errors: dict[Hashable, BaseException]
) -> None:
    """Note ``fut``'s task as failed with its exception if it raised itself; a future
    that errs because a dependency failed names that dependency, not itself."""
    if fut.status == "error":
        exc = fut.exception()
        owner = failed_task(exc)
        if owner is not None:
            failed_here.add(owner)
            errors.setdefault(owner, exc)


def _first(errors: Mapping[Hashable, BaseException]) -> BaseException:
    exc = next(iter(errors.values()))
    if len(errors) > 1:
        others = ", ".join(task_for_message(n) for n in list(errors)[1:])
        add_note(exc, f"dagexec: {len(errors) - 1} more task(s) failed too: {others}")
    return exc
