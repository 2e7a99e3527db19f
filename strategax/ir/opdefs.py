"""One declaration per op, read by the printer, parser, verifier, passes and backends.

`OpDef` says an op's arity, required attributes, regions, how its result locality follows
from its operands, and any extra verification. Lowering rules live beside each declaration in
the plain dicts `LOWERINGS` (JAX backend) and `REFERENCE` (reference interpreter), keyed by op
name. Generic `jax.<primitive>` ops are declared once, from the primitive's name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from jax.extend import core as jex_core

from .ops import Operation
from .types import Locality

LocalityRule = Callable[[Operation, Sequence[Locality]], Sequence[Locality]]


def join_operands(op: Operation, localities: Sequence[Locality]) -> list[Locality]:
    """Default locality: per_replica if any operand is, else mirrored."""
    loc = Locality.MIRRORED
    for x in localities:
        loc = loc.join(x)
    return [loc] * len(op.results)


@dataclass(frozen=True)
class OpDef:
    name: str
    summary: str
    num_operands: int | None = None  # None: any number
    num_results: int | None = None
    num_regions: int | None = 0  # None: any number
    attrs: tuple[str, ...] = ()  # attributes that must be present
    locality: LocalityRule = join_operands
    verify: Callable[[Operation], str | None] | None = None  # returns an error message or None
    is_collective: bool = False
    primitive: object = None  # the JAX primitive a generic op re-binds


OP_DEFS: dict[str, OpDef] = {}
LOWERINGS: dict[str, Callable] = {}  # op name -> rule(op, args, ctx) -> list of results (in JAX)
REFERENCE: dict[str, Callable] = {}  # op name -> rule(op, args_per_replica, ctx) -> results

# Primitives that carry sub-programs and are inlined by the importer rather than kept as ops.
INLINED_PRIMITIVES = frozenset(
    {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
     "custom_vjp_call_jaxpr", "remat", "remat2", "checkpoint", "name"})

_PRIMITIVES: dict[str, jex_core.Primitive] = {}
_jax_primitives_loaded = False


def declare(opdef: OpDef) -> OpDef:
    OP_DEFS[opdef.name] = opdef
    return opdef


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


def lookup(name: str) -> OpDef | None:
    """The declaration of op `name`, or None if there is no such op."""
    opdef = OP_DEFS.get(name)
    if opdef is None and name.startswith("jax."):
        if not _jax_primitives_loaded:
            _load_jax_primitives()
        prim = _PRIMITIVES.get(name[4:])
        if prim is not None and prim.name not in INLINED_PRIMITIVES:
            opdef = declare(OpDef(name, f"JAX primitive `{prim.name}`", primitive=prim,
                                  num_results=None if prim.multiple_results else 1))
    return opdef


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
