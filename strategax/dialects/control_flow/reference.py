"""The region ops in the reference interpreter: replicas run in lockstep; where they diverge,
each runs alone (and a collective on a diverged path raises: a real run would hang)."""
from __future__ import annotations

import numpy as np

from ...ir import has_collective
from .operands import cond_operands, scan_operands, while_operands
from ..registry import REFERENCE


def _require_uniform(op, blocks, uniform: bool):
    if not uniform and any(has_collective(b) for b in blocks):
        raise RuntimeError(
            f"{op.loc or op.name}: replicas take different paths through `{op.name}` whose body "
            "holds a collective; a real run would hang. Make the predicate mirrored.")


def _reference_cond(op, args, ctx):
    (indices,), operands = cond_operands(op, args)
    index = [int(i) for i in indices]
    _require_uniform(op, op.regions, len(set(index)) == 1)
    outs = [[None] * len(index) for _ in op.results]
    for branch in sorted(set(index)):
        pos = [r for r, i in enumerate(index) if i == branch]
        sub = ctx.subset(pos)
        res = sub.run_block(op.regions[branch], [[a[r] for r in pos] for a in operands])
        ctx.merge(sub, pos)
        for k, vals in enumerate(res):
            for r, v in zip(pos, vals):
                outs[k][r] = v
    return outs


def _reference_while(op, args, ctx):
    cconsts, bconsts, init = while_operands(op, args)
    state = [list(a) for a in init]
    cond, body = op.regions
    n = len(state[0]) if state else ctx.num_replicas
    while True:
        preds = [bool(p) for p in ctx.run_block(cond, [*cconsts, *state])[0]]
        active = [r for r in range(n) if preds[r]]
        if not active:
            return state
        _require_uniform(op, [body], len(active) == n)
        sub = ctx.subset(active)
        new = sub.run_block(body, [[a[r] for r in active] for a in [*bconsts, *state]])
        ctx.merge(sub, active)
        for k, vals in enumerate(new):
            for r, v in zip(active, vals):
                state[k][r] = v


def _reference_scan(op, args, ctx):
    consts, carry, xs = scan_operands(op, args)
    ncarry, length = len(carry), op.attrs["length"]
    steps = range(length - 1, -1, -1) if op.attrs["reverse"] else range(length)
    ys_steps = {}
    for t in steps:
        x_t = [[np.asarray(x)[t] for x in per_rep] for per_rep in xs]
        out = ctx.run_block(op.regions[0], [*consts, *carry, *x_t])
        carry, ys_steps[t] = out[:ncarry], out[ncarry:]
    n_ys = len(op.results) - ncarry
    n = ctx.num_replicas
    ys = [[np.stack([np.asarray(ys_steps[t][k][r]) for t in range(length)]) if length else
           np.zeros(op.results[ncarry + k].type.shape, op.results[ncarry + k].type.dtype)
           for r in range(n)] for k in range(n_ys)]
    return [*carry, *ys]


REFERENCE.update({"jax.cond": _reference_cond, "jax.while": _reference_while,
                  "jax.scan": _reference_scan})
