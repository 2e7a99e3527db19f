"""Structured control flow kept as ops with regions: `jax.cond`, `jax.while`, `jax.scan`.

Regions are isolated: a region sees only its block arguments, which the op's operands feed
(the same operand layout as the JAX primitive). Lowering goes through `lax.switch`,
`lax.while_loop` and `lax.scan`, which trace each region under the current mesh context.
"""
from __future__ import annotations

import numpy as np
from jax import lax

from ..ir import Attr, Int, OpDef, Operation, declare, has_collective
from .registry import LOWERINGS, REFERENCE


def _verify_cond(op: Operation) -> str | None:
    if not op.regions:
        return "needs at least one branch"
    for i, b in enumerate(op.regions):
        if len(b.args) != len(op.operands) - 1 or len(b.results) != len(op.results):
            return f"branch {i} takes {len(b.args)} and yields {len(b.results)} values; expected {len(op.operands) - 1} and {len(op.results)}"
    return None


def _verify_while(op: Operation) -> str | None:
    if len(op.regions) != 2:
        return "needs a cond and a body region"
    cn, bn = op.attrs["cond_nconsts"], op.attrs["body_nconsts"]
    ncarry = len(op.operands) - cn - bn
    if ncarry != len(op.results) or len(op.regions[1].results) != ncarry:
        return "carry count disagrees between operands, body and results"
    return None


def _verify_scan(op: Operation) -> str | None:
    if len(op.regions) != 1:
        return "needs one body region"
    body = op.regions[0]
    if len(body.args) != len(op.operands) or len(body.results) != len(op.results):
        return "body signature disagrees with operands and results"
    return None


# The attributes are the primitive's parameters (the declared ones are checked; others, such
# as a scan's `linear`, pass through to the re-bound primitive).
declare(OpDef("jax.cond", "Run branch `index` (the first operand) on the other operands.",
              num_regions=None, attrs={}, open_attrs=True, verify=_verify_cond))
declare(OpDef("jax.while", "Loop the body region while the cond region yields true.",
              num_regions=2, attrs={"cond_nconsts": Int(0), "body_nconsts": Int(0)},
              open_attrs=True, verify=_verify_while))
declare(OpDef("jax.scan", "Loop the body over the leading axis of xs, threading a carry.",
              num_regions=1, attrs={"length": Int(0), "num_consts": Int(0), "num_carry": Int(0),
                                    "reverse": Attr("bool")},
              open_attrs=True, verify=_verify_scan))


def _lower_cond(op, args, ctx):
    branches = [lambda *a, b=b: tuple(ctx.run_block(b, list(a))) for b in op.regions]
    return list(lax.switch(args[0], branches, *args[1:]))


def _lower_while(op, args, ctx):
    cn, bn = op.attrs["cond_nconsts"], op.attrs["body_nconsts"]
    cconsts, bconsts, init = args[:cn], args[cn:cn + bn], args[cn + bn:]
    cond, body = op.regions
    out = lax.while_loop(lambda c: ctx.run_block(cond, [*cconsts, *c])[0],
                         lambda c: tuple(ctx.run_block(body, [*bconsts, *c])), tuple(init))
    return list(out)


def _lower_scan(op, args, ctx):
    nc, ncarry = op.attrs["num_consts"], op.attrs["num_carry"]
    consts, init, xs = args[:nc], args[nc:nc + ncarry], args[nc + ncarry:]
    body = op.regions[0]

    def step(carry, x):
        out = ctx.run_block(body, [*consts, *carry, *x])
        return tuple(out[:ncarry]), tuple(out[ncarry:])

    carry, ys = lax.scan(step, tuple(init), tuple(xs), length=op.attrs["length"],
                         reverse=op.attrs["reverse"], unroll=op.attrs.get("unroll", 1))
    return [*carry, *ys]


LOWERINGS.update({"jax.cond": _lower_cond, "jax.while": _lower_while, "jax.scan": _lower_scan})


# --- reference interpreter: replicas run in lockstep; where they diverge, each runs alone ---
def _require_uniform(op, blocks, uniform: bool):
    if not uniform and any(has_collective(b) for b in blocks):
        raise RuntimeError(
            f"{op.loc or op.name}: replicas take different paths through `{op.name}` whose body "
            "holds a collective; a real run would hang. Make the predicate mirrored.")


def _reference_cond(op, args, ctx):
    index = [int(i) for i in args[0]]
    _require_uniform(op, op.regions, len(set(index)) == 1)
    outs = [[None] * len(index) for _ in op.results]
    for branch in sorted(set(index)):
        pos = [r for r, i in enumerate(index) if i == branch]
        sub = ctx.subset(pos)
        res = sub.run_block(op.regions[branch], [[a[r] for r in pos] for a in args[1:]])
        for k, vals in enumerate(res):
            for r, v in zip(pos, vals):
                outs[k][r] = v
    return outs


def _reference_while(op, args, ctx):
    cn, bn = op.attrs["cond_nconsts"], op.attrs["body_nconsts"]
    cconsts, bconsts, state = args[:cn], args[cn:cn + bn], [list(a) for a in args[cn + bn:]]
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
        for k, vals in enumerate(new):
            for r, v in zip(active, vals):
                state[k][r] = v


def _reference_scan(op, args, ctx):
    nc, ncarry, length = op.attrs["num_consts"], op.attrs["num_carry"], op.attrs["length"]
    consts, carry, xs = args[:nc], args[nc:nc + ncarry], args[nc + ncarry:]
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
