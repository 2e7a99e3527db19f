"""Jaxpr to IR: one op per primitive, nested calls inlined, control flow kept as regions."""
from __future__ import annotations

import os
import sysconfig
from typing import Any, Sequence

import jax
import numpy as np
from jax._src import source_info_util
from jax.extend import core as jex

from ..dialects import DERIVED_PARAMS, INLINED_PRIMITIVES, register_primitive, to_attr
from ..dialects.control_flow import region_writes, scan_layout
from ..errors import StrategaxError
from ..ir import Block, Func, Held, Location, Operation, Subprogram, TensorType, Value
from .keys import is_key, key_data, physical_aval, physical_rule

# An op's location is the first frame outside strategax, JAX and installed libraries (optax...),
# i.e. the user's line that led to it.
for _path in {os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
              sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
    source_info_util.register_exclusion(_path)

# Which parameter holds the sub-program of an inlined call. Besides the calls listed in
# INLINED_PRIMITIVES, a primitive with a `call_jaxpr` (JAX's convention for a call, e.g. one from
# a newer JAX) is inlined; any other primitive with a jaxpr parameter (`reduce`'s combiner,
# `shard_map`) is kept whole, the jaxpr an attribute, and lowers by re-binding.
_CALL_JAXPR_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
_DERIVED_KEYS = {name: ("update_jaxpr", "update_consts") for name in DERIVED_PARAMS}
_REGION_PARAMS = {"cond": ("branches",), "while": ("cond_jaxpr", "body_jaxpr"), "scan": ("jaxpr",)}


class JaxprImportError(TypeError):
    """A traced program uses something the strategax IR cannot hold."""


class UnrepresentableError(StrategaxError, JaxprImportError):
    """A primitive of the user's program has a parameter the strategax IR cannot hold; names the
    user's line that made it."""


_UNREPRESENTABLE_FIX = ("compute it with JAX operations on arrays (or keep the call outside the "
                        "strategy.function); see docs/troubleshooting.md")


def _type_of(aval, where: str) -> TensorType:
    aval = physical_aval(aval)  # a PRNG key array is held as its key data
    if not hasattr(aval, "shape") or not hasattr(aval, "dtype"):
        raise JaxprImportError(f"{where}: strategax cannot hold a value of type {aval}")
    try:
        return TensorType.of(aval)
    except TypeError as e:
        raise JaxprImportError(f"{where}: {e}") from None


_file_cache: dict[str, str] = {}


def _display_path(path: str) -> str:
    shown = _file_cache.get(path)
    if shown is None:
        try:
            rel = os.path.relpath(path)
            shown = rel if not rel.startswith("..") else path
        except ValueError:
            shown = path
        _file_cache[path] = shown
    return shown


def location_of(eqn) -> Location | None:
    frame = source_info_util.user_frame(eqn.source_info.traceback)
    if frame is None:
        return None
    return Location(_display_path(frame.file_name), frame.start_line)


class _Importer:
    def __init__(self):
        self.ops: list[Operation] = []
        self.const_cache: dict[Any, Value] = {}

    def constant(self, value, aval=None) -> Value:
        if is_key(value) or (aval is not None and is_key(aval)):
            value, aval = key_data(value), None
        array = np.asarray(value, dtype=None if aval is None else aval.dtype)
        if isinstance(value, np.ndarray) and np.shares_memory(array, value):
            array = array.copy()  # the user's NumPy array may change later; the program keeps its value
        key = None
        if array.size == 1:
            key = (array.dtype.str, array.shape, array.tobytes())
            if key in self.const_cache:
                return self.const_cache[key]
        v = Value(TensorType(array.shape, array.dtype))
        self.ops.append(Operation("sx.constant", [], [v], {"value": array}))
        if key is not None:
            self.const_cache[key] = v
        return v

    def read(self, env, atom) -> Value:
        if isinstance(atom, jex.Literal):
            return self.constant(atom.val, atom.aval)
        return env[atom]

    def inline(self, jaxpr, consts: Sequence[Any], args: Sequence[Value]) -> list[Value]:
        env: dict[Any, Value] = {}
        for var, c in zip(jaxpr.constvars, consts):
            env[var] = self.constant(c)
        for var, a in zip(jaxpr.invars, args):
            env[var] = a
        for eqn in jaxpr.eqns:
            self.eqn(env, eqn)
        return [self.read(env, v) for v in jaxpr.outvars]

    def region(self, closed) -> Block:
        jaxpr, consts = (closed.jaxpr, closed.consts) if hasattr(closed, "consts") else (closed, ())
        sub = _Importer()
        args = [Value(_type_of(v.aval, "region argument")) for v in jaxpr.invars]
        results = sub.inline(jaxpr, consts, args)
        return Block(args, sub.ops, results)

    def eqn(self, env, eqn) -> None:
        prim = eqn.primitive
        name = prim.name
        args = [self.read(env, v) for v in eqn.invars]
        if name in INLINED_PRIMITIVES or (
                name not in _REGION_PARAMS and isinstance(eqn.params.get("call_jaxpr"), (jex.ClosedJaxpr, jex.Jaxpr))):
            sub = next((eqn.params[p] for p in _CALL_JAXPR_PARAMS if p in eqn.params), None)
            if sub is None:
                raise JaxprImportError(f"cannot inline primitive {name!r}: no sub-program found")
            jaxpr, consts = (sub.jaxpr, sub.consts) if hasattr(sub, "consts") else (sub, ())
            outs = self.inline(jaxpr, consts, args)
            for var, v in zip(eqn.outvars, outs):
                if not isinstance(var, jex.DropVar):
                    env[var] = v
            return
        if name not in _REGION_PARAMS:
            try:
                rule = physical_rule(eqn)
            except TypeError as e:
                raise self.unrepresentable(eqn, str(e)) from None
            if rule is not None:  # PRNG keys: the same computation on their key data
                self.physical(env, eqn, rule, args)
                return
        register_primitive(prim)
        op_name = name if name.startswith("sx.") else "jax." + name
        regions, attrs = [], {}
        region_params = _REGION_PARAMS.get(name, ())
        derived = _DERIVED_KEYS.get(name, ())
        for key, val in eqn.params.items():
            if key in derived:
                continue
            if key in region_params:
                subs = val if isinstance(val, (tuple, list)) else (val,)
                regions.extend(self.region(s) for s in subs)
            else:  # every parameter has an attribute (what has no text form is held)
                attrs[key] = to_attr(val, self.subprogram)
        if name == "scan":
            attrs.update(scan_layout(eqn.params))
        writes = region_writes(regions)
        if writes:  # the variables updated inside: the op's carried state
            attrs["writes"] = writes
        results = [Value(_type_of(v.aval, f"result of {name!r}")) for v in eqn.outvars]
        self.ops.append(Operation(op_name, args, results, attrs, regions, location_of(eqn)))
        for var, v in zip(eqn.outvars, results):
            if not isinstance(var, jex.DropVar):
                env[var] = v


    def subprogram(self, closed) -> Subprogram | Held:
        """A jaxpr parameter as a `Subprogram` when its ops are generic ops and constants (so
        `dialects.jax_ops.subprogram_jaxpr` rebuilds it), else held as it is."""
        try:
            block = self.region(closed)
        except JaxprImportError:
            block = None
        if block is None or any(not (op.name == "sx.constant" or op.name.startswith("jax.") and not op.regions)
                                for op in block.ops):
            return to_attr(closed)
        return Subprogram(block)

    def physical(self, env, eqn, rule, args: list[Value]) -> None:
        """Import `rule` (the equation on key data) in place of the equation, at its line."""
        structs = [jax.ShapeDtypeStruct(physical_aval(v.aval).shape, physical_aval(v.aval).dtype)
                   for v in eqn.invars]
        closed = jax.make_jaxpr(rule)(*structs)
        start, loc = len(self.ops), location_of(eqn)
        outs = self.inline(closed.jaxpr, closed.consts, args)
        for op in self.ops[start:]:
            if op.loc is None:
                op.loc = loc
        for var, v in zip(eqn.outvars, outs):
            if not isinstance(var, jex.DropVar):
                env[var] = v

    @staticmethod
    def unrepresentable(eqn, message: str) -> UnrepresentableError:
        loc = location_of(eqn)
        return UnrepresentableError(message, _UNREPRESENTABLE_FIX,
                                    location=(loc.file, loc.line) if loc is not None else None)


def import_jaxpr(closed_jaxpr, arg_types: Sequence[TensorType], name: str = "main") -> Func:
    """A Func whose parameters have `arg_types` and whose body is the traced program."""
    imp = _Importer()
    args = [Value(t) for t in arg_types]
    results = imp.inline(closed_jaxpr.jaxpr, closed_jaxpr.consts, args)
    return Func(name, Block(args, imp.ops, results))
