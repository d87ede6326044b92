"""What a checkpointed run calls instead of each task's own function, on the workers.

Three kinds of task, decided once per run by :func:`dagexec._persist.resume.open_checkpoint`:

* **static**: nothing upstream is known only during the run, so its identity
  was computed before the run and the plan already loaded it or runs it. Its
  wrapper (:func:`static_saver`) saves the value it returns.
* **decided during the run**: downstream of a ``checkpoint=False`` task or of a
  ``g.map``, so its identity needs a value that exists only once that task has
  run. Its wrapper (:func:`dynamic_saver`) finishes the identity from its
  dependencies' identities (recorded by their own wrappers in the run's
  :class:`RunIdentities`), then loads the stored value or runs and saves.
* **map items**: the map's function is wrapped (:func:`item_saver`): each item
  is found by the map's own identity (its function, constants and extra deps,
  *not* the list it maps over) and the canonical encoding of its element, so a
  new element runs alone and the others load. An element with no encoding falls
  back to its index, with a WARNING.

A ``checkpoint=False`` task is never stored; its wrapper
(:func:`value_recorder`) records the digest of its value for the tasks
downstream of it.

Everything here runs on worker threads: encoding elements and values, reading
the store and unpickling stay off the scheduler. The one shared object,
:class:`RunIdentities`, is guarded by its lock; a dependent reads an entry only
after the scheduler saw its dependency end, which came after the entry was
written.

Never saved (:func:`may_save`): a value returned after the attempt's cancel
token or the run's stop was set, or after the attempt's own timeout (a process
task's value returns at all only within its attempt's deadline; an attempt
that noticed and returned early returns a partial value); a cleanup task's
(``run_if="all_done"``) value when a dependency failed, was skipped or cancelled
(it received an exception or ``MISSING`` instead of a value).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from time import monotonic
from typing import Any

from .._core.current import running_here
from .._core.loads import LoadedDuringRun
from .._core.policy import MISSING, Policy, current_task
from .checkpoint import CheckpointStore
from .checkpoint_values import describe_safely, pickle_value
from .checkpoint_writer import StoreClosedError
from .encoding import _digest
from .identity import code_of, combine, constants_of, key_of, value_digest

__all__ = [
    "MAP",
    "STATIC",
    "TABLE",
    "RunIdentities",
    "dynamic_saver",
    "item_identity",
    "item_saver",
    "map_identity",
    "map_mark",
    "may_save",
    "static_saver",
    "value_recorder",
]

log = logging.getLogger("dagexec")

# How a dependency's identity is found during the run.
STATIC = 0  # computed before the run
TABLE = 1  # recorded in RunIdentities by its wrapper (decided during the run, checkpoint=False)
MAP = 2  # a map: from its own identity and its items' identities


class RunIdentities:
    """The identities known only during one run, by task name; any thread.

    Also how a dependency's identity is found (``kind``/``static``, by plan
    index), so every wrapper resolves its dependencies the same way.
    """

    def __init__(
        self,
        names: Sequence[Hashable],
        kind: Sequence[int],
        static: Sequence[bytes | None],
        prefix: Sequence[bytes | None],
        deps: Sequence[Sequence[int]],
    ) -> None:
        self.names, self.kind, self.static, self.prefix, self.deps = (
            names,
            kind,
            static,
            prefix,
            deps,
        )
        self._lock = threading.Lock()  # guards _known
        self._known: dict[Hashable, bytes | None] = {}
        # What the wrappers loaded instead of running: counted as loaded, not run.
        self.loaded = LoadedDuringRun()

    def record(self, name: Hashable, identity: bytes | None) -> None:
        with self._lock:
            self._known[name] = identity

    def get(self, name: Hashable) -> bytes | None:
        with self._lock:
            return self._known.get(name)

    def of(self, j: int, value: Any) -> bytes | None:
        """The identity of dependency ``j`` whose value is ``value``; None: unknown."""
        kind = self.kind[j]
        if kind == STATIC:
            return self.static[j]
        if kind == TABLE:
            return self.get(self.names[j])
        try:
            count = len(value)  # a map's value is the list of its items' values
        except TypeError:
            return None
        name = self.names[j]
        own = self.get(name)
        if own is None:  # no item ran (an empty list): from its extra deps, unless maps
            own = self.combined(j, (None,) * len(self.deps[j]), skip=1)
            if own is None:
                return None
        items = []
        with self._lock:
            for i in range(count):
                item = self._known.get((name, i))
                if item is None:
                    return None
                items.append(item)
        return map_identity(own, items)

    def parts(self, task: int) -> bytes:
        """What static ``task``'s identity is made of, for the store's table of names
        (see :mod:`dagexec._persist.explain`): its name key, code and constants digests, then
        (name key, identity) per dependency. Built on the worker that saves it."""
        prefix = self.prefix[task]
        if prefix is None:
            return b""
        out = [key_of(prefix), code_of(prefix), constants_of(prefix)]
        for d in self.deps[task]:
            dep_prefix, dep_id = self.prefix[d], self.static[d]
            if dep_prefix is None or dep_id is None:
                return b""
            out += (key_of(dep_prefix), dep_id)
        return b"".join(out)

    def run_parts(self, task: int, dep_ids: Sequence[bytes], skip: int = 0) -> bytes:
        """:meth:`parts` of a task decided during the run (or a map: ``skip=1``, its
        extra deps only), from its dependencies' identities found during it."""
        prefix = self.prefix[task]
        if prefix is None:
            return b""
        out = [key_of(prefix), code_of(prefix), constants_of(prefix)]
        for d, identity in zip(self.deps[task][skip:], dep_ids, strict=True):
            dep_prefix = self.prefix[d]
            if dep_prefix is None:
                return b""
            out += (key_of(dep_prefix), identity)
        return b"".join(out)

    def dep_ids(self, task: int, args: Sequence[Any], skip: int = 0) -> list[bytes] | None:
        """The identities of ``task``'s dependencies after the first ``skip``, given
        their values ``args``; None if one is not known."""
        ids = []
        for j, value in zip(self.deps[task][skip:], args[skip:], strict=False):
            identity = self.of(j, value)
            if identity is None:
                return None
            ids.append(identity)
        return ids

    def combined(self, task: int, args: Sequence[Any], skip: int = 0) -> bytes | None:
        """``task``'s identity from its dependencies' (args after the first ``skip``)."""
        prefix = self.prefix[task]
        if prefix is None:
            return None
        ids = self.dep_ids(task, args, skip)
        return None if ids is None else combine(prefix, ids)


