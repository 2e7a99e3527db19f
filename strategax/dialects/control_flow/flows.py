"""How values flow through a region op (read by the analyses: rows, localities) and how a
pass adds a region constant: one `RegionOpFacts` record per op in `REGION_OPS`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...ir import Locality, Operation, Value
from .operands import cond_operands, scan_operands, while_operands

Flow = tuple[Value, Value, int]  # (source, target, shift)


def _cond_flows(op: Operation) -> list[Flow]:
    flows: list[Flow] = []
    for branch in op.regions:
        flows += [(x, a, 0) for x, a in zip(cond_operands(op).operands, branch.args)]
        flows += [(y, r, 0) for y, r in zip(branch.results, op.results)]
    return flows


def _while_flows(op: Operation, invariant_only: bool = False) -> list[Flow]:
    """Every edge of a while loop; `invariant_only`: the constants' and the carries' the body
    yields back unchanged (from the outer value alone)."""
    g, (cond, body) = while_operands(op), op.regions
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
    g, body = scan_operands(op), op.regions[0]
    nc, ncarry = len(g.consts), len(g.carry)
    flows: list[Flow] = [(x, a, 0) for x, a in zip(g.consts + g.carry, body.args)]
    for j, x in enumerate(g.carry):
        flows += [(x, op.results[j], 0), (body.results[j], body.args[nc + j], 0), (body.results[j], op.results[j], 0)]
    flows += [(x, a, 1) for x, a in zip(g.xs, body.args[nc + ncarry:])]
    flows += [(y, r, 1) for y, r in zip(body.results[ncarry:], op.results[ncarry:])]
    return flows


def _scan_axes(op: Operation) -> list[tuple[Value, int]]:
    g = scan_operands(op)
    return [(x, 0) for x in g.xs] + [(y, 0) for y in op.results[len(g.carry):]]


def _cond_add_const(op: Operation, value: Value) -> None:
    g = cond_operands(op)
    op.operands = [*g.index, value, *g.operands]


def _while_add_const(op: Operation, value: Value) -> None:
    g = while_operands(op)
    op.operands = [value, *g.cond_consts, value, *g.body_consts, *g.carry]
    op.attrs = {**op.attrs, "cond_nconsts": len(g.cond_consts) + 1, "body_nconsts": len(g.body_consts) + 1}


def _scan_add_const(op: Operation, value: Value) -> None:
    g = scan_operands(op)
    op.operands = [value, *g.consts, *g.carry, *g.xs]
    attrs = {**op.attrs, "num_consts": len(g.consts) + 1}
    if isinstance(attrs.get("linear"), tuple):
        attrs["linear"] = (False, *attrs["linear"])
    op.attrs = attrs


def _cond_invariants(op: Operation) -> list[Flow]:
    return [(x, a, 0) for branch in op.regions for x, a in zip(cond_operands(op).operands, branch.args)]


def _scan_invariants(op: Operation) -> list[Flow]:
    g, body = scan_operands(op), op.regions[0]
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
        _cond_flows, lambda op: (cond_operands(op).index[0], "a lax.cond/switch whose branch index"),
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


def flow_locality(op: Operation, localities) -> list[Locality]:
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


