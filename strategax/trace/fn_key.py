"""The cache key of a function given to eager `strategy.run`: equal for functions with the same
code, defaults, captured values and globals read, so a fresh lambda each call reuses the first
one's program.

Only values whose meaning cannot change behind the program's back count by value: numbers
(`-0.0` is not `0.0`), strings, None, tuples of them, dtypes and enum members; arrays
(immutable), variables and strategies by identity (the cache entry holds the first function,
so they stay alive and their ids unique); functions by their own key; modules and classes by
identity plus the attributes the code names (`config.lr`, `Config.lr`: by value; callables
and modules there by identity). A function that captures or reads anything else (a
list, a NumPy array, a model object whose attributes may have changed) is keyed by the
function object itself, as before: a fresh one traces again, so it never runs a program traced
from stale state. State reached only inside other calls (a library function's own globals) is
read when the program is traced, as tf.function and jax.jit read it.
"""
from __future__ import annotations

import enum
import functools
import types
from typing import Any, Callable

import jax
import numpy as np

from .signature import float_key

_VALUE_TYPES = (bool, int, str, bytes, type(None))
_IDENTITY_TYPES = (jax.Array, enum.Enum)
_NAMESPACE_TYPES = (types.ModuleType, type)
_MISSING = object()
_MAX_DEPTH = 4


class _Unkeyable(Exception):
    """A value whose state the program may depend on and that can change (keyed by the function)."""


def value_key(v: Any, depth: int = 0, seen: frozenset = frozenset(), names: tuple = ()) -> tuple:
    """A captured value as a key, or _Unkeyable (`seen`: the functions being keyed, for
    recursion; `names`: the attribute names the reading code uses)."""
    t = type(v)
    if t in _VALUE_TYPES:
        return (t, v)
    if t is float:
        return (t, float_key(v))
    if t is complex:
        return (t, float_key(v.real), float_key(v.imag))
    if isinstance(v, np.dtype):
        return (np.dtype, v)
    if isinstance(v, np.generic):  # NumPy scalars are immutable; their bytes tell -0.0 from 0.0
        return (t, v.tobytes())
    if isinstance(v, _IDENTITY_TYPES) or getattr(type(v), "_strategax_key_by_identity", False):
        return ("id", id(v))
    if isinstance(v, _NAMESPACE_TYPES):
        return ("namespace", id(v), _attribute_keys(v, names))
    if depth < _MAX_DEPTH:
        if t is tuple:
            return (t, tuple(value_key(e, depth + 1, seen, names) for e in v))
        if t in (types.FunctionType, types.MethodType, functools.partial, types.BuiltinFunctionType):
            if id(v) in seen:  # recursion: this function's key is being made further up
                return ("recursive", id(v))
            return ("fn", _key(v, depth + 1, seen | {id(v)}))
    raise _Unkeyable


def _attribute_keys(namespace, names: tuple) -> tuple:
    """A module's or class's attributes among `names`: plain values by value, functions,
    classes and modules by identity; anything else (a mutable object) is _Unkeyable."""
    out = []
    for n in names:
        if isinstance(namespace, type):
            a = next((k.__dict__[n] for k in namespace.__mro__ if n in k.__dict__), _MISSING)
        else:
            a = namespace.__dict__.get(n, _MISSING)
        if a is _MISSING:
            continue
        if callable(a) or isinstance(a, types.ModuleType):  # code: functions, classes, modules
            out.append((n, ("id", id(a))))
        else:
            out.append((n, value_key(a, _MAX_DEPTH - 1)))  # a plain value (or _Unkeyable)
    return tuple(out)


def _key(fn: Callable, depth: int, seen: frozenset) -> tuple:
    t = type(fn)
    if t is types.FunctionType:
        names = _global_names(fn.__code__)
        closure = () if fn.__closure__ is None else tuple(_cell_key(c, depth, seen, names) for c in fn.__closure__)
        kwdefaults = fn.__kwdefaults__
        g = fn.__globals__
        return (fn.__code__, id(g), value_key(fn.__defaults__, depth, seen, names),
                None if kwdefaults is None else
                tuple((k, value_key(v, depth, seen, names)) for k, v in sorted(kwdefaults.items())),
                closure, tuple((n, value_key(g[n], depth, seen, names)) for n in names if n in g))
    if t is types.MethodType:
        return ("method", _key(fn.__func__, depth, seen), value_key(fn.__self__, depth, seen))
    if t is functools.partial:
        return ("partial", _key(fn.func, depth, seen), value_key(fn.args, depth, seen),
                tuple((k, value_key(v, depth, seen)) for k, v in sorted(fn.keywords.items())))
    if t is types.BuiltinFunctionType:
        return ("id", id(fn))
    raise _Unkeyable


def function_key(fn: Callable) -> tuple:
    """Equal for two functions that compute the same thing (see the module docstring); for a
    function that captures something mutable, the function object itself (today's identity)."""
    try:
        return _key(fn, 0, frozenset({id(fn)}))
    except _Unkeyable:
        pass
    try:
        hash(fn)
        return ("object", fn)  # bound methods of one object compare equal: one entry for all
    except TypeError:
        return ("object id", id(fn), fn)  # held by the key, so the id stays unique


def _cell_key(cell, depth: int, seen: frozenset, names: tuple) -> tuple:
    try:
        value = cell.cell_contents
    except ValueError:  # a cell not yet filled (a function defined before the name it uses)
        return ("empty",)
    return value_key(value, depth, seen, names)


@functools.lru_cache(maxsize=4096)
def _global_names(code: types.CodeType) -> tuple[str, ...]:
    """The names `code` (and the functions and comprehensions inside it) may read as globals
    or attributes."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.update(_global_names(const))
    return tuple(sorted(names))


def named_parts(fn: Callable) -> list[tuple[str, tuple]]:
    """(name, key) of each default, captured value and global a plain function reads, for
    saying which of them changed between two traces (the retracing warning)."""
    if type(fn) is not types.FunctionType:
        return []
    code, parts = fn.__code__, []

    names = _global_names(code)

    def add(label, value):
        try:
            parts.append((label, value_key(value, names=names)))
        except _Unkeyable:  # mutable: the function is keyed by its own identity
            parts.append((label, ("mutable", id(value))))
    if fn.__defaults__:
        names = code.co_varnames[:code.co_argcount][-len(fn.__defaults__):]
        for n, v in zip(names, fn.__defaults__):
            add(f"the default of `{n}`", v)
    for n, v in sorted((fn.__kwdefaults__ or {}).items()):
        add(f"the default of `{n}`", v)
    for n, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            add(f"the captured value `{n}`", cell.cell_contents)
        except ValueError:
            parts.append((f"the captured value `{n}`", ("empty",)))
    g = fn.__globals__
    for n in names:
        if n in g:
            add(f"the global `{n}`", g[n])
    return parts
