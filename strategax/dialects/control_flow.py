"""Structured control flow kept as ops with regions: `jax.cond`, `jax.while`, `jax.scan`.

Regions are isolated: a region sees only its block arguments, which the op's operands feed
(the same operand layout as the JAX primitive), and the module's variables, which its ops
name by symbol as anywhere else. The variables the regions update are the op's carried
state, listed in its `writes` attribute (`jax.while {..., writes = (@w, @b)}`; the verifier
checks the list): lowered, their current values enter `lax.switch` / `lax.while_loop` /
`lax.scan` as extra operands and carries and come back as extra results, so every update
inside a region, once per iteration, reaches the variable. Lowering traces each region under
the current mesh context.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from jax import lax

from ..ir import (WRITES_VARIABLE, Attr, Block, Int, Locality, OpDef, Operation, SymbolRef, Value,
                  TensorType, declare, has_collective, lookup)
from .registry import LOWERINGS, REFERENCE


def region_writes(regions: Sequence[Block]) -> tuple[SymbolRef, ...]:
    """The variables the ops of `regions` (nested regions included) update, in first-update order."""
    seen: dict[str, SymbolRef] = {}
    for region in regions:
        for op in region.walk():
            ref = op.attrs.get("var")
            opdef = lookup(op.name)
            if (isinstance(ref, SymbolRef) and opdef is not None and WRITES_VARIABLE in opdef.effects
                    and ref.name not in seen):
                seen[ref.name] = ref
    return tuple(seen.values())


def _written(op: Operation) -> list[str]:
    return [ref.name for ref in op.attrs.get("writes", ())]


def _check_writes(verify: Callable[[Operation], str | None]) -> Callable[[Operation], str | None]:
    """`verify`, then: `writes` names exactly the variables the regions update."""
    def check(op: Operation) -> str | None:
        problem = verify(op)
        if problem:
            return problem
        declared, actual = tuple(op.attrs.get("writes", ())), region_writes(op.regions)
        if len(set(declared)) != len(declared) or set(declared) != set(actual):
            names = ", ".join(f"@{r.name}" for r in actual) or "none"
            return f"its regions update {names}; `writes` must list exactly those variables"
        return None
    return check


def _mismatch(what: str, got: Sequence, want: Sequence) -> str | None:
    """Why tensor types `got` (of `what`) are not `want` (shapes and dtypes), or None."""
    if len(got) != len(want):
        return f"{what}: {len(got)} values, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{what}: value {k} is {g}, expected {w.with_locality(None).with_sharding(None)}"
    return None


def _types(values) -> list:
    return [v.type for v in values]


def _verify_cond(op: Operation) -> str | None:
    if not op.regions or not op.operands:
        return "needs a branch index operand and at least one branch"
    index = op.operands[0].type
    if index.shape != () or index.dtype.kind not in "iu":
        return f"the branch index is {index}; it must be an integer scalar"
    for i, b in enumerate(op.regions):
        problem = (_mismatch(f"branch {i}'s arguments", _types(b.args), _types(op.operands[1:]))
                   or _mismatch(f"branch {i}'s yield", _types(b.results), _types(op.results)))
        if problem:
            return problem
    return None


def _verify_while(op: Operation) -> str | None:
    if len(op.regions) != 2:
        return "needs a cond and a body region"
    cn, bn = op.attrs["cond_nconsts"], op.attrs["body_nconsts"]
    if cn + bn > len(op.operands):
        return f"has {len(op.operands)} operands, fewer than cond_nconsts + body_nconsts"
    consts, carry = _types(op.operands[:cn + bn]), _types(op.operands[cn + bn:])
    cond, body = op.regions
    problem = (_mismatch("the cond region's arguments", _types(cond.args), consts[:cn] + carry)
               or _mismatch("the body region's arguments", _types(body.args), consts[cn:] + carry)
               or _mismatch("the body region's yield", _types(body.results), carry)
               or _mismatch("the results", _types(op.results), carry))
    if problem:
        return problem
    if len(cond.results) != 1 or cond.results[0].type.shape != () or cond.results[0].type.dtype != np.bool_:
        return "the cond region must yield one bool[]"
    return None


def _verify_scan(op: Operation) -> str | None:
    if len(op.regions) != 1:
        return "needs one body region"
    nc, ncarry, length = op.attrs["num_consts"], op.attrs["num_carry"], op.attrs["length"]
    if nc + ncarry > len(op.operands) or ncarry > len(op.results):
        return "num_consts and num_carry count more values than the operands or results hold"
    body, operands = op.regions[0], _types(op.operands)
    xs = operands[nc + ncarry:]
    for k, x in enumerate(xs):
        if not x.shape or x.shape[0] != length:
            return f"scanned operand {k} is {x}; its leading dimension must be the length, {length}"
    slices = [TensorType(x.shape[1:], x.dtype) for x in xs]
    problem = (_mismatch("the body's arguments", _types(body.args), operands[:nc + ncarry] + slices)
               or _mismatch("the body's yielded carry", _types(body.results[:ncarry]), operands[nc:nc + ncarry])
               or _mismatch("the carried results", _types(op.results[:ncarry]), operands[nc:nc + ncarry]))
    if problem:
        return problem
    stacked = [TensorType((length, *y.type.shape), y.type.dtype) for y in body.results[ncarry:]]
    return _mismatch("the stacked results", _types(op.results[ncarry:]), stacked)


# --- how values flow through a region op (read by the analyses: rows, localities) ----------
def region_flows(op: Operation) -> list[tuple[Value, Value, int]]:
    """Every edge along which `op` passes a value on, as (source, target, shift): an operand to
    the region argument it feeds, a region's result to the op result it becomes and, in a loop,
    to the next iteration's argument. Axis k of the region-side value is axis k + shift of the
    outer one (shift 1 for a scan's xs and ys, whose leading axis is the scanned one)."""
    flows: list[tuple[Value, Value, int]] = []
    if op.name == "jax.cond":
        for branch in op.regions:
            flows += [(x, a, 0) for x, a in zip(op.operands[1:], branch.args)]
            flows += [(y, r, 0) for y, r in zip(branch.results, op.results)]
    elif op.name == "jax.while":
        cn, bn = op.attrs["cond_nconsts"], op.attrs["body_nconsts"]
        cond, body = op.regions
        flows += [(x, a, 0) for x, a in zip(op.operands[:cn], cond.args[:cn])]
        flows += [(x, a, 0) for x, a in zip(op.operands[cn:cn + bn], body.args[:bn])]
        for j, x in enumerate(op.operands[cn + bn:]):
            for source in (x, body.results[j]):
                flows += [(source, cond.args[cn + j], 0), (source, body.args[bn + j], 0),
                          (source, op.results[j], 0)]
    elif op.name == "jax.scan":
        nc, ncarry = op.attrs["num_consts"], op.attrs["num_carry"]
        body = op.regions[0]
        flows += [(x, a, 0) for x, a in zip(op.operands[:nc + ncarry], body.args[:nc + ncarry])]
        for j in range(ncarry):
            flows += [(op.operands[nc + j], op.results[j], 0), (body.results[j], body.args[nc + j], 0),
                      (body.results[j], op.results[j], 0)]
        flows += [(x, a, 1) for x, a in zip(op.operands[nc + ncarry:], body.args[nc + ncarry:])]
        flows += [(y, r, 1) for y, r in zip(body.results[ncarry:], op.results[ncarry:])]
    return flows


def branch_predicate(op: Operation) -> tuple[Value, str] | None:
    """The value that decides which path replicas take through `op`'s regions (a cond's index,
    a while's condition) and what it is, in the user's words; None for a scan or another op."""
    if op.name == "jax.cond":
        return op.operands[0], "a lax.cond/switch whose branch index"
    if op.name == "jax.while":
        return op.regions[0].results[0], "a lax.while_loop whose condition"
    return None


def _flow_locality(op: Operation, localities) -> list[Locality]:
    """Each result joins what flows into it (its loop carry's initial value, what the regions
    yield for it); a per-replica predicate makes every result per-replica."""
    predicate = branch_predicate(op)
    if predicate is not None and predicate[0].type.locality is Locality.PER_REPLICA:
        return [Locality.PER_REPLICA] * len(op.results)
    joined = {r: Locality.MIRRORED for r in op.results}
    for src, dst, _ in region_flows(op):
        if dst in joined:
            joined[dst] = joined[dst].join(src.type.locality or Locality.MIRRORED)
    return [joined[r] for r in op.results]


def scanned_axes(op: Operation) -> list[tuple[Value, int]]:
    """The outer axes a loop steps along (a scan's xs and ys, axis 0): a row axis there would
    be iterated row by row."""
    if op.name != "jax.scan":
        return []
    nc, ncarry = op.attrs["num_consts"], op.attrs["num_carry"]
    return [(x, 0) for x in op.operands[nc + ncarry:]] + [(y, 0) for y in op.results[ncarry:]]


def add_const(op: Operation, value: Value) -> list[Value]:
    """Make outer `value` visible inside every region of `op` as a new first argument (a loop
    constant, a branch operand); returns those arguments, one per region."""
    new = [Value(value.type.with_sharding(None)) for _ in op.regions]
    if op.name == "jax.cond":
        op.operands.insert(1, value)
    elif op.name == "jax.while":
        cn = op.attrs["cond_nconsts"]
        op.operands[cn:cn] = [value]
        op.operands.insert(0, value)
        op.attrs = {**op.attrs, "cond_nconsts": cn + 1, "body_nconsts": op.attrs["body_nconsts"] + 1}
    elif op.name == "jax.scan":
        op.operands.insert(0, value)
        attrs = {**op.attrs, "num_consts": op.attrs["num_consts"] + 1}
        if isinstance(attrs.get("linear"), tuple):
            attrs["linear"] = (False, *attrs["linear"])
        op.attrs = attrs
    else:
        raise ValueError(f"internal error: {op.name} has no region constants")
    for region, arg in zip(op.regions, new):
        region.args.insert(0, arg)
    return new


# The attributes are the primitive's parameters (the declared ones are checked; others, such
# as a scan's `linear`, pass through to the re-bound primitive), plus `writes`.
_WRITES = {"writes": Attr("symbols", required=False)}
declare(OpDef("jax.cond", "Run branch `index` (the first operand) on the other operands.",
              num_regions=None, attrs=_WRITES, open_attrs=True, verify=_check_writes(_verify_cond),
              locality=_flow_locality))
declare(OpDef("jax.while", "Loop the body region while the cond region yields true.",
              num_regions=2, attrs={"cond_nconsts": Int(0), "body_nconsts": Int(0), **_WRITES},
              open_attrs=True, verify=_check_writes(_verify_while), locality=_flow_locality))


def scan_layout(params: dict) -> dict:
    """`num_consts` and `num_carry` from a scan's JAX parameters: JAX 0.10 has them; JAX 0.11
    says the layout as `ft_in`, a flat tree (consts, carry, xs) of the operands."""
    if "num_carry" in params or "ft_in" not in params:
        return {}
    consts, carry, _ = params["ft_in"].unpack()  # a tuple of three, or a pytree of three (after AD)
    return {"num_consts": len(consts), "num_carry": len(carry)}


declare(OpDef("jax.scan", "Loop the body over the leading axis of xs, threading a carry.",
              num_regions=1, attrs={"length": Int(0), "num_consts": Int(0), "num_carry": Int(0),
                                    "reverse": Attr("bool"), **_WRITES},
              open_attrs=True, verify=_check_writes(_verify_scan), locality=_flow_locality))


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


def _split(values: Sequence, n: int) -> tuple[list, list]:
    """(all but the last n, the last n)."""
    k = len(values) - n
    return list(values[:k]), list(values[k:])


def _lower_cond(op, args, ctx):
    names = _written(op)
    state = [ctx.vars[n] for n in names]

    def branch(block):
        def run(*a):
            operands, st = _split(a, len(names))
            return tuple(_run_with_state(ctx, names, st, block, operands))
        return run

    outs, new = _split(lax.switch(args[0], [branch(b) for b in op.regions], *args[1:], *state), len(names))
    ctx.vars.update(zip(names, new))
    return outs


def _lower_while(op, args, ctx):
    names = _written(op)
    cn, bn = op.attrs["cond_nconsts"], op.attrs["body_nconsts"]
    cconsts, bconsts, init = args[:cn], args[cn:cn + bn], args[cn + bn:]
    cond, body = op.regions

    def cond_fn(c):
        carry, st = _split(c, len(names))
        return _run_with_state(ctx, names, st, cond, [*cconsts, *carry])[0]

    def body_fn(c):
        carry, st = _split(c, len(names))
        return tuple(_run_with_state(ctx, names, st, body, [*bconsts, *carry]))

    out, new = _split(lax.while_loop(cond_fn, body_fn, (*init, *(ctx.vars[n] for n in names))), len(names))
    ctx.vars.update(zip(names, new))
    return out


def _lower_scan(op, args, ctx):
    names = _written(op)
    nc, ncarry = op.attrs["num_consts"], op.attrs["num_carry"]
    consts, init, xs = args[:nc], args[nc:nc + ncarry], args[nc + ncarry:]
    body = op.regions[0]

    def step(c, x):
        carry, st = _split(c, len(names))
        out, new = _split(_run_with_state(ctx, names, st, body, [*consts, *carry, *x]), len(names))
        return (*out[:ncarry], *new), tuple(out[ncarry:])

    carry, ys = lax.scan(step, (*init, *(ctx.vars[n] for n in names)), tuple(xs), length=op.attrs["length"],
                         reverse=op.attrs["reverse"], unroll=op.attrs.get("unroll", 1))
    carry, new = _split(carry, len(names))
    ctx.vars.update(zip(names, new))
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
        ctx.merge(sub, pos)
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
        ctx.merge(sub, active)
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
