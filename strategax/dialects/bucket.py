"""`sx.all_reduce_bucket`: several all_reduces of one reduce op packed into one collective.

`fuse-collectives` makes it. N operands give N results (each the reduction of its operand);
`reasons` and `locs` keep every member's reason and source line so the dump's bucket table can
say where each tensor came from. It lowers to ONE flat collective: ravel, concatenate, one
reduction, split, reshape, so the lowered program holds exactly one all_reduce per bucket.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..ir import Attr, Enum, Int, OpDef, Operation, Str, declare
from .collectives import REDUCE_OPS, mirrored, reduce_over_replicas, reference_reduce
from .registry import LOWERINGS, REFERENCE


def _verify_bucket(op: Operation) -> str | None:
    if len(op.operands) != len(op.results) or not op.operands:
        return f"needs as many results as operands (at least one), has {len(op.operands)} and {len(op.results)}"
    for i, (a, r) in enumerate(zip(op.operands, op.results)):
        if not a.type.same_tensor(r.type):
            return f"result {i} type {r.type} differs from operand type {a.type}"
    if len({a.type.dtype for a in op.operands}) != 1:
        return "every operand of a bucket has the same dtype"
    for key in ("reasons", "locs"):
        value = op.attrs.get(key)
        if value is not None and len(value) != len(op.operands):
            return f"`{key}` must be a list with one entry per operand"
    return None


declare(OpDef("sx.all_reduce_bucket", "All-reduce several tensors of one dtype as one flat collective.",
              attrs={"op": Enum(*REDUCE_OPS), "reason": Str(),
                     "reasons": Attr("strs", required=False), "locs": Attr("strs", required=False),
                     "bytes_per_pack": Int(minimum=0, required=False)},
              locality=mirrored, verify=_verify_bucket, is_collective=True))


def _lower_bucket(op, args, ctx):
    flat = jnp.concatenate([jnp.ravel(x) for x in args])
    reduced = reduce_over_replicas(op.attrs["op"], flat, ctx.axis_name)
    outs, start = [], 0
    for x in args:
        size = int(np.prod(x.shape, dtype=np.int64))
        outs.append(reduced[start:start + size].reshape(x.shape))
        start += size
    return outs


LOWERINGS["sx.all_reduce_bucket"] = _lower_bucket
REFERENCE["sx.all_reduce_bucket"] = lambda op, args, ctx: [
    [reference_reduce(op.attrs["op"], x)] * len(x) for x in args]
