"""Generic `jax.<primitive>` ops: every JAX primitive is an op, declared on first use from its
name (the parser finds primitives through `jax.extend.core.primitives`, the importer
registers each one it meets). Lowering re-binds the primitive with the op's attributes as its
parameters; the reference interpreter does the same on each replica's values.
"""
from __future__ import annotations

from typing import Callable

from jax.extend import core as jex_core

from ..ir import OpDef, Operation, add_resolver, lookup

# Primitives that carry sub-programs and are inlined by the importer rather than kept as ops.
INLINED_PRIMITIVES = frozenset(
    {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
     "custom_vjp_call_jaxpr", "remat", "remat2", "checkpoint", "name"})

_PRIMITIVES: dict[str, jex_core.Primitive] = {}
_jax_primitives_loaded = False


def register_primitive(prim: jex_core.Primitive) -> None:
    """Make a JAX primitive findable by name (the importer calls this for every one it meets)."""
    _PRIMITIVES.setdefault(prim.name, prim)


def _load_jax_primitives() -> None:
    global _jax_primitives_loaded
    from jax.extend.core import primitives

    _jax_primitives_loaded = True
    for value in vars(primitives).values():
        if isinstance(value, jex_core.Primitive):
            register_primitive(value)


def _resolve(name: str) -> OpDef | None:
    """The declaration of `jax.<primitive>` for a primitive JAX knows."""
    if not name.startswith("jax."):
        return None
    if not _jax_primitives_loaded:
        _load_jax_primitives()
    prim = _PRIMITIVES.get(name[4:])
    if prim is None or prim.name in INLINED_PRIMITIVES:
        return None
    return OpDef(name, f"JAX primitive `{prim.name}`", primitive=prim,
                 num_results=None if prim.multiple_results else 1)


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
    prim = lookup(op.name).primitive
    derive = DERIVED_PARAMS.get(prim.name)
    return {**op.attrs, **derive(args)} if derive else op.attrs


def generic_lowering(op: Operation, args: list, ctx) -> list:
    """Re-bind the JAX primitive with the op's attributes as its parameters."""
    prim = lookup(op.name).primitive
    out = prim.bind(*args, **bind_params(op, args))
    return list(out) if prim.multiple_results else [out]


def generic_reference(op: Operation, args: list[list], ctx) -> list[list]:
    """The primitive bound on each replica's values in turn."""
    prim = lookup(op.name).primitive
    per_replica = []
    for r in range(ctx.num_replicas):
        mine = [x[r] for x in args]
        per_replica.append(prim.bind(*mine, **bind_params(op, mine)))
    if prim.multiple_results:
        return [[per_replica[r][k] for r in range(ctx.num_replicas)] for k in range(len(op.results))]
    return [per_replica]
