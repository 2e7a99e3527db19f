"""dce: drop ops whose results nobody uses; ops that write (a variable update, or a region
holding one) always stay. What counts as a write is the op declaration's (`ir.may_write`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir import Block, Module, may_write
from .rewrite import BlockRewriter


def dce_block(block: Block) -> bool:
    """Erase the dead ops of `block` and, inside the ops that stay, of their regions."""
    rw = BlockRewriter(block)
    live = set(block.results)
    changed = False
    for op in reversed(block.ops):
        if live.isdisjoint(op.results) and not may_write(op):
            rw.erase(op)
            continue
        for region in op.regions:
            changed |= dce_block(region)
        live.update(op.operands)
    return rw.commit() or changed


@dataclass(frozen=True)
class DeadCodeElimination:
    """Remove ops whose results are unused."""

    name: ClassVar[str] = "dce"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        changed = False
        for f in module.funcs:
            changed |= dce_block(f.body)
        return changed
