"""Logical-device annotations (`sx.split_to_logical_devices`, `sx.assign_to_logical_device`,
`sx.replicate_to_logical_devices`): identities on the value that say how a replica lays it
out over its logical devices.

The JAX lowering turns each into a sharding constraint over the logical mesh axes (inside
`shard_map`, which is manual over `replica` only); the reference interpreter treats them
as identities.
"""
from __future__ import annotations

import jax
from jax.sharding import NamedSharding, PartitionSpec

from .opdefs import LOWERINGS, REFERENCE, OpDef, declare
from .ops import Operation
from .sharding import Sharding

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


def _verify_assign(op: Operation) -> str | None:
    k = op.attrs["logical_device"]
    if not isinstance(k, int) or k < 0:
        return f"`logical_device` must be a non-negative int, not {k!r}"
    return _same_type(op)


declare(OpDef(SPLIT, "Split a value over the replica's logical devices (identity on values).",
              num_operands=1, num_results=1, attrs=("partition_dimensions", "axes"), verify=_verify_split))
declare(OpDef(ASSIGN, "Place a value on one logical device of the replica (identity on values).",
              num_operands=1, num_results=1, attrs=("logical_device",), verify=_verify_assign))
declare(OpDef(REPLICATE, "Replicate a value on every logical device of the replica.",
              num_operands=1, num_results=1, verify=_same_type))


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
        from ..backends.maximal import place_on_logical_device

        return place_on_logical_device(x, sharding.device)
    free = None if closed else PartitionSpec.UNCONSTRAINED
    spec = PartitionSpec(*[(d if len(d) > 1 else d[0]) if d else free for d in sharding.axes]) \
        if sharding.kind == "split" else PartitionSpec()
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def _lower_annotation(op, args, ctx):
    return [constrain(args[0], annotation_sharding(op), ctx)]


def _identity(op, args, ctx):
    return [list(args[0])]


for _name in ANNOTATIONS:
    LOWERINGS[_name] = _lower_annotation
    REFERENCE[_name] = _identity


def constrain_propagated(op: Operation, value, x, ctx):
    """A split sharding that propagate-sharding gave a value becomes an open constraint."""
    sharding = value.type.sharding
    if sharding is None or sharding.kind != "split" or op.name in ANNOTATIONS:
        return x
    return constrain(x, sharding, ctx, closed=False)
