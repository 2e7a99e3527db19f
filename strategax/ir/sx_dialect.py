"""strategax's own ops (`sx.*`): constants and the cross-replica operations.

Each declaration is followed by its JAX lowering (inside `shard_map` over the `replica`
axis) and its reference-interpreter rule (a list holding one value per replica).
"""
from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from jax import lax

from .opdefs import LOWERINGS, REFERENCE, OpDef, declare
from .ops import Operation
from .types import Locality

REDUCE_OPS = ("sum", "mean", "max", "min")


def _mirrored(op, localities):
    return [Locality.MIRRORED] * len(op.results)


def _per_replica(op, localities):
    return [Locality.PER_REPLICA] * len(op.results)


def _same_type(op: Operation) -> str | None:
    if not op.operands[0].type.same_tensor(op.results[0].type):
        return f"result type {op.results[0].type} differs from operand type {op.operands[0].type}"
    return None


# --- sx.constant: a literal array --------------------------------------------------------
def _verify_constant(op: Operation) -> str | None:
    value = op.attrs["value"]
    if not isinstance(value, np.ndarray):
        return "`value` must be a dense array"
    if value.shape != op.result.type.shape or value.dtype != op.result.type.dtype:
        return f"`value` is {value.dtype}{list(value.shape)} but the result is {op.result.type}"
    return None


declare(OpDef("sx.constant", "A literal array, the same on every replica.", num_operands=0,
              num_results=1, attrs=("value",), locality=_mirrored, verify=_verify_constant))
LOWERINGS["sx.constant"] = lambda op, args, ctx: [jnp.asarray(op.attrs["value"])]
REFERENCE["sx.constant"] = lambda op, args, ctx: [[op.attrs["value"]] * ctx.num_replicas]


# --- sx.replica_id: this replica's index in the sync group --------------------------------
declare(OpDef("sx.replica_id", "`replica_id_in_sync_group`: this replica's index (i32[]).",
              num_operands=0, num_results=1, locality=_per_replica))
LOWERINGS["sx.replica_id"] = lambda op, args, ctx: [lax.axis_index(ctx.axis_name).astype(jnp.int32)]
REFERENCE["sx.replica_id"] = lambda op, args, ctx: [[np.int32(i) for i in ctx.replica_ids]]


# --- sx.all_reduce: every replica gets the reduction of all replicas' values ---------------
def _verify_all_reduce(op: Operation) -> str | None:
    if op.attrs["op"] not in REDUCE_OPS:
        return f"`op` must be one of {', '.join(REDUCE_OPS)}, not {op.attrs['op']!r}"
    return _same_type(op)


declare(OpDef("sx.all_reduce", "Reduce (sum, mean, max, min) a value over all replicas.",
              num_operands=1, num_results=1, attrs=("op", "reason"), locality=_mirrored,
              verify=_verify_all_reduce, is_collective=True))

_LAX_REDUCE = {"sum": lax.psum, "mean": lax.pmean, "max": lax.pmax, "min": lax.pmin}


def _lower_all_reduce(op, args, ctx):
    return [_LAX_REDUCE[op.attrs["op"]](args[0], ctx.axis_name)]


def _reference_all_reduce(op, args, ctx):
    stacked = np.stack([np.asarray(x) for x in args[0]])
    kind = op.attrs["op"]
    if kind == "mean":
        total = stacked.sum(0)
        out = total / len(args[0]) if jnp.issubdtype(stacked.dtype, jnp.inexact) else total // len(args[0])
    else:
        out = {"sum": stacked.sum, "max": stacked.max, "min": stacked.min}[kind](0)
    out = np.asarray(out, dtype=stacked.dtype)
    return [[out] * len(args[0])]


LOWERINGS["sx.all_reduce"] = _lower_all_reduce
REFERENCE["sx.all_reduce"] = _reference_all_reduce


# --- sx.all_gather: every replica gets all replicas' values concatenated along `axis` ------
def _verify_all_gather(op: Operation) -> str | None:
    src, dst = op.operands[0].type, op.results[0].type
    axis = op.attrs["axis"]
    if not isinstance(axis, int) or not 0 <= axis < max(len(src.shape), 1):
        return f"`axis` {axis!r} is out of range for {src}"
    if src.dtype != dst.dtype or len(src.shape) != len(dst.shape) or any(
            a != b for i, (a, b) in enumerate(zip(src.shape, dst.shape)) if i != axis):
        return f"result type {dst} is not operand type {src} gathered along axis {axis}"
    return None


declare(OpDef("sx.all_gather", "Concatenate every replica's value along `axis`.",
              num_operands=1, num_results=1, attrs=("axis", "reason"), locality=_mirrored,
              verify=_verify_all_gather, is_collective=True))
LOWERINGS["sx.all_gather"] = lambda op, args, ctx: [
    lax.all_gather(args[0], ctx.axis_name, axis=op.attrs["axis"], tiled=True)]


def _reference_all_gather(op, args, ctx):
    out = np.concatenate([np.asarray(x) for x in args[0]], axis=op.attrs["axis"])
    return [[out] * len(args[0])]


REFERENCE["sx.all_gather"] = _reference_all_gather
