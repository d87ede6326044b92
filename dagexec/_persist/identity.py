"""Task identities: a digest that changes when a task or anything upstream of it changes.

A checkpointed run stores each finished value under its task's identity, and a
later run loads the values whose identity it finds. So the identity must cover
everything that decides the value, and nothing else:

* the task's **name**;
* its **function**: for a plain function, its code (bytecode, constants including
  nested functions' code, names, argument layout), defaults, closure contents and
  what it names in its own module: functions, classes (their methods' code),
  simple constants, tuples and frozensets, lists, dicts and sets under an
  upper-case (constant) name, objects pickled through ``copyreg``
  (``re.Pattern``), and instances of its own classes (their class's code and
  their state, by the same rule); for a
  ``functools.partial``, the function and the bound arguments; for a bound method
  or a callable object, its class's code and the object's state; for a builtin or
  a C callable, its qualified name (or its pickle);
* its **constant arguments** (``args``/``kwargs`` given to ``g.add``);
* the **identities of its dependencies**, in order.

Editing a task therefore changes its identity and that of everything downstream,
and nothing else. Not covered, by design: code in *other* modules (a library
upgrade), files the task reads, the clock. After such a change, delete the
checkpoint. Line numbers are not covered either (moving a function does not
re-run it) but docstrings are (they are constants of the code).

Identities are equal across processes and machines running the same Python
minor version: nothing here uses ``id()`` or ``hash()`` (string hashes change
with ``PYTHONHASHSEED``), sets are encoded sorted, and values are encoded
canonically (exact types, length-prefixed) with pickle's reduce protocol as the
fallback for other objects. An encoding can differ for equal values (a dict
built in another order, a set inside a ``__reduce__`` that returns it as a
list): that only re-runs the task, never loads a wrong value.

Constant arguments and the state of callable objects must be encodable: if they
cannot be pickled, :func:`task_identities` raises :class:`CheckpointError` naming
the task. Closure contents, defaults and globals that cannot be pickled (a lock,
a connection) are covered by their type only, since they describe the task's
surroundings rather than its data.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from .._core.errors import CheckpointError
from .checkpoint_values import describe_safely
from .encoding import _digest, _Encoder, _Unencodable

__all__ = [
    "TaskParts",
    "code_of",
    "combine",
    "constants_of",
    "key_of",
    "task_identities",
    "task_parts",
    "value_digest",
]


class TaskParts:
    """Per task, what its identity is made of: name, code, constants, dependencies.

    ``prefix[i]`` is the canonical encoding of the task's name followed by the
    16-byte digests of its function and of its constant arguments (see
    :func:`code_of`, :func:`constants_of`, :func:`key_of`). A task's identity is
    ``combine(prefix[i], identities of its dependencies)``, the same formula at
    plan time (:func:`task_identities`) and during a run (a task downstream of
    a value known only then, see :mod:`dagexec._persist.savers`), so an identity never
    depends on when it was computed. Kept apart so that :func:`dagexec.explain`
    can tell "its code changed" from "a constant changed".
    """

    __slots__ = ("ids", "prefix")

    def __init__(self, count: int) -> None:
        self.ids: list[bytes | None] = [None] * count
        self.prefix: list[bytes | None] = [None] * count


def combine(prefix: bytes, dep_ids: Iterable[bytes]) -> bytes:
    """A task's identity from its prefix and its dependencies' identities, in order."""
    return _digest(b"".join((prefix, b"d", *dep_ids)))


def key_of(prefix: bytes) -> bytes:
    """16-byte key of the task's name in the store's table of names."""
    return _digest(prefix[:-32])


def code_of(prefix: bytes) -> bytes:
    """16-byte digest of the task's function, as its identity saw it."""
    return prefix[-32:-16]


def constants_of(prefix: bytes) -> bytes:
    """16-byte digest of the task's constant arguments."""
    return prefix[-16:]


def _name_encoding(encoder: _Encoder, name: Hashable) -> bytes:
    if type(name) is str:  # the common case, inlined
        data = name.encode("utf-8", "surrogatepass")
        return b"s%d:" % len(data) + data
    return encoder.strict(name, "its name", name)


_NO_CONSTANTS = _digest(b"a")


