"""`sx.all_reduce_bucket`: several all_reduces of one reduce op packed into one collective.

`fuse-collectives` makes it. N operands give N results (each the reduction of its operand);
`reasons` and `locs` keep every member's reason and source line so the dump's bucket table can
say where each tensor came from. It lowers to ONE flat collective: ravel, concatenate, one
reduction, split, reshape, so the lowered program holds exactly one all_reduce per bucket.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .opdefs import LOWERINGS, REFERENCE, OpDef, declare
from .ops import Operation
from .sx_dialect import _LAX_REDUCE, REDUCE_OPS, _mirrored, _reference_all_reduce


def _verify_bucket(op: Operation) -> str | None:
    if op.attrs["op"] not in REDUCE_OPS:
        return f"`op` must be one of {', '.join(REDUCE_OPS)}, not {op.attrs['op']!r}"
    if len(op.operands) != len(op.results) or not op.operands:
        return f"needs as many results as operands (at least one), has {len(op.operands)} and {len(op.results)}"
    for i, (a, r) in enumerate(zip(op.operands, op.results)):
        if not a.type.same_tensor(r.type):
            return f"result {i} type {r.type} differs from operand type {a.type}"
    if len({a.type.dtype for a in op.operands}) != 1:
        return "every operand of a bucket has the same dtype"
    for key in ("reasons", "locs"):
        value = op.attrs.get(key)
        if value is not None and (not isinstance(value, list) or len(value) != len(op.operands)):
            return f"`{key}` must be a list with one entry per operand"
    return None


declare(OpDef("sx.all_reduce_bucket", "All-reduce several tensors of one dtype as one flat collective.",
              attrs=("op", "reason"), locality=_mirrored, verify=_verify_bucket, is_collective=True))


def _lower_bucket(op, args, ctx):
    flat = jnp.concatenate([jnp.ravel(x) for x in args])
    reduced = _LAX_REDUCE[op.attrs["op"]](flat, ctx.axis_name)
    outs, start = [], 0
    for x in args:
        size = int(np.prod(x.shape, dtype=np.int64))
        outs.append(reduced[start:start + size].reshape(x.shape))
        start += size
    return outs


def _reference_bucket(op, args, ctx):
    return [_reference_all_reduce(op, [x], ctx)[0] for x in args]


LOWERINGS["sx.all_reduce_bucket"] = _lower_bucket
REFERENCE["sx.all_reduce_bucket"] = _reference_bucket
