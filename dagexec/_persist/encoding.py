"""Canonical bytes of a value or a function: what task identities are made of.

The rules (what is covered, what is not, and why) are in :mod:`.identity`;
this module encodes one value or function at a time, memoising functions and
code objects for the graph being identified.
"""

from __future__ import annotations

import copyreg
import enum
import functools
import hashlib
import pickle
import struct
import types
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from .._core.errors import CheckpointError
from .checkpoint_values import describe_safely
from .members import dunder_or_sunder, functions_of, state_of, wrapped_by

_PERSON = b"dagexec-task-4"  # bump when the encoding changes: old checkpoints then miss
_PROTOCOL = 5
# Bytes longer than this are encoded by their digest. Lower saves memory on more
# values but hashes more small ones twice; higher copies large ones into the join.
_LONG_BYTES = 4096
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: set for classes created by a class statement
_SIMPLE_GLOBALS = (type(None), bool, int, float, complex, str, bytes)
_FROZEN_CONTAINERS = (tuple, frozenset)
_CONTAINERS = (list, dict, set)
_BUILTIN_BASES = (tuple, list, dict, set, frozenset)  # whose contents are not in __dict__
# How many functions (and module instances) deep one encoding follows references;
# deeper ones count by name only. Each level takes ~6 Python frames, so this stays
# far inside the default recursion limit (1000), whatever stack the caller has.
_MAX_DEPTH = 100
_pack_d = struct.Struct("<d").pack
_pack_dd = struct.Struct("<dd").pack


class _Unencodable(Exception):
    """An object that has no stable encoding; carries the reason."""


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16, person=_PERSON).digest()


def _is_constant(name: str, found: object) -> bool:
    """True for a global that is a constant deciding values: EXTENSIONS = (".csv",
    ".tsv"), PATTERN = re.compile(...), LIMITS = {...}, MODE = Mode.FAST.

    A mutable container counts only under a constant's name (PEP 8: upper case): a
    lower-case list is usually state the task appends to (a log of calls), which
    would make it run again every time."""
    kind = type(found)
    return (
        kind in _FROZEN_CONTAINERS
        or kind in copyreg.dispatch_table
        or (kind in _CONTAINERS and name.isupper())
        or isinstance(found, enum.Enum)
    )


