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

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

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


# --- each op's operand layout (JAX's): the one place that knows it -------------------------
class CondOperands(NamedTuple):
    index: list  # [the branch index]
    operands: list  # what every branch's arguments take


class WhileOperands(NamedTuple):
    cond_consts: list  # the cond region's constants
    body_consts: list  # the body region's constants
    carry: list  # the loop carry's initial values (the results' layout)


class ScanOperands(NamedTuple):
    consts: list  # the body's constants
    carry: list  # the carry's initial values (the first results)
    xs: list  # the scanned values, stepped along their leading axis (the rest of the results: ys)


def split_list(values: Sequence, sizes: Sequence[int]) -> list[list]:
    """`values` cut into pieces of `sizes`, and the rest (JAX's `split_list`)."""
    out, start = [], 0
    for n in sizes:
        out.append(list(values[start:start + n]))
        start += n
    return [*out, list(values[start:])]


def operand_groups(op: Operation, values: Sequence | None = None) -> CondOperands | WhileOperands | ScanOperands:
    """`op`'s operands by role (or `values` laid out like them: lowering's and the reference
    interpreter's arguments). Every reader of a region op's operands goes through this."""
    values = op.operands if values is None else values
    if op.name == "jax.cond":
        return CondOperands(*split_list(values, [1]))
    if op.name == "jax.while":
        return WhileOperands(*split_list(values, [op.attrs["cond_nconsts"], op.attrs["body_nconsts"]]))
    if op.name == "jax.scan":
        return ScanOperands(*split_list(values, [op.attrs["num_consts"], op.attrs["num_carry"]]))
    raise ValueError(f"internal error: {op.name} has no region operand layout")


def _verify_cond(op: Operation) -> str | None:
    if not op.regions or not op.operands:
        return "needs a branch index operand and at least one branch"
    index = op.operands[0].type
    if index.shape != () or index.dtype.kind not in "iu":
        return f"the branch index is {index}; it must be an integer scalar"
    operands = _types(_cond_operands(op).operands)
    for i, b in enumerate(op.regions):
        problem = (_mismatch(f"branch {i}'s arguments", _types(b.args), operands)
                   or _mismatch(f"branch {i}'s yield", _types(b.results), _types(op.results)))
        if problem:
            return problem
    return None