def value_digest(obj: object) -> bytes | None:
    """16-byte digest of a value's canonical encoding, or None if it has none.

    What a map item is found by (its element), and what stands for the value of
    a ``checkpoint=False`` task in the identities downstream of it. Equal values
    of the same types give equal digests in any process.
    """
    out: list[bytes] = [b"v"]
    try:
        _Encoder().value(obj, out)
    except (_Unencodable, CheckpointError, RecursionError, ValueError, TypeError):
        return None
    return _digest(b"".join(out))


def task_identities(
    names: Sequence[Hashable],
    fns: Sequence[Callable[..., Any]],
    deps: Sequence[Sequence[int]],
    args: Sequence[tuple[Any, ...] | None] | None = None,
    kwargs: Sequence[Mapping[str, Any] | None] | None = None,
    *,
    only: Iterable[int] | None = None,
) -> list[bytes | None]:
    """The 16-byte identity of each task, given the graph as parallel columns.

    ``deps[i]`` holds the *indices* of task ``i``'s dependencies, in argument
    order. ``args``/``kwargs`` default to none for every task. With ``only``,
    just those tasks and their ancestors are computed; the others are None.
    Pure and deterministic; runs on the calling thread, once per run.

    Raises:
        CheckpointError: a task's constant arguments (or callable object state)
            cannot be pickled; the message names the task.
        ValueError: the dependencies form a cycle (validate the graph first).
    """
    return task_parts(names, fns, deps, args, kwargs, only=only).ids


def _constants(
    strict: Callable[[object, str, Hashable], bytes],
    name: Hashable,
    args: tuple[Any, ...] | None,
    kwargs: Mapping[str, Any] | None,
) -> bytes:
    """The digest of a task's constant arguments (some are given)."""
    constants = [b"a"]
    if args:
        constants.append(strict(tuple(args), "its constant arguments", name))
    if kwargs:
        constants.append(b"k")
        constants.append(strict(sorted(kwargs.items()), "its constant keyword arguments", name))
    return _digest(b"".join(constants))


def task_parts(
    names: Sequence[Hashable],
    fns: Sequence[Callable[..., Any]],
    deps: Sequence[Sequence[int]],
    args: Sequence[tuple[Any, ...] | None] | None = None,
    kwargs: Sequence[Mapping[str, Any] | None] | None = None,
    *,
    only: Iterable[int] | None = None,
) -> TaskParts:
    """:func:`task_identities` with each task's prefix (see :class:`TaskParts`) too."""
    count = len(names)
    parts = TaskParts(count)
    ids, prefixes = parts.ids, parts.prefix
    visiting = bytearray(count)
    encoder = _Encoder()
    function = encoder.function
    strict = encoder.strict
    digest = _digest

    def identify(i: int) -> bytes:
        name = names[i]
        encoder.task = name
        if type(name) is str:  # the common case, inlined: a third of the time
            data = name.encode("utf-8", "surrogatepass")
            key = b"s%d:" % len(data) + data
        else:
            key = strict(name, "its name", name)
        code = function(fns[i])
        a = args[i] if args is not None else None
        k = kwargs[i] if kwargs is not None else None
        consts = _constants(strict, name, a, k) if a or k else _NO_CONSTANTS
        prefix = prefixes[i] = b"".join((key, code, consts))
        task_deps = deps[i]
        if len(task_deps) == 1:  # the commonest shape, without a list
            return digest(b"".join((prefix, b"d", ids[task_deps[0]])))  # type: ignore[arg-type]
        parts = [prefix, b"d"]
        parts.extend(map(ids.__getitem__, task_deps))  # type: ignore[arg-type]
        return digest(b"".join(parts))

    roots: Iterable[int] = range(count) if only is None else only
    for root in roots:
        if ids[root] is not None:
            continue
        for d in deps[root]:
            if ids[d] is None:
                break
        else:
            ids[root] = identify(root)  # its dependencies came first: no stack needed
            continue
        stack = [root]
        while stack:  # depth-first, iterative: graphs can be a million tasks deep
            i = stack[-1]
            if ids[i] is not None:
                stack.pop()
                continue
            if not visiting[i]:
                visiting[i] = 1
                for d in deps[i]:
                    if ids[d] is None:
                        if visiting[d]:
                            raise ValueError(
                                f"task {describe_safely(names[i])} is on a dependency cycle; "
                                "validate the graph before computing identities"
                            )
                        stack.append(d)
                continue
            stack.pop()
            ids[i] = identify(i)
    return parts
