"""Tasks with constant arguments, and the add-time check that a task can be called.

The scheduler and the workers only ever call ``fn(*dep_values)``. A task with
constants (``args``, ``kwargs``) or with dependencies passed by keyword is
compiled here into a small callable that makes the real call, so the engine
stays unchanged and pays nothing for tasks without constants.

:func:`check_call` binds placeholders to the function's signature when the task
is added, so a task that cannot accept what it will be given fails at ``add``
time, naming the task and the parameter, instead of at run time after all its
upstream work ran. Signatures are slow to read (5 to 150 us), so verdicts are
cached per function *shape* (code object, or class) and call shape: a graph of a
million tasks built from a few functions reads a few signatures.
"""

from __future__ import annotations

import functools
import inspect
import types
import weakref
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from .errors import describe

__all__ = [
    "BoundCall",
    "ItemKeywordCall",
    "KeywordCall",
    "callable_name",
    "check_call",
    "check_plain_call",
]


class BoundCall:
    """``fn(*dep_values, *args, **kwargs)``: a task with constant arguments."""

    __slots__ = ("args", "fn", "kwargs")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def __call__(self, *dep_values: Any) -> Any:
        return self.fn(*dep_values, *self.args, **self.kwargs)

    def __repr__(self) -> str:
        parts = ["*dep_values", *map(_safe_repr, self.args)]
        parts += [f"{k}={_safe_repr(v)}" for k, v in self.kwargs.items()]
        return f"<dagexec task call {callable_name(self.fn)}({', '.join(parts)})>"


class KeywordCall:
    """``fn(*args, **{param: dep_value}, **kwargs)``: dependencies passed by keyword."""

    __slots__ = ("args", "dep_params", "fn", "kwargs")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        dep_params: tuple[str, ...],
    ):
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.dep_params = dep_params

    def __call__(self, *dep_values: Any) -> Any:
        return self.fn(
            *self.args, **dict(zip(self.dep_params, dep_values, strict=True)), **self.kwargs
        )

    def __repr__(self) -> str:
        parts = [*map(_safe_repr, self.args), *(f"{p}=<dep>" for p in self.dep_params)]
        parts += [f"{k}={_safe_repr(v)}" for k, v in self.kwargs.items()]
        return f"<dagexec task call {callable_name(self.fn)}({', '.join(parts)})>"


class ItemKeywordCall(KeywordCall):
    """``fn(item, *args, **{param: dep_value}, **kwargs)``: a map's item with keyword deps.

    A map's item is called with its element first, then the values of the map's
    deps: the element stays positional, the deps go by keyword.
    """

    __slots__ = ()

    def __call__(self, item: Any, *dep_values: Any) -> Any:
        return self.fn(
            item,
            *self.args,
            **dict(zip(self.dep_params, dep_values, strict=True)),
            **self.kwargs,
        )

    def __repr__(self) -> str:
        return super().__repr__().replace("call ", "item call ", 1)


def _safe_repr(value: object) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__} with a failing repr>"
    return text if len(text) <= 60 else text[:57] + "..."


def callable_name(fn: object) -> str:
    """``fn.__qualname__`` (or ``__name__``) when it has one, else its type's name."""
    if isinstance(fn, functools.partial):
        return f"functools.partial({callable_name(fn.func)}, ...)"
    for attr in ("__qualname__", "__name__"):
        try:
            name = getattr(fn, attr, None)
        except Exception:
            name = None
        if isinstance(name, str):
            return name
    return f"<{type(fn).__name__} object>"


# Verdicts already reached, by (function shape, call shape); each value keeps its
# key's objects alive, so the ids in the keys cannot be reused while cached.
# Bounded: a program that builds graphs from more distinct functions than this
# just reads some signatures again.
_CHECKED: dict[Hashable, object] = {}
# The same, by the function object itself (its id, checked through a weak
# reference, so the cache never keeps a user's function or its closure alive):
# the common case, one function added many times, costs one dict look-up.
_CHECKED_FN: dict[tuple[int, Hashable], weakref.ref[Any]] = {}
_CHECKED_MAX = 4096


def check_plain_call(task: Hashable, fn: Callable[..., Any], deps: tuple[Hashable, ...]) -> None:
    """:func:`check_call` for a task called as ``fn(*dep_values)``, with a fast path."""
    ref = _CHECKED_FN.get((id(fn), len(deps)))
    if ref is not None and ref() is fn:
        return
    check_call(task, fn, deps, {}, (), {})


