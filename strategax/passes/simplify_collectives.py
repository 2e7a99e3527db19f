"""simplify-collectives: remove or cheapen collectives whose result is known without them.

- all_reduce MEAN / MAX / MIN of a mirrored value is the value; SUM is N times the value.
- `reduce_sum` over the gathered axis of an `all_gather` (used only there) is an all_reduce SUM
  of the local `reduce_sum`: each replica sends its partial sum instead of its whole piece.
- Two all_reduces (or all_gathers) of one value with the same op (axis) are one, unless one
  asks for compression and the other does not (a variable's aggregation never is).
Needs localities: run after `infer-locality`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Block, Locality, Module, Operation, TensorType, Value
from .rewrite import all_blocks, replace_uses

_SAME_ON_MIRRORED = ("mean", "max", "min")


def _times_n(op: Operation, x: Value, n: int) -> list[Operation]:
    """Ops computing n * x (mirrored), the last one defining op's result."""
    scalar = TensorType((), x.type.dtype, Locality.MIRRORED)
    c = Operation("sx.constant", [], [Value(scalar, "n")], {"value": np.asarray(n, dtype=x.type.dtype)},
                  loc=op.loc)
    return [c, Operation("jax.mul", [x, c.result], [op.result], {"out_dtype": None}, loc=op.loc)]


def _gather_sum(op: Operation, gather: Operation) -> list[Operation]:
    """reduce_sum(all_gather(x)) over the gathered axis -> all_reduce(sum, reduce_sum(x))."""
    x = gather.operands[0]
    local_t = TensorType(op.result.type.shape, op.result.type.dtype, x.type.locality)
    local = Operation("jax.reduce_sum", [x], [Value(local_t, op.result.name)], dict(op.attrs), loc=op.loc)
    reason = f"{gather.attrs.get('reason', 'all_gather')} (summed pieces)"
    total = Operation("sx.all_reduce", [local.result], [op.result], {"op": "sum", "reason": reason},
                      loc=gather.loc)
    return [local, total]


def simplify_block(block: Block, num_replicas: int) -> None:
    uses: dict[int, int] = {}
    for o in block.ops:
        for v in o.operands:
            uses[id(v)] = uses.get(id(v), 0) + 1
    for v in block.results:
        uses[id(v)] = uses.get(id(v), 0) + 1
    producer: dict[int, Operation] = {}
    mapping: dict[int, Value] = {}
    seen: dict[tuple, Value] = {}
    dropped: set[int] = set()
    out: list[Operation] = []
    for op in block.ops:
        if any(id(v) in mapping for v in op.operands):
            op.operands = [mapping.get(id(v), v) for v in op.operands]
        new = [op]
        if op.name in ("sx.all_reduce", "sx.all_gather"):
            x = op.operands[0]
            kind = op.attrs.get("op", op.attrs.get("axis"))
            key = (op.name, id(x), kind, op.attrs.get("compression"))  # a compressed copy is another value
            if key in seen:
                mapping[id(op.result)] = seen[key]
                continue
            seen[key] = op.result
            if op.name == "sx.all_reduce" and x.type.locality is Locality.MIRRORED:
                if kind in _SAME_ON_MIRRORED:
                    mapping[id(op.result)] = x
                    continue
                if kind == "sum" and x.type.dtype != np.bool_:
                    new = _times_n(op, x, num_replicas)
        elif op.name == "jax.reduce_sum":
            g = producer.get(id(op.operands[0]))
            axes = op.attrs.get("axes", ())
            if (g is not None and g.name == "sx.all_gather" and g.attrs["axis"] in tuple(axes)
                    and uses.get(id(g.result)) == 1):
                new = _gather_sum(op, g)
                dropped.add(id(g))
        for o in new:
            for r in o.results:
                producer[id(r)] = o
        out.extend(new)
    block.ops[:] = [o for o in out if id(o) not in dropped]
    replace_uses(block, mapping)


@dataclass(frozen=True)
class SimplifyCollectives:
    """Drop collectives of mirrored values, turn gather-then-sum into all_reduce, merge duplicates."""

    name: str = "simplify-collectives"

    def apply(self, module: Module) -> Module:
        n = int(module.attrs.get("num_replicas", 1))
        for block in all_blocks(module):
            simplify_block(block, n)
        return module
