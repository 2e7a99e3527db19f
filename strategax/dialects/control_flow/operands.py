"""The operand layout of the region ops (`jax.cond`, `jax.while`, `jax.scan`: JAX's own), the
one place that knows it, and the variables their regions update (their `writes`)."""
from __future__ import annotations

from typing import NamedTuple, Sequence

from ...ir import WRITES_VARIABLE, Block, Operation, SymbolRef, lookup


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


def written(op: Operation) -> list[str]:
    """The names of the variables `op`'s `writes` lists (its regions' carried state)."""
    return [ref.name for ref in op.attrs.get("writes", ())]


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


def cond_operands(op: Operation, values: Sequence | None = None) -> CondOperands:
    """`operand_groups` of a `jax.cond`."""
    g = operand_groups(op, values)
    assert isinstance(g, CondOperands)
    return g


def while_operands(op: Operation, values: Sequence | None = None) -> WhileOperands:
    """`operand_groups` of a `jax.while`."""
    g = operand_groups(op, values)
    assert isinstance(g, WhileOperands)
    return g


def scan_operands(op: Operation, values: Sequence | None = None) -> ScanOperands:
    """`operand_groups` of a `jax.scan`."""
    g = operand_groups(op, values)
    assert isinstance(g, ScanOperands)
    return g


