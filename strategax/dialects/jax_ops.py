"""Generic `jax.<primitive>` ops: every JAX primitive is an op, declared on first use from its
name (the parser finds primitives through `jax.extend.core.primitives`, the importer
registers each one it meets). Lowering re-binds the primitive with the op's attributes as its
parameters; the reference interpreter does the same on each replica's values.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from jax import core as jax_core

from ..ir import OpDef, Operation, Splat, add_resolver, declaration, dtype_name
from ..ir.attributes import find_primitive
from ..ir.attributes import register_primitive as register_primitive  # re-exported: dialects register here

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
    key = (op.name, tuple((v.type.shape, v.type.dtype) for v in op.operands),
           tuple((k, type(v), v) for k, v in op.attrs.items()))
    try:
        outcome = _EVALUATED.get(key)
    except TypeError:  # an unhashable attribute (a list, an array): evaluate every time
        key = outcome = None
    if outcome is None:
        outcome = _abstract_eval(op)
        if key is not None:
            if len(_EVALUATED) >= 4096:
                _EVALUATED.clear()
            _EVALUATED[key] = outcome
    if isinstance(outcome, str):
        return outcome
    if len(outcome) != len(op.results):
        return f"`{op.name[4:]}` gives {len(outcome)} results, the op has {len(op.results)}"
    for k, ((shape, dtype), r) in enumerate(zip(outcome, op.results)):
        if shape != r.type.shape or dtype != r.type.dtype:
            return (f"result {k} is {r.type}, but `{op.name[4:]}` of these operands gives "
                    f"{dtype_name(dtype)}[{','.join(map(str, shape))}]")
    return None


# (name, operand types, attributes) -> the result (shape, dtype)s, or the problem; most ops of
# a program repeat a few signatures, so verifying a large module costs little more than a small one
_EVALUATED: dict[tuple, "tuple | str"] = {}


def _abstract_eval(op: Operation) -> "tuple[tuple[tuple[int, ...], np.dtype], ...] | str":
    prim = declaration(op).primitive
    big = [k for k, v in op.attrs.items() if isinstance(v, Splat) and v.size > MAX_SPLAT_PARAM]
    if big:
        return f"attribute `{big[0]}` is a splat of more than {MAX_SPLAT_PARAM} elements"
    avals = [jax_core.ShapedArray(v.type.shape, v.type.dtype) for v in op.operands]
    try:
        out, _ = prim.abstract_eval(*avals, **bind_params(op, avals))
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
    """The JAX parameters to re-bind op's primitive with: its attributes plus derived ones."""
    prim = declaration(op).primitive
    derive = DERIVED_PARAMS.get(prim.name)
    params = {**op.attrs, **derive(args)} if derive else op.attrs
    if any(isinstance(v, Splat) for v in params.values()):
        params = {k: v.materialize() if isinstance(v, Splat) else v for k, v in params.items()}
    return params


def generic_lowering(op: Operation, args: list, ctx) -> list:
    """Re-bind the JAX primitive with the op's attributes as its parameters."""
    prim = declaration(op).primitive
    out = prim.bind(*args, **bind_params(op, args))
    return list(out) if prim.multiple_results else [out]


def generic_reference(op: Operation, args: list[list], ctx) -> list[list]:
    """The primitive bound on each replica's values in turn."""
    prim = declaration(op).primitive
    per_replica = []
    for r in range(ctx.num_replicas):
        mine = [x[r] for x in args]
        per_replica.append(prim.bind(*mine, **bind_params(op, mine)))
    if prim.multiple_results:
        return [[per_replica[r][k] for r in range(ctx.num_replicas)] for k in range(len(op.results))]
    return [per_replica]