def map_identity(own: bytes, items: Sequence[bytes]) -> bytes:
    """A map's identity as its dependents see it: its own and its items' identities."""
    return _digest(b"".join((b"M", own, *items)))


def map_mark(own: bytes) -> bytes:
    """Under which a map's mark is stored: items were saved under its own identity
    ``own`` (what :mod:`dagexec._persist.explain` asks when the list is not known)."""
    return _digest(b"m" + own)


def item_identity(own: bytes, element: Any, index: int) -> tuple[bytes, bool]:
    """A map item's identity: the map's own identity and the item's element (its
    index if the element has no encoding: then also False)."""
    digest = value_digest(element)
    if digest is None:
        return _digest(b"i%d:" % index + own), False
    return _digest(b"e" + own + digest), True


def may_save(name: Hashable, started: float, policy: Policy | None, args: Sequence[Any]) -> bool:
    """Whether the value an attempt just returned may be stored (see the module doc).

    A refusal is logged at DEBUG, naming the task and why.
    """
    why = _why_not_saved(started, policy, args)
    if why is None:
        return True
    log.debug("checkpoint: the value of task %s is not saved: %s", describe_safely(name), why)
    return False


def _why_not_saved(started: float, policy: Policy | None, args: Sequence[Any]) -> str | None:
    limit = policy.timeout if policy is not None else None
    # A process task's value comes back only if its attempt's one deadline (counted
    # by its worker, dagexec._engine.process.process_pool) had not passed: a second
    # clock here would refuse values the task was allowed to return.
    if (
        limit is not None
        and policy is not None
        and policy.isolate is None
        and (monotonic() - started >= limit)
    ):
        # Whether or not the driver heard of it yet (a slow report, a busy CPU).
        return "it returned after its timeout"
    try:
        attempt = current_task()
    except RuntimeError:  # called outside a worker (a test): nothing can have stopped it
        return None
    if attempt.cancelled.is_set():
        return "it returned after its cancel token was set"
    if policy is not None and policy.cleanup:
        # A cleanup task runs during a stop on purpose; what it was given decides.
        if any(arg is MISSING or isinstance(arg, BaseException) for arg in args):
            return "a dependency of this cleanup task failed, was skipped or cancelled"
        return None
    here = running_here()
    if here is not None and here[1].is_set():
        return "it returned after the run's stop was set"
    return None


def _save(
    store: CheckpointStore, identity: bytes, value: Any, name: Hashable, parts: bytes
) -> None:
    data = pickle_value(value, name)  # CheckpointError naming the task: it fails
    # The store may have closed under a task still running after a cancel, or its
    # writer died (already logged): this value is then just not saved.
    with contextlib.suppress(StoreClosedError):
        store.save_pickled_nowait(identity, data, name=name, parts=parts)


