"""Variable ops: `sx.var_read`, `sx.var_assign`, `sx.var_assign_add`, `sx.var_assign_sub`, and
`sx.broadcast` (replica `source`'s value to every replica: ONLY_FIRST_REPLICA aggregation).

Variables are module-level symbols (`var @w : f32[4] mirrored {sync = on_write, agg = sum}`);
each op names one with its `var` attribute. `ctx` says whether the op was traced in replica or
cross-replica context; `insert-collectives` reads it and sets `reduced = true` once it has
added the aggregation. Lowered, a variable is an extra input and output of the executable
(donated, so an update is in place); the rules below keep each variable's current value in
`ctx.vars` (the JAX backend) or `ctx.vars` as one value per replica (the reference interpreter).
"""
from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from jax import lax

from .opdefs import LOWERINGS, REFERENCE, OpDef, declare
from .ops import Operation, SymbolRef
from .types import Locality

CONTEXTS = ("replica", "cross_replica")
SYNCS = ("on_write", "on_read")
AGGREGATIONS = ("none", "sum", "mean", "only_first_replica")


def _verify_var_op(op: Operation) -> str | None:
    if not isinstance(op.attrs["var"], SymbolRef):
        return "`var` must be a symbol (@name)"
    if op.attrs["ctx"] not in CONTEXTS:
        return f"`ctx` must be one of {', '.join(CONTEXTS)}, not {op.attrs['ctx']!r}"
    return None


def _verify_read(op: Operation) -> str | None:
    if op.attrs["sync"] not in SYNCS:
        return f"`sync` must be one of {', '.join(SYNCS)}, not {op.attrs['sync']!r}"
    return _verify_var_op(op)


def _read_locality(op, localities):
    return [Locality.PER_REPLICA if op.attrs["sync"] == "on_read" else Locality.MIRRORED]


# --- sx.var_read: the variable's current (local) value ---------------------------------------
declare(OpDef("sx.var_read", "Read a variable's local copy.", num_operands=0, num_results=1,
              attrs=("var", "ctx", "sync"), locality=_read_locality, verify=_verify_read))
LOWERINGS["sx.var_read"] = lambda op, args, ctx: [ctx.vars[op.attrs["var"].name]]
REFERENCE["sx.var_read"] = lambda op, args, ctx: [list(ctx.vars[op.attrs["var"].name])]

# --- sx.var_assign / _add / _sub: replace, add to or subtract from the local copy -----------
_UPDATES = {"sx.var_assign": lambda old, v: v, "sx.var_assign_add": lambda old, v: old + v,
            "sx.var_assign_sub": lambda old, v: old - v}


def _lower_update(op, args, ctx):
    name = op.attrs["var"].name
    old = ctx.vars[name]
    ctx.vars[name] = _UPDATES[op.name](old, args[0]).astype(old.dtype).reshape(old.shape)
    return []


def _reference_update(op, args, ctx):
    name = op.attrs["var"].name
    olds = ctx.vars[name]
    ctx.vars[name] = [np.asarray(_UPDATES[op.name](o, v), dtype=np.asarray(o).dtype).reshape(np.shape(o))
                      for o, v in zip(olds, args[0])]
    return []


for _name in _UPDATES:
    declare(OpDef(_name, "Update a variable's local copy with a value.", num_operands=1,
                  num_results=0, attrs=("var", "ctx"), verify=_verify_var_op))
    LOWERINGS[_name] = _lower_update
    REFERENCE[_name] = _reference_update


# --- sx.broadcast: every replica gets replica `source`'s value ------------------------------
def _verify_broadcast(op: Operation) -> str | None:
    if not isinstance(op.attrs["source"], int) or op.attrs["source"] < 0:
        return "`source` must be a replica index"
    if not op.operands[0].type.same_tensor(op.results[0].type):
        return f"result type {op.results[0].type} differs from operand type {op.operands[0].type}"
    return None


declare(OpDef("sx.broadcast", "Every replica gets replica `source`'s value.", num_operands=1,
              num_results=1, attrs=("source", "reason"),
              locality=lambda op, locs: [Locality.MIRRORED], verify=_verify_broadcast,
              is_collective=True))


def _lower_broadcast(op, args, ctx):
    x = args[0]
    mine = lax.axis_index(ctx.axis_name) == op.attrs["source"]
    return [lax.psum(jnp.where(mine, x, jnp.zeros_like(x)), ctx.axis_name)]


LOWERINGS["sx.broadcast"] = _lower_broadcast
REFERENCE["sx.broadcast"] = lambda op, args, ctx: [[args[0][op.attrs["source"]]] * len(args[0])]