def _verify_while(op: Operation) -> str | None:
    if len(op.regions) != 2:
        return "needs a cond and a body region"
    if op.attrs["cond_nconsts"] + op.attrs["body_nconsts"] > len(op.operands):
        return f"has {len(op.operands)} operands, fewer than cond_nconsts + body_nconsts"
    g = _while_operands(op)
    carry = _types(g.carry)
    cond, body = op.regions
    problem = (_mismatch("the cond region's arguments", _types(cond.args), _types(g.cond_consts) + carry)
               or _mismatch("the body region's arguments", _types(body.args), _types(g.body_consts) + carry)
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
    ncarry, length = op.attrs["num_carry"], op.attrs["length"]
    if op.attrs["num_consts"] + ncarry > len(op.operands) or ncarry > len(op.results):
        return "num_consts and num_carry count more values than the operands or results hold"
    body, g = op.regions[0], _scan_operands(op)
    consts, carry, xs = _types(g.consts), _types(g.carry), _types(g.xs)
    for k, x in enumerate(xs):
        if not x.shape or x.shape[0] != length:
            return f"scanned operand {k} is {x}; its leading dimension must be the length, {length}"
    slices = [TensorType(x.shape[1:], x.dtype) for x in xs]
    problem = (_mismatch("the body's arguments", _types(body.args), consts + carry + slices)
               or _mismatch("the body's yielded carry", _types(body.results[:ncarry]), carry)
               or _mismatch("the carried results", _types(op.results[:ncarry]), carry))
    if problem:
        return problem
    stacked = [TensorType((length, *y.type.shape), y.type.dtype) for y in body.results[ncarry:]]
    return _mismatch("the stacked results", _types(op.results[ncarry:]), stacked)


# --- how values flow through a region op (read by the analyses: rows, localities) ----------
Flow = tuple[Value, Value, int]  # (source, target, shift)


def _cond_operands(op: Operation, values: Sequence | None = None) -> CondOperands:
    g = operand_groups(op, values)
    assert isinstance(g, CondOperands)
    return g


def _while_operands(op: Operation, values: Sequence | None = None) -> WhileOperands:
    g = operand_groups(op, values)
    assert isinstance(g, WhileOperands)
    return g


def _scan_operands(op: Operation, values: Sequence | None = None) -> ScanOperands:
    g = operand_groups(op, values)
    assert isinstance(g, ScanOperands)
    return g


def _cond_flows(op: Operation) -> list[Flow]:
    flows: list[Flow] = []
    for branch in op.regions:
        flows += [(x, a, 0) for x, a in zip(_cond_operands(op).operands, branch.args)]
        flows += [(y, r, 0) for y, r in zip(branch.results, op.results)]
    return flows


def _while_flows(op: Operation, invariant_only: bool = False) -> list[Flow]:
    """Every edge of a while loop; `invariant_only`: the constants' and the carries' the body
    yields back unchanged (from the outer value alone)."""
    g, (cond, body) = _while_operands(op), op.regions
    cn, bn = len(g.cond_consts), len(g.body_consts)
    flows: list[Flow] = [(x, a, 0) for x, a in zip(g.cond_consts, cond.args)]
    flows += [(x, a, 0) for x, a in zip(g.body_consts, body.args)]
    for j, x in enumerate(g.carry):
        if invariant_only and body.results[j] is not body.args[bn + j]:
            continue
        for source in (x,) if invariant_only else (x, body.results[j]):
            flows += [(source, cond.args[cn + j], 0), (source, body.args[bn + j], 0), (source, op.results[j], 0)]
    return flows


def _scan_flows(op: Operation) -> list[Flow]:
    g, body = _scan_operands(op), op.regions[0]
    nc, ncarry = len(g.consts), len(g.carry)
    flows: list[Flow] = [(x, a, 0) for x, a in zip(g.consts + g.carry, body.args)]
    for j, x in enumerate(g.carry):
        flows += [(x, op.results[j], 0), (body.results[j], body.args[nc + j], 0), (body.results[j], op.results[j], 0)]
    flows += [(x, a, 1) for x, a in zip(g.xs, body.args[nc + ncarry:])]
    flows += [(y, r, 1) for y, r in zip(body.results[ncarry:], op.results[ncarry:])]
    return flows


def _scan_axes(op: Operation) -> list[tuple[Value, int]]:
    g = _scan_operands(op)
    return [(x, 0) for x in g.xs] + [(y, 0) for y in op.results[len(g.carry):]]


def _cond_add_const(op: Operation, value: Value) -> None:
    g = _cond_operands(op)
    op.operands = [*g.index, value, *g.operands]


def _while_add_const(op: Operation, value: Value) -> None:
    g = _while_operands(op)
    op.operands = [value, *g.cond_consts, value, *g.body_consts, *g.carry]
    op.attrs = {**op.attrs, "cond_nconsts": len(g.cond_consts) + 1, "body_nconsts": len(g.body_consts) + 1}


def _scan_add_const(op: Operation, value: Value) -> None:
    g = _scan_operands(op)
    op.operands = [value, *g.consts, *g.carry, *g.xs]
    attrs = {**op.attrs, "num_consts": len(g.consts) + 1}
    if isinstance(attrs.get("linear"), tuple):
        attrs["linear"] = (False, *attrs["linear"])
    op.attrs = attrs


def _cond_invariants(op: Operation) -> list[Flow]:
    return [(x, a, 0) for branch in op.regions for x, a in zip(_cond_operands(op).operands, branch.args)]


def _scan_invariants(op: Operation) -> list[Flow]:
    g, body = _scan_operands(op), op.regions[0]
    nc = len(g.consts)
    pairs: list[Flow] = [(x, a, 0) for x, a in zip(g.consts, body.args)]
    for j, x in enumerate(g.carry):
        if body.results[j] is body.args[nc + j]:
            pairs += [(x, body.args[nc + j], 0), (x, op.results[j], 0)]
    return pairs


@dataclass(frozen=True)
class RegionOpFacts:
    """What the analyses and rewrites ask of one region op, in one record per op."""

    flows: Callable[[Operation], list[Flow]]  # see region_flows
    predicate: Callable[[Operation], tuple[Value, str] | None]  # see branch_predicate
    scanned: Callable[[Operation], list[tuple[Value, int]]]  # see scanned_axes
    add_const: Callable[[Operation, Value], None]  # the operand of a new region constant
    invariants: Callable[[Operation], list[Flow]]  # see invariant_flows


REGION_OPS: dict[str, RegionOpFacts] = {
    "jax.cond": RegionOpFacts(
        _cond_flows, lambda op: (_cond_operands(op).index[0], "a lax.cond/switch whose branch index"),
        lambda op: [], _cond_add_const, _cond_invariants),
    "jax.while": RegionOpFacts(
        _while_flows, lambda op: (op.regions[0].results[0], "a lax.while_loop whose condition"),
        lambda op: [], _while_add_const, lambda op: _while_flows(op, invariant_only=True)),
    "jax.scan": RegionOpFacts(_scan_flows, lambda op: None, _scan_axes, _scan_add_const, _scan_invariants),
}


def region_flows(op: Operation) -> list[Flow]:
    """Every edge along which `op` passes a value on, as (source, target, shift): an operand to
    the region argument it feeds, a region's result to the op result it becomes and, in a loop,
    to the next iteration's argument. Axis k of the region-side value is axis k + shift of the
    outer one (shift 1 for a scan's xs and ys, whose leading axis is the scanned one)."""
    facts = REGION_OPS.get(op.name)
    return facts.flows(op) if facts is not None else []


def invariant_flows(op: Operation) -> list[Flow]:
    """The region arguments (and results) of `op` that hold one outer value in every branch and
    on every iteration, as (outer value, region argument or result, 0): a cond's operands, a
    loop's constants, a loop carry its body yields back unchanged. What an analysis may fold
    through a region (a loop-body constant is the enclosing block's value); a carry the body
    changes is not one."""
    facts = REGION_OPS.get(op.name)
    return facts.invariants(op) if facts is not None else []


def branch_predicate(op: Operation) -> tuple[Value, str] | None:
    """The value that decides which path replicas take through `op`'s regions (a cond's index,
    a while's condition) and what it is, in the user's words; None for a scan or another op."""
    facts = REGION_OPS.get(op.name)
    return facts.predicate(op) if facts is not None else None


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
    facts = REGION_OPS.get(op.name)
    return facts.scanned(op) if facts is not None else []


def add_const(op: Operation, value: Value) -> list[Value]:
    """Make outer `value` visible inside every region of `op` as a new first argument (a loop
    constant, a branch operand); returns those arguments, one per region. Passes call it through
    their block's rewriter (`BlockRewriter.add_region_const`)."""
    facts = REGION_OPS.get(op.name)
    if facts is None:
        raise ValueError(f"internal error: {op.name} has no region constants")
    new = [Value(value.type.with_sharding(None)) for _ in op.regions]
    facts.add_const(op, value)
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


def _split_last(values: Sequence, n: int) -> tuple[list, list]:
    """(all but the last n, the last n)."""
    k = len(values) - n
    return list(values[:k]), list(values[k:])


def _lower_cond(op, args, ctx):
    names = _written(op)
    state = [ctx.vars[n] for n in names]

    def branch(block):
        def run(*a):
            operands, st = _split_last(a, len(names))
            return tuple(_run_with_state(ctx, names, st, block, operands))
        return run

    index, operands = _cond_operands(op, args)
    outs, new = _split_last(lax.switch(index[0], [branch(b) for b in op.regions], *operands, *state), len(names))
    ctx.vars.update(zip(names, new))
    return outs


def _lower_while(op, args, ctx):
    names = _written(op)
    cconsts, bconsts, init = _while_operands(op, args)
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
    names = _written(op)
    consts, init, xs = _scan_operands(op, args)
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


# --- reference interpreter: replicas run in lockstep; where they diverge, each runs alone ---
def _require_uniform(op, blocks, uniform: bool):
    if not uniform and any(has_collective(b) for b in blocks):
        raise RuntimeError(
            f"{op.loc or op.name}: replicas take different paths through `{op.name}` whose body "
            "holds a collective; a real run would hang. Make the predicate mirrored.")


def _reference_cond(op, args, ctx):
    (indices,), operands = _cond_operands(op, args)
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
    cconsts, bconsts, init = _while_operands(op, args)
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
    consts, carry, xs = _scan_operands(op, args)
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