def check_call(
    task: Hashable,
    fn: Callable[..., Any],
    pos_deps: tuple[Hashable, ...],
    kw_deps: Mapping[str, Hashable],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> None:
    """Raise ``TypeError`` unless ``fn`` can be called the way task ``task`` will call it.

    Callables whose signature cannot be read (some builtins) are accepted unchecked.
    """
    simple = not (kw_deps or args or kwargs)
    shape: Hashable = (
        len(pos_deps) if simple else (len(pos_deps), tuple(kw_deps), len(args), tuple(kwargs))
    )
    found = _shape_key(fn)
    if found is not None:
        key = (found[0], shape)
        if key in _CHECKED:
            _remember(fn, shape)
            return
    _reject_async(task, fn)
    try:
        sig = inspect.signature(fn)
    except Exception:  # no readable signature (or a hostile object): accepted unchecked
        sig = None
    if sig is not None:
        _bind(task, fn, sig, pos_deps, kw_deps, args, kwargs)
    if found is not None:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[found[0], shape] = found[1]
    _remember(fn, shape)


def _remember(fn: object, shape: Hashable) -> None:
    # Only plain functions: they are what a graph adds many times over. Other
    # callables are often made fresh per task (or cannot be weakly referenced),
    # and the shape cache serves them.
    if type(fn) is not types.FunctionType:
        return
    ref = weakref.ref(fn)
    if len(_CHECKED_FN) >= _CHECKED_MAX:
        _CHECKED_FN.clear()
    _CHECKED_FN[id(fn), shape] = ref


def _shape_key(fn: Any) -> tuple[Hashable, object] | None:
    """What determines ``fn``'s signature, as a cheap key and an object to keep
    alive with it; None when unsure.

    Never the user's object itself when that would keep their data alive in the
    cache (a closure, a bound method's ``self``, a callable instance).
    """
    kind = type(fn)
    if kind is types.FunctionType:
        if getattr(fn, "__wrapped__", None) is not None or getattr(fn, "__signature__", None):
            return None  # functools.wraps: the signature is the wrapped function's
        code = fn.__code__
        defaults, kwdefaults = fn.__defaults__, fn.__kwdefaults__
        # Every lambda made in a loop shares one code object: one signature read.
        key = (id(code), len(defaults) if defaults else 0, tuple(kwdefaults or ()))
        return key, code
    return _wrapper_shape_key(fn, kind)


def _wrapper_shape_key(fn: Any, kind: type) -> tuple[Hashable, object] | None:
    """:func:`_shape_key` for anything but a plain function: a bound method or a
    partial (keyed by what they wrap), a builtin, a class, a callable instance.

    Apart from :func:`_shape_key` so that the plain function, what graphs add by
    the thousand, is keyed without reading these cases."""
    if kind is types.MethodType:
        inner = _shape_key(fn.__func__)
        return None if inner is None else ((kind, inner[0]), inner[1])
    if kind is functools.partial:
        inner = _shape_key(fn.func)
        if inner is None:
            return None
        return (kind, inner[0], len(fn.args), tuple(fn.keywords)), inner[1]
    if kind is types.BuiltinFunctionType:
        owner = fn.__self__
        if owner is None or type(owner) is types.ModuleType:
            return (kind, id(fn)), fn
        return None
    if isinstance(fn, type):
        return (type, id(fn)), fn
    return _instance_shape_key(fn, kind)


def _instance_shape_key(fn: Any, kind: type) -> tuple[Hashable, object] | None:
    """:func:`_shape_key` for a callable instance: its signature is its class's
    ``__call__``, unless the instance says otherwise (``__wrapped__``,
    ``__signature__``), which only an instance that can differ from its class may."""
    if _SLOTTED_PLAIN.get(kind) is None:
        _SLOTTED_PLAIN[kind] = _attributes_come_from_the_class(kind)
    if not _SLOTTED_PLAIN[kind]:
        try:
            if hasattr(fn, "__wrapped__") or hasattr(fn, "__signature__"):
                return None
        except Exception:
            return None
    return ("instance", id(kind)), kind


# Per class of callable instances: can an instance differ from its class in
# __wrapped__/__signature__? (A weak map: classes made on the fly may go away.)
_SLOTTED_PLAIN: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _attributes_come_from_the_class(kind: type) -> bool:
    """True when instances have no __dict__ and no attribute hooks, and the class
    defines neither __wrapped__ nor __signature__: all instances look alike."""
    try:
        return (
            kind.__dictoffset__ == 0
            and getattr(kind, "__getattribute__", None) is object.__getattribute__
            and not hasattr(kind, "__getattr__")
            and not hasattr(kind, "__wrapped__")
            and not hasattr(kind, "__signature__")
        )
    except Exception:
        return False


def _reject_async(task: Hashable, fn: Callable[..., Any]) -> None:
    call: Any = fn
    if not (inspect.isroutine(fn) or isinstance(fn, (type, functools.partial))):
        call = type(fn).__call__  # a callable instance
    if inspect.iscoroutinefunction(call):  # also sees through functools.partial
        what = "an async function (a coroutine function)"
    elif inspect.isasyncgenfunction(call):
        what = "an async generator function"
    else:
        return
    raise TypeError(
        f"task {describe(task)}: {callable_name(fn)} is {what}; dagexec runs tasks on "
        "threads and would only get an un-awaited coroutine back. Use a plain function, "
        "e.g. one that calls asyncio.run(...), or run async code with asyncio.TaskGroup"
    )


class _Placeholder:
    """Stands for a value in a trial ``Signature.bind``; its repr is what it stands for."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _bind(
    task: Hashable,
    fn: Callable[..., Any],
    sig: inspect.Signature,
    pos_deps: tuple[Hashable, ...],
    kw_deps: Mapping[str, Hashable],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> None:
    positional = [_Placeholder(f"<value of {describe(d)}>") for d in pos_deps]
    positional += [_Placeholder(f"args[{i}]") for i in range(len(args))]
    keywords = {p: _Placeholder(f"<value of {describe(d)}>") for p, d in kw_deps.items()}
    keywords.update((k, _Placeholder(f"kwargs[{k!r}]")) for k in kwargs)
    try:
        sig.bind(*positional, **keywords)
    except TypeError as exc:
        name = callable_name(fn)
        plain = sig.replace(
            parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
            return_annotation=sig.empty,
        )
        call = ", ".join([*map(repr, positional), *(f"{k}={v!r}" for k, v in keywords.items())])
        raise TypeError(
            f"task {describe(task)}: {name}{plain} cannot be called as {name}({call}): "
            f"{exc}; make deps, args and kwargs match the parameters (dependency values "
            "come first, then args, then kwargs), or change the function's parameters"
        ) from None
