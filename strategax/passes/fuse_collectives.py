"""fuse-collectives: pack all_reduces of one reduce op and dtype into buckets.

In program order, an all_reduce joins the open bucket of its (op, dtype, bytes_per_pack) group
unless it would take the bucket past `bytes_per_pack` (then the bucket closes; a tensor larger
than the limit is a bucket of its own) — TensorFlow's packing rule. `bytes_per_pack` comes
from the op's attribute (set from `CommunicationOptions`), else from the pass option; 0 packs
a whole group into one bucket. A tensor that depends on an open bucket's result closes that
bucket, so every bucket can run where its last member was. Buckets of two or more become one
`sx.all_reduce_bucket`; the ops that used a member's result move after it. Values split over
logical devices are not packed (run after `propagate-sharding`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Block, Module, Operation, Value
from .rewrite import all_blocks, replace_uses, topological_sort


class _Bucket:
    __slots__ = ("index", "members", "nbytes", "open")

    def __init__(self, index: int):
        self.index, self.members, self.nbytes, self.open = index, [], 0, True


def _packable(v: Value) -> bool:
    """Values split over (or placed on) logical devices stay separate: a flat concatenation
    would gather their pieces first."""
    s = v.type.sharding
    return s is None or s.kind == "replicated" or (s.kind == "split" and not s.used_axes)


def plan_buckets(block: Block, default_bytes_per_pack: int = 0) -> list[list[Operation]]:
    """The buckets of `block`'s all_reduces, each a list of ops in program order."""
    current: dict[tuple, _Bucket] = {}
    buckets: list[_Bucket] = []
    depends: dict[int, frozenset] = {}  # value id -> buckets (by index) it depends on
    for op in block.ops:
        deps = frozenset()
        for v in op.operands:
            d = depends.get(id(v))
            if d:
                deps |= d
        if op.name == "sx.all_reduce" and _packable(op.result):
            for i in deps:  # a member must not wait on an open bucket's result
                buckets[i].open = False
            limit = int(op.attrs.get("bytes_per_pack", default_bytes_per_pack) or 0)
            size = op.result.type.nbytes
            key = (op.attrs["op"], op.result.type.dtype, limit)
            b = current.get(key)
            if b is None or not b.open or (limit and b.nbytes + size > limit):
                if b is not None:
                    b.open = False
                b = current[key] = _Bucket(len(buckets))
                buckets.append(b)
            b.members.append(op)
            b.nbytes += size
            deps = deps | {b.index}
        if deps:
            live = frozenset(i for i in deps if buckets[i].open)
            if live:
                for r in op.results:
                    depends[id(r)] = live
    return [b.members for b in buckets]


def _bucket_op(members: list[Operation]) -> tuple[Operation, dict[int, Value]]:
    first = members[0]
    results = [Value(m.result.type, m.result.name) for m in members]
    reasons = [m.attrs.get("reason", "") for m in members]
    locs = [str(m.loc) if m.loc else "?" for m in members]
    size = sum(r.type.nbytes for r in results)
    attrs = {"op": first.attrs["op"], "reason": f"fuse-collectives: {len(members)} tensors, {size} bytes",
             "reasons": reasons, "locs": locs}
    if "bytes_per_pack" in first.attrs:
        attrs["bytes_per_pack"] = first.attrs["bytes_per_pack"]
    op = Operation("sx.all_reduce_bucket", [m.operands[0] for m in members], results, attrs,
                   loc=members[-1].loc)
    return op, {id(m.result): r for m, r in zip(members, results)}


def fuse_block(block: Block, default_bytes_per_pack: int = 0) -> int:
    """Fuse `block`'s all_reduces in place; returns how many buckets were made."""
    plan = [b for b in plan_buckets(block, default_bytes_per_pack) if len(b) > 1]
    if not plan:
        return 0
    at_last: dict[int, Operation] = {}
    dropped: set[int] = set()
    mapping: dict[int, Value] = {}
    for members in plan:
        op, m = _bucket_op(members)
        mapping.update(m)
        at_last[id(members[-1])] = op
        dropped.update(id(x) for x in members)
    block.ops[:] = [at_last.get(id(op), op) for op in block.ops
                    if id(op) not in dropped or id(op) in at_last]
    replace_uses(block, mapping)
    topological_sort(block)
    return len(plan)


@dataclass(frozen=True)
class FuseCollectives:
    """Pack all_reduces of one op and dtype into buckets of at most `bytes_per_pack` bytes."""

    name: str = "fuse-collectives"
    bytes_per_pack: int = 0  # for all_reduces without their own attribute; 0: one bucket per group

    def apply(self, module: Module) -> Module:
        for block in all_blocks(module):
            fuse_block(block, self.bytes_per_pack)
        return module
