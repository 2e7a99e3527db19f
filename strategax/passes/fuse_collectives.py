"""fuse-collectives: pack all_reduces of one reduce op and dtype into buckets.

In program order, an all_reduce joins the open bucket of its (op, dtype, bytes_per_pack) group
unless it would take the bucket past `bytes_per_pack` (then the bucket closes; a tensor larger
than the limit is a bucket of its own) — TensorFlow's packing rule. `bytes_per_pack` comes
from the op's attribute (set from `CommunicationOptions`), else from the pass option; 0 in
either means DEFAULT_BYTES_PER_PACK, strategax's choice (TensorFlow's 0: "chosen
automatically"). A tensor that depends on an open bucket's result closes that bucket, so
every bucket can run where its last member was; so does one that follows, through ops with
effects (whose order is kept), a write of a member's result (a variable's aggregated update
read back). Buckets of two or more become one `sx.all_reduce_bucket`; the ops that used a
member's result move after it. Values split over logical devices are not packed (run after
`propagate-sharding`). Reduce-scatters (a sharded optimizer's gradients,
`shard-optimizer-state`) are packed the same way, by their operands' padded bytes, into
`sx.reduce_scatter_bucket`s.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir import Block, Module, Operation, Value, has_effects
from .rewrite import BlockRewriter, rewrite_blocks

# The default bucket: measured on a flax Transformer LM (docs/performance.md, issue 36), one
# buffer of every gradient made XLA compile 1.4-3x slower than jax.jit's per-tensor pmean (a
# concatenation and a slice per member), while 64 KiB buckets compile as fast and run the step
# as fast: small tensors share a bucket (fewer collectives than one per tensor), and a tensor
# above 64 KiB is reduced on its own, as jax.jit's pmean does. One buffer: a bytes_per_pack at
# least the model's gradient bytes.
DEFAULT_BYTES_PER_PACK = 64 * 1024


_FUSED = {"sx.all_reduce": "sx.all_reduce_bucket", "sx.reduce_scatter": "sx.reduce_scatter_bucket"}


class _Bucket:
    __slots__ = ("index", "members", "nbytes", "open")

    def __init__(self, index: int):
        self.index, self.members, self.nbytes, self.open = index, [], 0, True


def _packable(v: Value) -> bool:
    """Values split over (or placed on) logical devices stay separate: a flat concatenation
    would gather their pieces first."""
    s = v.type.sharding
    return s is None or s.kind == "replicated" or (s.kind == "split" and not s.used_axes)


def plan_buckets(block: Block, default_bytes_per_pack: int = DEFAULT_BYTES_PER_PACK) -> list[list[Operation]]:
    """The buckets of `block`'s all_reduces, each a list of ops in program order."""
    current: dict[tuple, _Bucket] = {}
    buckets: list[_Bucket] = []
    depends: dict[Value, frozenset] = {}  # value -> buckets (by index) it depends on
    effects: frozenset = frozenset()  # buckets the last op with effects depends on
    for op in block.ops:
        deps = frozenset()
        for v in op.operands:
            d = depends.get(v)
            if d:
                deps |= d
        if has_effects(op):  # ops with effects keep their order: a read after a write of a
            deps |= effects  # reduced value depends on that reduction like a use of its result
            effects = frozenset(i for i in deps if buckets[i].open)
        if op.name in _FUSED and _packable(op.result) and (op.name == "sx.all_reduce" or _packable(op.operands[0])):
            for i in deps:  # a member must not wait on an open bucket's result
                buckets[i].open = False
            limit = int(op.attrs.get("bytes_per_pack", 0) or default_bytes_per_pack or DEFAULT_BYTES_PER_PACK)
            size = op.result.type.nbytes * int(op.attrs.get("num_replicas", 1))  # a reduce-scatter's whole tensor
            key = (op.name, op.attrs["op"], op.result.type.dtype, limit, op.attrs.get("num_replicas"))
            b = current.get(key)
            if b is None or not b.open or b.nbytes + size > limit:
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
                    depends[r] = live
    return [b.members for b in buckets]


def _bucket_op(members: list[Operation]) -> Operation:
    first = members[0]
    results = [Value(m.result.type, m.result.name) for m in members]
    reasons = [m.attrs.get("reason", "") for m in members]
    locs = [str(m.loc) if m.loc else "?" for m in members]
    size = sum(m.operands[0].type.nbytes for m in members)
    attrs = {"op": first.attrs["op"], "reason": f"fuse-collectives: {len(members)} tensors, {size} bytes",
             "reasons": reasons, "locs": locs}
    if first.name == "sx.reduce_scatter":
        attrs["num_replicas"] = first.attrs["num_replicas"]
        if all("serves" in m.attrs for m in members):
            attrs["serves"] = [m.attrs["serves"] for m in members]
    if "bytes_per_pack" in first.attrs:
        attrs["bytes_per_pack"] = first.attrs["bytes_per_pack"]
    return Operation(_FUSED[first.name], [m.operands[0] for m in members], results, attrs,
                     loc=members[-1].loc)


def fuse_block(rw: BlockRewriter, default_bytes_per_pack: int = DEFAULT_BYTES_PER_PACK) -> None:
    """Fuse the all_reduces of `rw`'s block: each bucket's op takes its last member's place, and
    the ops that read an earlier member move after it."""
    for members in plan_buckets(rw.block, default_bytes_per_pack):
        if len(members) < 2:
            continue
        bucket = _bucket_op(members)
        rw.insert_after(members[-1], [bucket])
        for m, r in zip(members, bucket.results):
            rw.replace(m, [r])
        rw.reorder()


@dataclass(frozen=True)
class FuseCollectives:
    """Pack all_reduces of one op and dtype into buckets of at most `bytes_per_pack` bytes."""

    name: ClassVar[str] = "fuse-collectives"
    requires: ClassVar[tuple[str, ...]] = ("propagate-sharding",)
    bytes_per_pack: int = DEFAULT_BYTES_PER_PACK  # for all_reduces without their own (or with 0); 0: the default

    def apply(self, module: Module) -> bool:
        return rewrite_blocks(module, lambda rw: fuse_block(rw, self.bytes_per_pack))