class _Encoder:
    """Canonical bytes for values, functions and code, memoised for one computation.

    Memo tables are keyed by ``id()`` but also hold the object, so an id is never
    reused by another object while the table lives.
    """

    def __init__(self) -> None:
        self.functions: dict[int, tuple[object, bytes]] = {}
        self.codes: dict[int, tuple[types.CodeType, bytes, tuple[str, ...]]] = {}
        self.active: set[int] = set()  # functions being fingerprinted (recursion)
        self.cuts = 0  # recursion or depth markers emitted; see :meth:`function`
        # Digests with a marker, for the rest of one outermost call: each object is
        # then encoded once per call (a chain of functools.wraps reaches each level
        # twice, through __wrapped__ and a default: without this, 2**depth).
        self.within: dict[int, tuple[object, bytes]] = {}
        # The same for module-level instances (:meth:`_instance_parts`).
        self.instances: dict[int, tuple[object, bytes]] = {}
        self.within_instances: dict[int, tuple[object, bytes]] = {}
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
        elif isinstance(obj, enum.Enum):
            # By value as well as by name: pickle saves a member by name only, and
            # an edit of the value (LOW = 0.1 -> 0.2) must be seen.
            out.append(b"E")
            self.value(type(obj), out)
            self.value(obj.name, out)
            self.value(obj.value, out)
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
        hit = self.functions.get(id(fn))  # the common case, without a call
        if hit is not None:
            return hit[1]
        return self._memoised(fn, self._function_parts, self.functions, self.within)

    def _memoised(
        self,
        obj: object,
        parts: Callable[[Any], list[bytes]],
        memo: dict[int, tuple[object, bytes]],
        within: dict[int, tuple[object, bytes]],
    ) -> bytes:
        """Digest of ``parts(obj)``, memoised by ``id(obj)``.

        Recursion (a function naming itself, mutual helpers) and references deeper
        than ``_MAX_DEPTH`` are cut with a marker by name. A digest with a marker
        depends on where the encoding started, so it is kept only until the
        outermost call returns; one without is kept for the whole computation.
        """
        key = id(obj)
        hit = memo.get(key) or within.get(key)
        if hit is not None:
            return hit[1]
        active = self.active
        if key in active or len(active) >= _MAX_DEPTH:
            self.cuts += 1
            out: list[bytes] = [b"@" if key in active else b"^"]
            try:
                label = getattr(obj, "__qualname__", None)
            except Exception:  # an instance's hostile __getattr__
                label = None
            self.lenient(label, out)
            return _digest(b"".join(out))
        outermost = not active
        active.add(key)
        cuts = self.cuts
        try:
            digest = _digest(b"".join(parts(obj)))
        finally:
            active.discard(key)
            if outermost:
                self.within.clear()
                self.within_instances.clear()
        if self.cuts == cuts:
            memo[key] = (obj, digest)
        elif not outermost:
            within[key] = (obj, digest)
        return digest

    def _function_parts(self, fn: Any) -> list[bytes]:
        """A callable's parts: a ``def`` or lambda here (its name, code, defaults,
        closure cells, the globals that decide values, what it wraps), a partial, a
        method or a class below, the rarer kinds in :meth:`_other_callable_parts`.

        A plain function is encoded in this one frame, with no helper call: a chain
        of wrappers recurses through here once per level, ``_MAX_DEPTH`` levels deep,
        and each frame more per level brings that nearer the recursion limit."""
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
            wrapped = fn.__dict__.get("__wrapped__")  # functools.wraps: what it wraps too
            if wrapped is not None and wrapped is not fn:
                out += [b"w", self._lenient_function(wrapped)]
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
        else:
            self._other_callable_parts(fn, out)
        return out

    def _other_callable_parts(self, fn: Any, out: list[bytes]) -> None:
        """What :meth:`_function_parts` has for a callable that is no function,
        partial, method or class: a builtin, a wrapper (``functools.cache``), a
        callable object, or anything else (kept by value, strictly)."""
        if isinstance(fn, types.BuiltinFunctionType):
            out.append(b"builtin")
            self.value(fn.__module__, out)
            self.value(fn.__qualname__, out)
            owner = fn.__self__
            if owner is not None and not isinstance(owner, types.ModuleType):
                out.append(
                    self.strict(owner, "the object its builtin method is bound to", self.task)
                )
        elif (wrapped := wrapped_by(fn)) is not None:
            # functools.cache / lru_cache, a decorator object: what it wraps, and its
            # class's code, not its state (a cache it fills would change every run).
            out.append(b"wrapped")
            self.value(type(fn), out)
            if type(fn).__flags__ & _HEAPTYPE:
                self._methods_parts(type(fn), out)
            out.append(self.function(wrapped))
        elif isinstance(getattr(type(fn), "__call__", None), types.FunctionType):  # noqa: B004
            out += [b"object", self.function(type(fn))]
            out.append(self.strict(fn, "its callable object", self.task))
        else:
            out.append(b"other")
            out.append(self.strict(fn, "its function", self.task))

    def _methods_parts(self, cls: type, out: list[bytes]) -> None:
        """Every method written in Python of ``cls`` and of its bases; and the class
        attributes of those of them written in ``cls``'s module, by the rule of
        :meth:`_module_value` (a class constant decides values as a global does)."""
        module = getattr(cls, "__module__", None)
        for klass in cls.__mro__:
            if not klass.__flags__ & _HEAPTYPE:
                continue  # a class written in C (object, dict): no Python code
            own = getattr(klass, "__module__", None) == module
            members: Mapping[str, enum.Enum] = (
                klass.__members__ if own and isinstance(klass, enum.EnumMeta) else {}
            )
            for attr, member in sorted(vars(klass).items()):
                parts = functions_of(member)
                if parts:
                    for part in parts:
                        self.value(attr, out)
                        out.append(self.function(part))
                elif own and attr not in members and not dunder_or_sunder(attr):
                    self._module_value(attr, member, module, out)
            for attr, member in members.items():  # an Enum's members (aliases too), by value
                self.value(attr, out)
                out.append(b"E")
                self.lenient(member.value, out)

    def _globals_parts(
        self, fn: types.FunctionType, names: tuple[str, ...], out: list[bytes]
    ) -> None:
        """The globals ``fn``'s code reads that decide its value (:meth:`_module_value`)."""
        namespace = fn.__globals__
        module = fn.__module__
        for name in names:
            found = namespace.get(name, namespace)  # namespace: "not there"
            if found is not namespace:  # else a builtin, or not defined (yet)
                self._module_value(name, found, module, out)

    def _module_value(self, name: str, found: object, module: str | None, out: list[bytes]) -> None:
        """``name = found`` of a task's module (a global, or a class attribute), if it
        decides values: the module's own functions and classes (a class: its methods'
        code and constants), simple values, constants, Enum members (by value),
        ``functools.partial`` helpers and cached or wrapped helpers of the module."""
        kind = type(found)
        if kind is types.FunctionType or isinstance(found, type):
            if getattr(found, "__module__", None) == module:
                self.value(name, out)
                out.append(self.function(found))
        elif kind in _SIMPLE_GLOBALS:
            self.value(name, out)
            self.value(found, out)
        elif _is_constant(name, found):
            self.value(name, out)
            self.lenient(found, out)
        elif kind is functools.partial:
            self.value(name, out)
            out.append(self._partial_helper(found, module))  # type: ignore[arg-type]
        elif (
            callable(found)
            and getattr(found, "__module__", None) == module
            and wrapped_by(found) is not None
        ):  # @functools.cache def helper(): ...
            self.value(name, out)
            out.append(self._lenient_function(found))
        elif kind.__flags__ & _HEAPTYPE and getattr(kind, "__module__", None) == module:
            # CFG = Config(rate=2), T = Tax(): an instance of the module's own class.
            self.value(name, out)
            out.append(
                self._memoised(found, self._instance_parts, self.instances, self.within_instances)
            )

    def _instance_parts(self, obj: Any) -> list[bytes]:
        """A module-level instance of its module's own class: the class's code and
        constants, and the instance's state (``__dict__``, ``__slots__``) by the rule
        of :meth:`_module_value`; an object with neither, or a subclass of a builtin
        container (a NamedTuple), also as a value (:meth:`lenient`)."""
        cls = type(obj)
        out = [b"instance", self.function(cls)]
        state = state_of(obj)
        if state is None or isinstance(obj, _BUILTIN_BASES):  # a NamedTuple: its items
            self.lenient(obj, out)
        else:
            for attr, member in state:
                if not dunder_or_sunder(attr):
                    self._module_value(attr, member, cls.__module__, out)
        return out

    def _partial_helper(self, helper: functools.partial[Any], module: str | None) -> bytes:
        """A module's ``functools.partial`` helper: its function (by name if it is
        another module's: their code is not covered), bound arguments, keywords."""
        out = [b"partial"]
        func = helper.func
        if isinstance(func, functools.partial):
            out.append(self._partial_helper(func, module))
        elif isinstance(func, (types.FunctionType, type)) and func.__module__ != module:
            self.value(func.__module__, out)
            self.value(func.__qualname__, out)
        else:
            out.append(self._lenient_function(func))
        self.lenient(helper.args, out)
        self.lenient(sorted(helper.keywords.items()), out)
        return _digest(b"".join(out))

    def _lenient_function(self, fn: object) -> bytes:
        """:meth:`function`, or the type's name if its state cannot be encoded: for
        what a task's code reaches, not what it was given."""
        try:
            return self.function(fn)
        except CheckpointError:
            out: list[bytes] = [b"?"]
            self.value(type(fn).__module__, out)
            self.value(type(fn).__qualname__, out)
            return _digest(b"".join(out))


_FUNCTION_TYPES = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    functools.partial,
)
