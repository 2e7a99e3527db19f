"""cse: common subexpression elimination. Two ops with the same name, operands, attributes
and result types compute the same values; later ones reuse the first one's results. Ops with
regions or effects (a variable read or write) are left alone."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir import Module, Value, is_pure
from .rewrite import BlockRewriter, op_key, rewrite_blocks


def cse_block(rw: BlockRewriter) -> None:
    """Merge the duplicate ops of `rw`'s block."""
    first: dict[tuple, list[Value]] = {}
    for op in rw.ops():
        if op.regions or not is_pure(op):
            continue
        earlier = first.setdefault(op_key(op), op.results)
        if earlier is not op.results:
            rw.replace(op, earlier)


@dataclass(frozen=True)
class CommonSubexpressionElimination:
    """Reuse the first of several identical ops."""

    name: ClassVar[str] = "cse"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        return rewrite_blocks(module, cse_block)
