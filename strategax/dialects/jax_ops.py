"""Generic `jax.<primitive>` ops: every JAX primitive is an op, declared on first use from its
name (the parser finds primitives through `jax.extend.core.primitives`, the importer
registers each one it meets). Lowering re-binds the primitive with the op's attributes as its
parameters; the reference interpreter does the same on each replica's values.
"""
from __future__ import annotations

import weakref
from typing import Callable

import jax
import numpy as np
from jax import core as jax_core

from ..ir import OpDef, Operation, Splat, Subprogram, add_resolver, declaration, dense_array, dtype_name
from .jax_attrs import AttrError, from_attr
from .primitives import find_primitive

# Primitives that carry sub-programs and are inlined by the importer rather than kept as ops.
INLINED_PRIMITIVES = frozenset(
    {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
     "custom_vjp_call_jaxpr", "remat", "remat2", "checkpoint", "name"})


def _resolve(name: str) -> OpDef | None:
    """The declaration of `jax.<primitive>` for a primitive JAX knows."""
    if not name.startswith("jax."):
        return None
    prim = find_primitive(name[4:])
    if prim is None or prim.name in INLINED_PRIMITIVES:
        return None
    return OpDef(name, f"JAX primitive `{prim.name}`", primitive=prim,
                 num_results=None if prim.multiple_results else 1, verify=verify_generic)


MAX_SPLAT_PARAM = 1 << 20  # elements: a splat parameter is materialised to bind the primitive


def verify_generic(op: Operation) -> str | None:
    """JAX's own abstract evaluation of the primitive on the op's operand types and attributes:
    the attributes are the parameters it needs, of the kinds it needs (a missing or ill-formed
    one is reported here, before any pass reads it), and the results have the types it gives."""
    key = (op.name, tuple([(v.type.shape, v.type.dtype) for v in op.operands]),
           tuple([(k, type(v), v) for k, v in op.attrs.items()]),
           tuple([(r.type.shape, r.type.dtype) for r in op.results]))
    try:
        if key in _VERIFIED:
            return None
    except TypeError:  # an unhashable attribute (a list, an array): evaluate every time
        key = None
    problem = _results_problem(op, _abstract_eval(op))
    if problem is None and key is not None:
        if len(_VERIFIED) >= 4096:
            _VERIFIED.clear()
        _VERIFIED.add(key)
    return problem


def _results_problem(op: Operation, outcome: "tuple | str") -> str | None:
    """Why `op`'s results are not what JAX's evaluation gave (`outcome`, or its problem)."""
    if isinstance(outcome, str):
        return outcome
    if len(outcome) != len(op.results):
        return f"`{op.name[4:]}` gives {len(outcome)} results, the op has {len(op.results)}"
    for k, ((shape, dtype), r) in enumerate(zip(outcome, op.results)):
        if shape != r.type.shape or dtype != r.type.dtype:
            return (f"result {k} is {r.type}, but `{op.name[4:]}` of these operands gives "
                    f"{dtype_name(dtype)}[{','.join(map(str, shape))}]")
    return None


# (name, operand types, attributes, result types) of the ops that verified; most ops of a
# program repeat a few signatures, so verifying a large module costs little more than a small one
_VERIFIED: set[tuple] = set()


def _abstract_eval(op: Operation) -> "tuple[tuple[tuple[int, ...], np.dtype], ...] | str":
    prim = declaration(op).primitive
    big = [k for k, v in op.attrs.items() if isinstance(v, Splat) and v.size > MAX_SPLAT_PARAM]
    if big:
        return f"attribute `{big[0]}` is a splat of more than {MAX_SPLAT_PARAM} elements"
    avals = [jax_core.ShapedArray(v.type.shape, v.type.dtype) for v in op.operands]
    try:
        out, _ = prim.abstract_eval(*avals, **bind_params(op, avals))
    except AttrError as e:  # an attribute names what this process does not know
        return str(e)
    except Exception as e:  # noqa: BLE001 - whatever the primitive's checks raise, about the input
        text = str(e).strip().splitlines()
        operands = ", ".join(str(v.type.with_locality(None).with_sharding(None)) for v in op.operands)
        return (f"JAX's `{prim.name}` rejects operands ({operands or 'none'}) with attributes "
                f"({', '.join(op.attrs) or 'none'}): {type(e).__name__}: {text[0] if text else ''}")
    out = out if prim.multiple_results else [out]
    return tuple((tuple(a.shape), np.dtype(a.dtype)) for a in out)


