"""The region ops lowered to `lax.switch` / `lax.while_loop` / `lax.scan`: each region traced
under the current mesh context, the variables it updates carried as extra operands and
results (restored after each region, so no region tracer leaks out)."""
from __future__ import annotations

from typing import Sequence

from jax import lax

from ...ir import Block
from .operands import cond_operands, scan_operands, while_operands, written
from ..registry import LOWERINGS


def _run_with_state(ctx, names: list[str], state: Sequence, block: Block, args: list) -> list:
    """Run `block` with variables `names` holding `state` (the region's carried values);
    returns its results followed by those variables' values after it. The outer values of
    `ctx.vars` are restored, so no region tracer leaks out."""
    saved = ctx.vars
    ctx.vars = {**saved, **dict(zip(names, state))}
    try:
        out = ctx.run_block(block, args)
        return [*out, *(ctx.vars[n] for n in names)]
    finally:
        ctx.vars = saved


def _split_last(values: Sequence, n: int) -> tuple[list, list]:
    """(all but the last n, the last n)."""
    k = len(values) - n
    return list(values[:k]), list(values[k:])


def _lower_cond(op, args, ctx):
    names = written(op)
    state = [ctx.vars[n] for n in names]

    def branch(block):
        def run(*a):
            operands, st = _split_last(a, len(names))
            return tuple(_run_with_state(ctx, names, st, block, operands))
        return run

    index, operands = cond_operands(op, args)
    outs, new = _split_last(lax.switch(index[0], [branch(b) for b in op.regions], *operands, *state), len(names))
    ctx.vars.update(zip(names, new))
    return outs


def _lower_while(op, args, ctx):
    names = written(op)
    cconsts, bconsts, init = while_operands(op, args)
    cond, body = op.regions

    def cond_fn(c):
        carry, st = _split_last(c, len(names))
        return _run_with_state(ctx, names, st, cond, [*cconsts, *carry])[0]

    def body_fn(c):
        carry, st = _split_last(c, len(names))
        return tuple(_run_with_state(ctx, names, st, body, [*bconsts, *carry]))

    out, new = _split_last(lax.while_loop(cond_fn, body_fn, (*init, *(ctx.vars[n] for n in names))), len(names))
    ctx.vars.update(zip(names, new))
    return out


def _lower_scan(op, args, ctx):
    names = written(op)
    consts, init, xs = scan_operands(op, args)
    ncarry, body = len(init), op.regions[0]

    def step(c, x):
        carry, st = _split_last(c, len(names))
        out, new = _split_last(_run_with_state(ctx, names, st, body, [*consts, *carry, *x]), len(names))
        return (*out[:ncarry], *new), tuple(out[ncarry:])

    carry, ys = lax.scan(step, (*init, *(ctx.vars[n] for n in names)), tuple(xs), length=op.attrs["length"],
                         reverse=op.attrs["reverse"], unroll=op.attrs.get("unroll", 1))
    carry, new = _split_last(carry, len(names))
    ctx.vars.update(zip(names, new))
    return [*carry, *ys]


LOWERINGS.update({"jax.cond": _lower_cond, "jax.while": _lower_while, "jax.scan": _lower_scan})