def static_saver(
    fn: Callable[..., Any],
    store: CheckpointStore,
    identity: bytes,
    name: Hashable,
    table: RunIdentities,
    task: int,
    policy: Policy | None,
) -> Callable[..., Any]:
    """``fn``, saving what it returns under ``identity`` unless :func:`may_save` says no."""

    def checkpointed(*args: Any) -> Any:
        started = monotonic()
        value = fn(*args)
        if may_save(name, started, policy, args):
            _save(store, identity, value, name, table.parts(task))
        return value

    checkpointed.__wrapped__ = fn  # type: ignore[attr-defined]  # pictures group by fn
    return checkpointed


def _load_or_run(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    identity: bytes | None,
    name: Hashable,
    store: CheckpointStore,
    table: RunIdentities,
    policy: Policy | None,
    parts: bytes = b"",
) -> tuple[Any, bool]:
    """What a task decided during the run does on its worker: load its value if the
    store has ``identity`` (counted as loaded), else run ``fn`` and save what it
    returns (with ``parts``) unless :func:`may_save` says no. No identity: run,
    save nothing. Returns (the value, whether it was saved)."""
    if identity is not None:
        found = store.load_many((identity,))
        if identity in found:
            table.loaded.add(name)
            return found[identity], False
    started = monotonic()
    value = fn(*args)
    if identity is not None and may_save(name, started, policy, args):
        _save(store, identity, value, name, parts)
        return value, True
    return value, False


def dynamic_saver(
    fn: Callable[..., Any],
    store: CheckpointStore,
    table: RunIdentities,
    task: int,
    policy: Policy | None,
) -> Callable[..., Any]:
    """``fn`` for a task decided during the run: load if stored, else run and save."""
    name = table.names[task]

    prefix = table.prefix[task]

    def checkpointed(*args: Any) -> Any:
        ids = table.dep_ids(task, args) if prefix is not None else None
        if ids is None:
            table.record(name, None)
            return _load_or_run(fn, args, None, name, store, table, policy)[0]
        identity = combine(prefix, ids)  # type: ignore[arg-type]
        table.record(name, identity)
        parts = table.run_parts(task, ids)  # what explain compares next time
        return _load_or_run(fn, args, identity, name, store, table, policy, parts)[0]

    checkpointed.__wrapped__ = fn  # type: ignore[attr-defined]  # pictures group by fn
    return checkpointed


def value_recorder(fn: Callable[..., Any], table: RunIdentities, task: int) -> Callable[..., Any]:
    """``fn`` of a ``checkpoint=False`` task: records its value's digest for its dependents."""
    name = table.names[task]

    def recorded(*args: Any) -> Any:
        value = fn(*args)
        digest = value_digest(value)
        if digest is None:
            log.warning(
                "checkpoint: the value of task %s (checkpoint=False), a %s, has no stable "
                "encoding, so the tasks downstream of it run and are not stored; return "
                "plain data (str, numbers, lists, dicts) from it",
                describe_safely(name),
                type(value).__name__,
            )
        table.record(name, digest)
        return value

    recorded.__wrapped__ = fn  # type: ignore[attr-defined]  # pictures group by fn
    return recorded


def item_saver(
    fn: Callable[..., Any],
    store: CheckpointStore,
    table: RunIdentities,
    task: int,
    policy: Policy | None,
    checkpointed: bool,
) -> Callable[..., Any]:
    """The function each item of map ``task`` runs: found by its element, not its index."""
    name = table.names[task]
    warned = threading.Event()  # one WARNING per map and run, not one per item

    prefix = table.prefix[task]
    marked = threading.Event()  # this run saved the map's mark (see map_mark)

    def item(*args: Any) -> Any:
        me = current_task().name
        ids = table.dep_ids(task, args, skip=1) if prefix is not None else None
        own = None if ids is None else combine(prefix, ids)  # type: ignore[arg-type]
        table.record(name, own)  # extra deps only: not the list
        if not checkpointed:
            value = fn(*args)
            table.record(me, value_digest(value))
            return value
        identity = None
        if own is not None:
            index = me[1] if isinstance(me, tuple) else 0
            identity, by_element = item_identity(own, args[0], index)
            if not by_element and not warned.is_set():
                warned.set()
                log.warning(
                    "checkpoint: map %s: item %d's element, a %s, has no stable "
                    "encoding, so its items are stored by index: if the list changes "
                    "order, items may load another element's value; map over plain "
                    "data (paths as str, numbers, tuples)",
                    describe_safely(name),
                    index,
                    type(args[0]).__name__,
                )
        table.record(me, identity)
        value, saved = _load_or_run(fn, args, identity, me, store, table, policy)
        if saved and own is not None and not marked.is_set():
            # Once per run, with its first saved item: what the map's identity was
            # made of (for explain's reason), and a mark that items exist under it.
            marked.set()
            parts = table.run_parts(task, ids, skip=1)  # type: ignore[arg-type]
            _save(store, map_mark(own), None, name, parts)
        return value

    item.__wrapped__ = fn  # type: ignore[attr-defined]  # pictures group by fn
    return item