add_resolver(_resolve)


def _combiner_jaxpr(combine: Callable):
    def rebuild(args: list) -> dict:
        import jax
        import jax.numpy as jnp

        scalar = jax.ShapeDtypeStruct((), jnp.result_type(args[0]))
        closed = jax.make_jaxpr(combine)(scalar, scalar)
        return {"update_jaxpr": closed.jaxpr, "update_consts": tuple(closed.consts)}
    return rebuild


def _scatter_combiners() -> dict[str, Callable]:
    from jax import lax

    return {"scatter-add": _combiner_jaxpr(lax.add), "scatter-mul": _combiner_jaxpr(lax.mul),
            "scatter-min": _combiner_jaxpr(lax.min), "scatter-max": _combiner_jaxpr(lax.max),
            "scatter": lambda args: {"update_jaxpr": None, "update_consts": ()}}


# Parameters that are a function of the primitive alone (a scatter's combiner): the importer
# drops them and `bind_params` rebuilds them, so the IR holds only plain attributes.
DERIVED_PARAMS: dict[str, Callable[[list], dict]] = _scatter_combiners()


def bind_params(op: Operation, args: list) -> dict:
    """The JAX parameters of op's primitive, as its equation in a jaxpr holds them: its
    attributes as JAX objects (`jax_attrs.from_attr`) plus derived ones; AttrError when an
    attribute names something this process does not know."""
    prim = declaration(op).primitive
    derive = DERIVED_PARAMS.get(prim.name)
    params = {}
    for k, v in op.attrs.items():
        try:
            params[k] = from_attr(v, subprogram_jaxpr)
        except AttrError as e:
            raise AttrError(f"attribute `{k}`: {e}") from None
    return {**params, **derive(args)} if derive else params


_REBUILT: "weakref.WeakKeyDictionary[Subprogram, object]" = weakref.WeakKeyDictionary()


def subprogram_jaxpr(sub: Subprogram):
    """The ClosedJaxpr a `Subprogram` attribute stands for: its block traced by JAX, each op
    re-bound (the importer makes sub-programs of generic ops and constants only)."""
    closed = _REBUILT.get(sub)
    if closed is None:
        def run(*xs):
            env = {id(a): x for a, x in zip(sub.block.args, xs)}
            for op in sub.block.ops:
                if op.name == "sx.constant":
                    outs = [dense_array(op.attrs["value"])]
                elif op.name.startswith("jax.") and not op.regions:
                    outs = generic_lowering(op, [env[id(v)] for v in op.operands], None)
                else:
                    raise AttrError(f"a sub-program holds `{op.name}`; only generic ops and constants rebuild")
                env.update((id(r), o) for r, o in zip(op.results, outs))
            return [env[id(v)] for v in sub.block.results]

        structs = [jax.ShapeDtypeStruct(a.type.shape, a.type.dtype) for a in sub.block.args]
        try:
            closed = jax.make_jaxpr(run)(*structs)
        except AttrError:
            raise
        except Exception as e:  # noqa: BLE001 - the block may come from text: whatever JAX says of it
            raise AttrError(f"the sub-program does not trace: {type(e).__name__}: {e}") from None
        _REBUILT[sub] = closed
    return closed


def bind(op: Operation, args: list):
    """Bind op's primitive on `args` as `jax.core.eval_jaxpr` re-binds an equation (a call-like
    primitive gets its sub-program back as a function: `get_bind_params`)."""
    prim = declaration(op).primitive
    return prim.bind(*args, **prim.get_bind_params(bind_params(op, args)))


def generic_lowering(op: Operation, args: list, ctx) -> list:
    """Re-bind the JAX primitive with the op's attributes as its parameters."""
    out = bind(op, args)
    return list(out) if declaration(op).primitive.multiple_results else [out]


def generic_reference(op: Operation, args: list[list], ctx) -> list[list]:
    """The primitive bound on each replica's values in turn."""
    prim = declaration(op).primitive
    per_replica = []
    for r in range(ctx.num_replicas):
        per_replica.append(bind(op, [x[r] for x in args]))
    if prim.multiple_results:
        return [[per_replica[r][k] for r in range(ctx.num_replicas)] for k in range(len(op.results))]
    return [per_replica]
