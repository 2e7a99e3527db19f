"""shard-optimizer-state: reduce only the piece each replica keeps (ZeRO stage 1/2).

`sx.Optimizer(tx, shard_state=True)` traces its update on pieces: each replica takes its
piece of the all-reduced gradient (`sx.shard(sx.all_reduce(g))`), updates its pieces of the
slots and of the parameter, and `sx.all_gather`s the new parameter values. Taking a piece of
an all_reduce that nothing else reads is a reduce-scatter: this pass rewrites

    %g = sx.all_reduce %d {op = "sum", ...} : f32[256,512] mirrored
    %p = sx.shard %g {num_replicas = 8, serves = "w"} : f32[16384] per_replica
into
    %p = sx.reduce_scatter %d {op = "sum", num_replicas = 8, serves = "w", ...} : f32[16384] per_replica

which sends (N-1)/N of the padded gradient per replica instead of 2(N-1)/N: with the all_gather
of the new values, the step moves what an all_reduce alone moved, and every replica holds 1/N
of the optimizer's state. The all_reduce's `carries`, `compression` and `bytes_per_pack` go with
it (compress-collectives and fuse-collectives read them). An all_reduce read elsewhere too
stays as it is (the program is still right, only not cheaper). Runs before compress-collectives.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir import Module, Operation, Value
from .rewrite import BlockRewriter, rewrite_blocks

_KEPT = ("carries", "compression", "bytes_per_pack")


def scatter(shard: Operation, reduce: Operation) -> Operation:
    """The sx.reduce_scatter that replaces `shard` of the result of `reduce`."""
    attrs = {"op": reduce.attrs["op"], "num_replicas": shard.attrs["num_replicas"],
             "reason": f"{reduce.attrs['reason']} (scattered: {shard.attrs['reason']})",
             **{k: reduce.attrs[k] for k in _KEPT if k in reduce.attrs}}
    if "serves" in shard.attrs:
        attrs["serves"] = shard.attrs["serves"]
    return Operation("sx.reduce_scatter", [reduce.operands[0]], [Value(shard.result.type, shard.result.name)],
                     attrs, loc=reduce.loc)


def shard_block(rw: BlockRewriter) -> None:
    for op in rw.ops():
        if op.name != "sx.shard":
            continue
        reduce = rw.producer(op.operands[0])
        if (reduce is None or reduce.name != "sx.all_reduce" or reduce.attrs["op"] not in ("sum", "mean")
                or rw.num_uses(reduce.result) != 1):
            continue
        new = scatter(op, reduce)
        rw.insert_before(op, [new])
        rw.replace(op, [new.result])
        rw.erase(reduce)


@dataclass(frozen=True)
class ShardOptimizerState:
    """Turn each piece taken of an all-reduced gradient into a reduce-scatter."""

    name: ClassVar[str] = "shard-optimizer-state"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        return rewrite_blocks(module, shard_block)
