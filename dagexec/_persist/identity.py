"""Task identities: a digest that changes when a task or anything upstream of it changes.

A checkpointed run stores each finished value under its task's identity, and a
later run loads the values whose identity it finds. So the identity must cover
everything that decides the value, and nothing else:

* the task's **name**;
* its **function**: for a plain function, its code (bytecode, constants including
  nested functions' code, names, argument layout), defaults, closure contents and
  what it names in its own module: functions, classes (their methods' code),
  simple constants, tuples and frozensets, lists, dicts and sets under an
  upper-case (constant) name, and objects pickled through ``copyreg``
  (``re.Pattern``); for a
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

import copyreg
import functools
import hashlib
import pickle
import struct
import types
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from .checkpoint import CheckpointError, describe_safely

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

_PERSON = b"dagexec-task-2"  # bump when the encoding changes: old checkpoints then miss
_PROTOCOL = 5
# Bytes longer than this are encoded by their digest. Lower saves memory on more
# values but hashes more small ones twice; higher copies large ones into the join.
_LONG_BYTES = 4096
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: set for classes created by a class statement
_SIMPLE_GLOBALS = (type(None), bool, int, float, complex, str, bytes)
_FROZEN_CONTAINERS = (tuple, frozenset)
_CONTAINERS = (list, dict, set)
_pack_d = struct.Struct("<d").pack
_pack_dd = struct.Struct("<dd").pack


class _Unencodable(Exception):
    """An object that has no stable encoding; carries the reason."""


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16, person=_PERSON).digest()


class _Encoder:
    """Canonical bytes for values, functions and code, memoised for one computation.

    Memo tables are keyed by ``id()`` but also hold the object, so an id is never
    reused by another object while the table lives.
    """

    def __init__(self) -> None:
        self.functions: dict[int, tuple[object, bytes]] = {}
        self.codes: dict[int, tuple[types.CodeType, bytes, tuple[str, ...]]] = {}
        self.active: set[int] = set()  # functions being fingerprinted (recursion)
        self.cuts = 0  # recursion markers emitted; a digest with one is not memoised
        self.task: Hashable = None  # the task being identified, for error messages

    # -- values ---------------------------------------------------------------------

    def value(self, obj: Any, out: list[bytes]) -> None:
        """Append ``obj``'s canonical encoding to ``out``; raise _Unencodable if none."""
        t = type(obj)
        if t is str:
            data = obj.encode("utf-8", "surrogatepass")
            out.append(b"s%d:" % len(data))
            out.append(data)
        elif t is int:
            out.append(b"i%x;" % obj)  # hex: not subject to int's str() digit limit
        elif obj is None:
            out.append(b"N")
        elif t is bool:
            out.append(b"T" if obj else b"F")
        elif t is float:
            out.append(b"f" + _pack_d(obj))
        elif t is bytes:
            if len(obj) > _LONG_BYTES:  # digest it now: joining a copy would double it
                out.append(b"B" + hashlib.blake2b(obj, digest_size=32).digest())
            else:
                out.append(b"b%d:" % len(obj))
                out.append(obj)
        elif t is tuple or t is list:
            out.append(b"(" if t is tuple else b"[")
            for item in obj:
                self.value(item, out)
            out.append(b")")
        elif t is dict:
            out.append(b"{")
            for key, item in obj.items():
                self.value(key, out)
                self.value(item, out)
            out.append(b"}")
        else:
            self._uncommon(obj, t, out)

    def _uncommon(self, obj: Any, t: type, out: list[bytes]) -> None:
        """:meth:`value` for the types past the plain ones: sets, buffers, complex,
        code, classes, functions and, last, anything pickle could reduce."""
        if t is set or t is frozenset:
            parts = []
            for item in obj:
                part: list[bytes] = []
                self.value(item, part)
                parts.append(b"".join(part))
            parts.sort()  # iteration order follows str hashes, which vary per process
            out.append(b"<%d:" % len(parts) if t is set else b">%d:" % len(parts))
            out.extend(parts)
        elif t is pickle.PickleBuffer:  # protocol 5 out-of-band data (numpy arrays)
            try:
                view = obj.raw()
            except BufferError as exc:
                raise _Unencodable(f"BufferError: {exc}") from exc
            out.append(b"B" + hashlib.blake2b(view, digest_size=32).digest())
        elif t is complex:
            out.append(b"c" + _pack_dd(obj.real, obj.imag))
        elif isinstance(obj, types.CodeType):
            out.append(b"K" + self.code(obj)[0])
        elif isinstance(obj, type):
            out.append(b"C")
            self.value(getattr(obj, "__module__", None), out)
            self.value(obj.__qualname__, out)
        elif callable(obj) and isinstance(obj, _FUNCTION_TYPES):
            out.append(b"X" + self.function(obj))
        else:
            self._reduced(obj, out)

    def _reduced(self, obj: object, out: list[bytes]) -> None:
        # What pickle would save, but encoded canonically (sets sorted). Like
        # pickle, a reducer registered with copyreg comes first: re.Pattern has
        # no __reduce_ex__ of its own that works, only copyreg's.
        try:
            reducer = copyreg.dispatch_table.get(type(obj))
            reduced = reducer(obj) if reducer is not None else obj.__reduce_ex__(_PROTOCOL)
        except Exception as exc:
            raise _Unencodable(f"{type(exc).__name__}: {exc}") from exc
        if isinstance(reduced, str):  # a global, pickled by name
            out.append(b"G")
            self.value(getattr(obj, "__module__", None), out)
            self.value(reduced, out)
            return
        out.append(b"R")
        for part in reduced:
            if isinstance(part, Iterable) and not isinstance(part, (str, bytes, tuple, dict)):
                part = list(part)  # listitems / dictitems iterators
            self.value(part, out)
        out.append(b")")

    def strict(self, obj: object, what: str, name: Hashable) -> bytes:
        """Encoding of data that decides the value; CheckpointError if there is none."""
        out: list[bytes] = []
        try:
            self.value(obj, out)
        except RecursionError:
            # A cycle of references (a node pointing at its parent): pickle copes.
            try:
                return b"P" + pickle.dumps(obj, protocol=_PROTOCOL)
            except Exception as exc:
                raise self._unpicklable(obj, what, name, exc) from exc
        except (_Unencodable, ValueError, TypeError) as exc:
            raise self._unpicklable(obj, what, name, exc) from exc
        return b"".join(out)

    def _unpicklable(
        self, obj: object, what: str, name: Hashable, exc: Exception
    ) -> CheckpointError:
        return CheckpointError(
            f"task {describe_safely(name)}: {what}, a {type(obj).__name__}, cannot be "
            f"pickled ({exc}), so the checkpoint cannot tell whether it changed; make it "
            "picklable, or run this graph without a checkpoint",
            task=name,
        )

    def lenient(self, obj: object, out: list[bytes]) -> None:
        """Encoding of a task's surroundings; falls back to the type's name."""
        part: list[bytes] = []
        try:
            self.value(obj, part)
        except (_Unencodable, CheckpointError, RecursionError, ValueError, TypeError):
            part = [b"?"]
            self.value(type(obj).__module__, part)
            self.value(type(obj).__qualname__, part)
        out.extend(part)

    # -- code and functions ---------------------------------------------------------

    def code(self, code: types.CodeType) -> tuple[bytes, tuple[str, ...]]:
        """(digest of the code tree, global names it and its nested code use)."""
        hit = self.codes.get(id(code))
        if hit is not None:
            return hit[1], hit[2]
        out = [
            b"%d,%d,%d,%d;"
            % (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags),
            b"%d:" % len(code.co_code),
            code.co_code,
        ]
        names = set(code.co_names)
        for group in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
            self.value(group, out)
        self.value(code.co_qualname, out)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                digest, inner = self.code(const)
                out.append(b"K" + digest)
                names.update(inner)
            else:
                self.lenient(const, out)
        result = (_digest(b"".join(out)), tuple(sorted(names)))
        self.codes[id(code)] = (code, *result)
        return result

    def function(self, fn: object) -> bytes:
        """16-byte digest of a callable's behaviour; see the module docstring."""
        key = id(fn)
        hit = self.functions.get(key)
        if hit is not None:
            return hit[1]
        if key in self.active:
            # Recursion (a function naming itself, mutual helpers): a marker by name.
            self.cuts += 1
            out: list[bytes] = [b"@"]
            self.lenient(getattr(fn, "__qualname__", None), out)
            return _digest(b"".join(out))
        self.active.add(key)
        cuts = self.cuts
        try:
            digest = _digest(b"".join(self._function_parts(fn)))
        finally:
            self.active.discard(key)
        if self.cuts == cuts:  # a digest with a marker depends on where we started
            self.functions[key] = (fn, digest)
        return digest

    def _function_parts(self, fn: Any) -> list[bytes]:
        out: list[bytes] = []
        if isinstance(fn, types.FunctionType):
            # Not __module__: the same file run as a script (__main__) and imported
            # (the command line) must give the same identities.
            out.append(b"function")
            self.value(fn.__qualname__, out)
            digest, names = self.code(fn.__code__)
            out.append(digest)
            self.lenient(fn.__defaults__, out)
            self.lenient(sorted((fn.__kwdefaults__ or {}).items()), out)
            for cell in fn.__closure__ or ():
                try:
                    contents = cell.cell_contents
                except ValueError:  # a cell not filled yet
                    out.append(b"E")
                else:
                    self.lenient(contents, out)
            self._globals_parts(fn, names, out)
        elif isinstance(fn, functools.partial):
            out += [b"partial", self.function(fn.func)]
            out.append(self.strict(fn.args, "its partial's bound arguments", self.task))
            out.append(
                self.strict(sorted(fn.keywords.items()), "its partial's keywords", self.task)
            )
        elif isinstance(fn, types.MethodType):
            owner = fn.__self__
            out += [b"method", self.function(fn.__func__)]
            if not isinstance(owner, type):  # the rest of its class's code
                out.append(self.function(type(owner)))
            out.append(self.strict(owner, "the object its method is bound to", self.task))
        elif isinstance(fn, type):
            # A class: every method of it and of its bases written in Python, so an
            # edit to a helper method that __call__ or __init__ uses is seen too.
            out.append(b"class")
            self.value(fn, out)
            self._methods_parts(fn, out)
        elif isinstance(fn, types.BuiltinFunctionType):
            out.append(b"builtin")
            self.value(fn.__module__, out)
            self.value(fn.__qualname__, out)
            owner = fn.__self__
            if owner is not None and not isinstance(owner, types.ModuleType):
                out.append(
                    self.strict(owner, "the object its builtin method is bound to", self.task)
                )
        elif isinstance(getattr(type(fn), "__call__", None), types.FunctionType):  # noqa: B004
            out += [b"object", self.function(type(fn))]
            out.append(self.strict(fn, "its callable object", self.task))
        else:
            out.append(b"other")
            out.append(self.strict(fn, "its function", self.task))
        return out

    def _methods_parts(self, cls: type, out: list[bytes]) -> None:
        """Every method written in Python of ``cls`` and of its bases."""
        for klass in cls.__mro__:
            if not klass.__flags__ & _HEAPTYPE:
                continue  # a class written in C (object, dict): no Python code
            for attr, member in sorted(vars(klass).items()):
                for part in _functions_of(member):
                    self.value(attr, out)
                    out.append(self.function(part))

    def _globals_parts(
        self, fn: types.FunctionType, names: tuple[str, ...], out: list[bytes]
    ) -> None:
        """The globals ``fn``'s code reads that decide its value: its module's own
        functions and classes, simple values, and constants."""
        namespace = fn.__globals__
        for name in names:
            found = namespace.get(name, namespace)  # namespace: "not there"
            if found is namespace:
                continue  # a builtin, or not defined (yet)
            kind = type(found)
            if isinstance(found, (types.FunctionType, type)):
                # Its module's functions and classes (a class: its methods' code).
                if getattr(found, "__module__", None) == fn.__module__:
                    self.value(name, out)
                    out.append(self.function(found))
            elif kind in _SIMPLE_GLOBALS:
                self.value(name, out)
                self.value(found, out)
            elif (
                kind in _FROZEN_CONTAINERS
                or kind in copyreg.dispatch_table
                or (kind in _CONTAINERS and name.isupper())
            ):
                # Constants that decide the value: EXTENSIONS = (".csv", ".tsv"),
                # PATTERN = re.compile(...), LIMITS = {...}. A mutable container
                # counts only under a constant's name (PEP 8: upper case): a
                # lower-case list is usually state the task appends to (a log
                # of calls), which would make it run again every time.
                self.value(name, out)
                self.lenient(found, out)


def _functions_of(member: object) -> list[types.FunctionType]:
    """The Python functions behind a class attribute: method, static, class, property."""
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    if isinstance(member, property):
        return [
            f for f in (member.fget, member.fset, member.fdel) if isinstance(f, types.FunctionType)
        ]
    return [member] if isinstance(member, types.FunctionType) else []


_FUNCTION_TYPES = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    functools.partial,
)


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
