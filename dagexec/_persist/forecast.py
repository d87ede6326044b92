"""What a checkpointed run will do with each task, foreseen before it: explain's walk.

The run decides a static task before it starts (:func:`~dagexec._persist.resume.resume`)
and the rest on the workers (:mod:`dagexec._persist.savers`). Much of the second
kind is known before the run too, from what the file holds, and this walk works
it out the way the wrappers will, in dependency order:

* a **map**'s own identity (its function, constants and extra deps: not the
  list) is known once its extra deps' identities are; its items' identities
  are known once the list it maps over is (stored, and so loaded by the run);
  then so is the map's identity as its dependents see it, whether its items
  load or run (an item's identity is its element, not its value);
* a task **downstream of a map** (or of a task so decided) has a known identity
  once all its dependencies' are: it then loads if the file holds it, as its
  wrapper will find, else runs with a reason.

What stays "decided during the run" needs a value the run makes: the value of
a ``checkpoint=False`` task (or of a map's items when ``checkpoint=False``), or
the list a map maps over when that list is computed in the run. Then tasks
downstream load when those values come back equal, and the texts say so.

Values the run would load are loaded here too (unpickled, as the run would), so
a damaged row is foreseen as the run will meet it. Caller's thread only.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from .._core.errors import describe
from .._core.plan import topological_order
from .identity import code_of, combine, constants_of, key_of
from .reasons import (
    CODE_CHANGED,
    CONSTANT_CHANGED,
    DAMAGED,
    NOT_CHECKPOINTED,
    NOT_STORED,
    UPSTREAM_CHANGED,
    MapItems,
    Reason,
)
from .savers import MAP, STATIC, item_identity, map_identity, map_mark

__all__ = ["Forecast"]

_KEY = 16  # bytes of a name key, a digest, an identity
_CHUNK = 900  # keys per query: SQLite's old limit on parameters is 999


class Forecast:
    """One walk of a plan against a store (or None: no file yet); see the module doc.

    After :meth:`walk`: ``run`` (index -> Reason), ``load`` (indices),
    ``during`` (index -> why only the run can tell) and ``items`` (map index ->
    :class:`MapItems`).
    """

    def __init__(
        self,
        graph: Any,
        plan: Any,
        ids: Any,
        store: Any,
        to_run: set[int],
        loaded: Mapping[int, Any],
    ) -> None:
        self.graph, self.plan, self.ids, self.store = graph, plan, ids, store
        self.to_run = to_run
        self.known: list[bytes | None] = list(ids)  # identities known before the run
        self.values: dict[int, Any] = dict(loaded)  # values known before the run
        self.run: dict[int, Reason] = {}
        self.load: set[int] = set(loaded)
        self.during: dict[int, str] = {}
        self.items: dict[int, MapItems] = {}
        self.list_in_run: set[int] = set()  # maps whose own identity is known, not their list
        keys = [key_of(ids.prefix[i]) for i in to_run if ids.prefix[i] is not None]
        self.rows = _stored_parts(store, keys) if store is not None else {}

    def walk(self) -> Forecast:
        ids, to_run = self.ids, self.to_run
        for i in topological_order(self.plan):
            if i not in to_run:
                continue  # loaded before the run, or spared: its identity is static
            if ids.kind[i] == MAP:
                self._map(i)
            elif not ids.stored[i]:
                self.run[i] = Reason(
                    NOT_CHECKPOINTED, "not checkpointed (checkpoint=False): runs every time"
                )
            elif ids.kind[i] == STATIC:
                self.run[i] = self._reason(i, self.plan.deps[i]) or self._missing(i, ids[i])
            else:
                self._decided_in_run(i)
        return self

    # -- tasks ------------------------------------------------------------------------

    def _decided_in_run(self, i: int) -> None:
        """A task downstream of a map or of a ``checkpoint=False`` task."""
        dep_ids = [self.known[d] for d in self.plan.deps[i]]
        if any(d is None for d in dep_ids):
            self.during[i] = self._later(i)
            return
        identity = combine(self.ids.prefix[i], dep_ids)
        self.known[i] = identity
        found = self._loadable([identity])
        if identity in found:
            self.load.add(i)
            self.values[i] = found[identity]
        else:
            self.run[i] = self._reason(i, self.plan.deps[i]) or self._missing(i, identity)

    def _map(self, i: int) -> None:
        """A map: loaded whole, run whole, or item by item, as far as can be told
        before the run (the list it maps over may only be made during it)."""
        plan, ids = self.plan, self.ids
        deps = plan.deps[i]
        elements = self.values.get(deps[0], _UNKNOWN)  # the list it maps over
        try:
            total = len(elements) if elements is not _UNKNOWN else None
        except TypeError:  # not a list: the run fails it, as it will
            elements, total = _UNKNOWN, None
        if not ids.stored[i]:
            count = "" if total is None else f" ({_items(total)})"
            self.run[i] = Reason(
                NOT_CHECKPOINTED,
                f"not checkpointed (checkpoint=False): every item runs, every time{count}",
            )
            self.items[i] = MapItems(total, 0)
            return
        extra = [self.known[d] for d in deps[1:]]
        if any(d is None for d in extra):
            self.during[i] = f"its identity needs a value made during the run ({self._later(i)})"
            self.items[i] = MapItems(total, None)
            return
        own = combine(ids.prefix[i], extra)
        why = self._reason(i, deps[1:])
        if elements is _UNKNOWN:
            self._map_over_list_made_later(i, own, why)
        else:
            self._map_over_known_list(i, own, why, elements)

    def _map_over_list_made_later(self, i: int, own: bytes, why: Reason | None) -> None:
        """A map whose list is made during the run: its items' identities are not
        known yet, so only whether anything was ever saved under the map can be told."""
        self.list_in_run.add(i)
        if self.store is not None and self.store.stored([map_mark(own)]):
            source = describe(self.plan.names[self.plan.deps[i][0]])
            self.during[i] = (
                f"the list it maps over ({source}) is made during the run: each item "
                "whose element comes back equal to a stored one loads, the others run"
            )
            self.items[i] = MapItems(None, None)
        else:  # nothing was ever saved under this identity: no item can load
            text = why.text if why is not None else "not stored yet"
            kind = why.kind if why is not None else NOT_STORED
            self.run[i] = Reason(kind, f"{text}: every item runs")
            self.items[i] = MapItems(None, 0)

    def _map_over_known_list(self, i: int, own: bytes, why: Reason | None, elements: Any) -> None:
        """A map whose list is known before the run: each item's identity, and so
        which items load and which run."""
        item_ids = [item_identity(own, e, index)[0] for index, e in enumerate(elements)]
        self.known[i] = map_identity(own, item_ids)
        found = self._loadable(item_ids)
        size, loads = len(item_ids), sum(1 for item in item_ids if item in found)
        self.items[i] = MapItems(size, loads)
        if loads == size:
            self.load.add(i)
            self.values[i] = [found[item] for item in item_ids]
            return
        if loads == 0:
            share = f"every item runs ({_items(size)})"
        else:
            share = f"{size - loads} of {_items(size)} run, {loads} load"
        if why is None:
            why = Reason(NOT_STORED, "not stored (items missing or damaged)")
        self.run[i] = Reason(why.kind, f"{why.text}: {share}")

    # -- reasons ----------------------------------------------------------------------

    def _reason(self, i: int, deps: Iterable[int]) -> Reason | None:
        """The first part of ``i``'s identity that differs from what was last saved
        under its name (its extra deps for a map); None if all match."""
        ids, names = self.ids, self.plan.names
        prefix = ids.prefix[i]
        row = self.rows.get(key_of(prefix))
        if row is None:
            return Reason(NOT_STORED, "not stored yet")
        last = row[1]
        if last[_KEY : 2 * _KEY] != code_of(prefix):
            # One digest covers the function and what it uses in its module, so the
            # part that changed cannot be named (see docs/explain.md).
            function = _function_name(self.graph, names[i])
            return Reason(
                CODE_CHANGED,
                f"its code changed (function {function}, or a helper, class or constant "
                "of its module that it uses)",
            )
        if last[2 * _KEY : 3 * _KEY] != constants_of(prefix):
            return Reason(CONSTANT_CHANGED, "a constant changed (its args or kwargs)")
        deps = list(deps)
        was = [last[k : k + 2 * _KEY] for k in range(3 * _KEY, len(last), 2 * _KEY)]
        now = [key_of(ids.prefix[d]) + self.known[d] for d in deps]  # type: ignore[operator]
        if was != now:
            before = {pair[:_KEY]: pair[_KEY:] for pair in was}
            for d, pair in zip(deps, now, strict=True):
                if before.get(pair[:_KEY]) != pair[_KEY:]:
                    return Reason(UPSTREAM_CHANGED, f"upstream task {describe(names[d])} changed")
            return Reason(UPSTREAM_CHANGED, "its dependencies changed (one was removed)")
        return None

    def _missing(self, i: int, identity: bytes | None) -> Reason:
        """Why a task whose identity is unchanged runs: its row is gone, or damaged."""
        row = self.rows.get(key_of(self.ids.prefix[i]))
        if (
            row is not None
            and row[0] == identity
            and self.store is not None
            and self.store.stored([identity])
        ):
            return Reason(DAMAGED, "its stored value is damaged (it will be computed again)")
        return Reason(NOT_STORED, "not stored (its stored value was deleted)")

    def _later(self, i: int) -> str:
        """Why ``i`` is decided during the run: the nearest value upstream made in it."""
        ids, names, deps = self.ids, self.plan.names, self.plan.deps
        queue, seen = [d for d in deps[i] if self.known[d] is None], set()
        while queue:
            d = queue.pop(0)
            if d in seen:
                continue
            seen.add(d)
            if not ids.stored[d]:
                return (
                    f"downstream of {describe(names[d])} (checkpoint=False): loads if its "
                    "value comes back equal, decided once it exists"
                )
            if d in self.list_in_run and self.items[d].load == 0:
                return (
                    f"downstream of map {describe(names[d])}, whose items all run under an "
                    "identity nothing was stored under: it runs too, unless the list it "
                    "maps over comes back empty"
                )
            if d in self.list_in_run:
                return (
                    f"downstream of map {describe(names[d])}, whose list is made during the "
                    "run: loads if its items come back equal, decided once they exist"
                )
            queue.extend(x for x in deps[d] if self.known[x] is None)
        return "decided during the run"

    def _loadable(self, identities: list[bytes]) -> dict[bytes, Any]:
        """Which of ``identities`` the run would load: stored and readable."""
        if self.store is None:
            return {}
        found: dict[bytes, Any] = {}
        for start in range(0, len(identities), _CHUNK):
            found.update(self.store.load_many(identities[start : start + _CHUNK]))
        return found


_UNKNOWN: Any = object()


def _items(count: int) -> str:
    return "1 item" if count == 1 else f"{count} items"


def _function_name(graph: Any, name: Hashable) -> str:
    fn = graph.tasks[name].fn
    inner = getattr(fn, "func", fn)  # a functools.partial
    return repr(getattr(inner, "__qualname__", type(inner).__qualname__))


def _stored_parts(store: Any, keys: list[bytes]) -> dict[bytes, tuple[bytes, bytes]]:
    found: dict[bytes, tuple[bytes, bytes]] = {}
    for start in range(0, len(keys), _CHUNK):
        chunk = keys[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = store._read(
            f"SELECT key, identity, parts FROM dagexec_names WHERE key IN ({marks})", chunk
        )
        for key, identity, parts in rows:
            found[key] = (identity, parts)
    return found
