"""Where each row count is visible (threaded into regions as a new region constant), and step 2
of mask-padding: an all_gather along a row axis becomes an `sx.all_gather_real`."""
from __future__ import annotations

from ...ir import Block, Locality, Operation, TensorType, Value
from ..rewrite import BlockRewriter
from .rows import Rows


class Counts:
    """Where each row count is defined, and the region constants that carry it into regions."""

    def __init__(self, every: list[Block]):
        self.home: dict[Value, Block] = {}
        self.parent: dict[Block, tuple[Operation, Block]] = {}
        for b in every:
            self.home.update((a, b) for a in b.args)
            for op in b.ops:
                self.home.update((r, b) for r in op.results)
                self.parent.update((region, (op, b)) for region in op.regions)
        self.carried: dict[tuple[Block, Value], Value] = {}

    def visible(self, block: Block, count: Value) -> Value | None:
        """`count` as a value of `block`: itself, or a region constant threaded in from the block
        that defines it (None when that block does not enclose `block`)."""
        if self.home.get(count) is block:
            return count
        if (block, count) in self.carried:
            return self.carried[(block, count)]
        if block not in self.parent:
            return None
        op, outer = self.parent[block]
        outer_count = self.visible(outer, count)
        if outer_count is None:
            return None
        for region, arg in zip(op.regions, BlockRewriter(outer).add_region_const(op, outer_count)):
            self.carried[(region, count)] = arg
            self.home[arg] = region
        return self.carried[(block, count)]


def gather_real(every: list[Block], rows: Rows, num_replicas: int) -> bool:
    """Make each sx.all_gather along a row axis an sx.all_gather_real whose result is marked
    with the gathered real count; whether any was made."""
    threads, made = Counts(every), False
    for b in every:
        rw = BlockRewriter(b)
        for op in rw.ops():
            if op.name != "sx.all_gather":
                continue
            x, axis = op.operands[0], op.attrs["axis"]
            count = rows.of(x, axis)
            count = None if count is None else threads.visible(b, count)
            if count is None:
                continue
            real = Value(op.result.type.with_locality(Locality.MIRRORED))
            total = Value(TensorType((), count.type.dtype, Locality.MIRRORED))
            marked = Value(real.type)
            n = op.attrs.get("num_replicas", num_replicas)
            rw.replace(op, [marked])
            rw.insert_before(op, [
                Operation("sx.all_gather_real", [x, count], [real, total],
                          {"axis": axis, "num_replicas": n, "reason": op.attrs["reason"]}, loc=op.loc),
                Operation("sx.rows", [real, total], [marked], {"axis": axis} if axis else {}, loc=op.loc)])
            made = True
        rw.commit()
    return made
