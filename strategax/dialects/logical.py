"""Logical-device annotations (`sx.split_to_logical_devices`, `sx.assign_to_logical_device`,
`sx.replicate_to_logical_devices`): identities on the value that say how a replica lays it
out over its logical devices.

Traced, each is a primitive that is the identity on values; the gradient of an annotated
value carries the same annotation (as XLA's partitioner shards a cotangent like its primal).
The JAX lowering turns each into a sharding constraint over the logical mesh axes (inside
`shard_map`, which is manual over `replica` only): placing on one logical device is a Shardy
maximal-sharding constraint, made by a private primitive because JAX's
`with_sharding_constraint` takes no maximal shardings. The reference interpreter treats the
annotations as identities.
"""
from __future__ import annotations

import jax
from jax._src.interpreters import mlir
from jaxlib.mlir.dialects import sdy
from jax._src.named_sharding import SdyArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching
from jax.sharding import NamedSharding, PartitionSpec

from ..ir import Attr, Int, OpDef, Operation, Sharding, declare
from .collectives import primitive
from .registry import LOWERINGS, REFERENCE

SPLIT, ASSIGN, REPLICATE = ("sx.split_to_logical_devices", "sx.assign_to_logical_device",
                            "sx.replicate_to_logical_devices")
ANNOTATIONS = (SPLIT, ASSIGN, REPLICATE)


def _same_type(op: Operation) -> str | None:
    if not op.operands[0].type.same_tensor(op.result.type):
        return f"result type {op.result.type} differs from operand type {op.operands[0].type}"
    return None


def _verify_split(op: Operation) -> str | None:
    dims, axes = op.attrs["partition_dimensions"], op.attrs["axes"]
    rank = len(op.operands[0].type.shape)
    if len(dims) != rank or len(axes) != rank:
        return f"`partition_dimensions` and `axes` need {rank} entries (the operand's rank)"
    for d, n in zip(op.operands[0].type.shape, dims):
        if n < 1 or d % n:
            return f"dimension of size {d} cannot be split {n} ways"
    return _same_type(op)


declare(OpDef(SPLIT, "Split a value over the replica's logical devices (identity on values).",
              num_operands=1, num_results=1,
              attrs={"partition_dimensions": Attr("ints", minimum=1), "axes": Attr("axes")},
              verify=_verify_split))
declare(OpDef(ASSIGN, "Place a value on one logical device of the replica (identity on values).",
              num_operands=1, num_results=1, attrs={"logical_device": Int(minimum=0)},
              verify=_same_type))
declare(OpDef(REPLICATE, "Replicate a value on every logical device of the replica.",
              num_operands=1, num_results=1, attrs={}, verify=_same_type))


# --- the traced primitives -----------------------------------------------------------------
def _annotation(name: str) -> Primitive:
    p = primitive(name)
    p.def_abstract_eval(lambda x, **params: x)
    ad.deflinear2(p, lambda ct, x, **params: [p.bind(ct, **params)])
    return p


split_p = _annotation(SPLIT)
assign_p = _annotation(ASSIGN)
replicate_p = _annotation(REPLICATE)


def _split_batch(args, dims, *, partition_dimensions, axes):
    # the batch axis is not split
    (x,), (b,) = args, dims
    return split_p.bind(x, partition_dimensions=partition_dimensions[:b] + (1,) + partition_dimensions[b:],
                        axes=axes[:b] + ((),) + axes[b:]), b


batching.primitive_batchers[split_p] = _split_batch
for _p in (assign_p, replicate_p):
    batching.primitive_batchers[_p] = (lambda p: lambda args, dims, **params: (p.bind(*args, **params), dims[0]))(_p)


# --- placing on one logical device: a Shardy maximal sharding -----------------------------------
maximal_p = Primitive("strategax_place_on_logical_device")
maximal_p.def_impl(lambda x, *, device: x)
maximal_p.def_abstract_eval(lambda x, *, device: x)
ad.deflinear2(maximal_p, lambda ct, x, *, device: [maximal_p.bind(ct, device=device)])


def _lower_maximal(ctx, x, *, device):
    from jax._src import config

    if not config.use_shardy_partitioner.value:
        return [x]  # GSPMD: no maximal constraint inside shard_map; the value stays replicated
    attr = SdyArray(mesh_shape=(), dim_shardings=(), logical_device_ids=(device,))
    return [sdy.sharding_constraint(x, attr.build(ctx.module_context.sharding_attr_cache))]


mlir.register_lowering(maximal_p, _lower_maximal)


# --- lowering ------------------------------------------------------------------------------
def annotation_sharding(op: Operation) -> Sharding:
    """The sharding an annotation op gives its result."""
    if op.name == SPLIT:
        return Sharding.split(op.attrs["axes"])
    if op.name == ASSIGN:
        return Sharding("device", device=op.attrs["logical_device"])
    return Sharding("replicated")


def constrain(x, sharding: Sharding, ctx, closed: bool = True):
    """Constrain `x` (a replica's value inside shard_map) to `sharding` over the logical axes."""
    mesh = getattr(ctx, "mesh", None)
    if mesh is None or len(mesh.axis_names) < 2:
        return x  # no logical devices: nothing to partition
    if sharding.kind == "device":
        return maximal_p.bind(x, device=int(sharding.device))
    free = None if closed else PartitionSpec.UNCONSTRAINED
    spec = PartitionSpec(*[(d[0] if len(d) == 1 else d) if d else free for d in sharding.axes]) \
        if sharding.kind == "split" else PartitionSpec()
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def _lower_annotation(op, args, ctx):
    return [constrain(args[0], annotation_sharding(op), ctx)]


for _name in ANNOTATIONS:
    LOWERINGS[_name] = _lower_annotation
    REFERENCE[_name] = lambda op, args, ctx: [list(args[0])]


def constrain_propagated(op: Operation, value, x, ctx):
    """A split sharding that propagate-sharding gave a value becomes an open constraint."""
    sharding = value.type.sharding
    if sharding is None or sharding.kind != "split" or op.name in ANNOTATIONS:
        return x
    return constrain(x, sharding, ctx, closed=False)
