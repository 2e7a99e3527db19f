"""cse: common subexpression elimination. Two ops with the same name, operands, attributes
and result types compute the same values; later ones reuse the first one's results. Ops with
regions or effects (a variable read or write) are left alone."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Block, Module, Value, is_pure
from .rewrite import all_blocks, op_key, replace_uses


def cse_block(block: Block) -> int:
    """Merge duplicate ops of `block` in place; returns how many were removed."""
    table: dict[tuple, list[Value]] = {}
    mapping: dict[int, Value] = {}
    kept = []
    for op in block.ops:
        if any(id(v) in mapping for v in op.operands):
            op.operands = [mapping.get(id(v), v) for v in op.operands]
        if op.regions or not is_pure(op):
            kept.append(op)
            continue
        key = op_key(op)
        first = table.get(key)
        if first is None:
            table[key] = op.results
            kept.append(op)
            continue
        for r, f in zip(op.results, first):
            mapping[id(r)] = f
    removed = len(block.ops) - len(kept)
    block.ops[:] = kept
    replace_uses(block, mapping)
    return removed


@dataclass(frozen=True)
class CommonSubexpressionElimination:
    """Reuse the first of several identical ops."""

    name: str = "cse"

    def apply(self, module: Module) -> Module:
        for block in all_blocks(module):
            cse_block(block)
        return module
