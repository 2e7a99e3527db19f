"""simplify-collectives: remove or cheapen collectives whose result is known without them.

- all_reduce MEAN / MAX / MIN of a mirrored value is the value; SUM is N times the value.
- `reduce_sum` over the gathered axis of an `all_gather` (used only there) is an all_reduce SUM
  of the local `reduce_sum`: each replica sends its partial sum instead of its whole piece.
- Two all_reduces (or all_gathers) of one value with the same op (axis) are one, unless one
  asks for compression and the other does not (a variable's aggregation never is).
- An all_reduce of a transpose (used only there) of a dot that XLA runs as a plain matrix product
  reduces the dot's result and transposes after (exact: a reduction across replicas is
  elementwise). A weight gradient comes out of `jax.grad` as transpose(dot_general(...)); before
  the collective, XLA folds that transpose into the dot by swapping its operands, which takes a
  [M,K]x[K,N] product out of the form XLA:CPU's YNNPACK runs (GSPMD's partial-sum all-reduce,
  placed right at the dot, keeps it). A dot XLA does not run in that form either way (a 2-D
  weight gradient, contracted along the batch: the generic emitter takes either order) keeps its
  transpose where it is: after the collective it would only cost a transposed copy
  (docs/performance.md, issues 34 and 36). Transposes that cancel are dropped.
Needs localities: run after `infer-locality`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..ir import Locality, Module, Operation, TensorType, Value
from .rewrite import BlockRewriter, rewrite_blocks

_SAME_ON_MIRRORED = ("mean", "max", "min")


def _times_n(op: Operation, x: Value, n: int) -> list[Operation]:
    """Ops computing n * x (mirrored), the last one's result standing for op's."""
    scalar = TensorType((), x.type.dtype, Locality.MIRRORED)
    c = Operation("sx.constant", [], [Value(scalar, "n")], {"value": np.asarray(n, dtype=x.type.dtype)},
                  loc=op.loc)
    product = Value(op.result.type, op.result.name)
    return [c, Operation("jax.mul", [x, c.result], [product], {"out_dtype": None}, loc=op.loc)]


def _gather_sum(op: Operation, gather: Operation) -> list[Operation]:
    """reduce_sum(all_gather(x)) over the gathered axis -> all_reduce(sum, reduce_sum(x))."""
    x = gather.operands[0]
    local_t = TensorType(op.result.type.shape, op.result.type.dtype, x.type.locality)
    local = Operation("jax.reduce_sum", [x], [Value(local_t, op.result.name)], dict(op.attrs), loc=op.loc)
    reason = f"{gather.attrs.get('reason', 'all_gather')} (summed pieces)"
    total = Operation("sx.all_reduce", [local.result], [Value(op.result.type, op.result.name)],
                      {"op": "sum", "reason": reason}, loc=gather.loc)
    return [local, total]


def _key(op: Operation) -> tuple:
    """Collectives with equal keys compute the same value (a compressed copy is another value)."""
    return (op.name, op.operands[0], op.attrs.get("op", op.attrs.get("axis")), op.attrs.get("compression"))


def _collective(rw: BlockRewriter, op: Operation, seen: dict, num_replicas: int) -> None:
    """A duplicate collective reuses the first; one of a mirrored value is cheapened."""
    x = op.operands[0]
    kind = op.attrs.get("op", op.attrs.get("axis"))
    first = seen.setdefault(_key(op), op.result)
    if first is not op.result:
        rw.replace(op, [first])
    elif op.name == "sx.all_reduce" and x.type.locality is Locality.MIRRORED:
        if kind in _SAME_ON_MIRRORED:
            rw.replace(op, [x])
        elif kind == "sum" and x.type.dtype != np.bool_:
            new = _times_n(op, x, num_replicas)
            rw.insert_before(op, new)
            rw.replace(op, [new[-1].result])


def _xla_matmul(dot: Operation | None) -> bool:
    """Whether XLA compiles `dot` as a [batch, M, K] x [batch, K, N] product (what XLA:CPU hands
    to YNNPACK). XLA's DotDecomposer rewrites a dot with several contracting or free dimensions
    on a side, or batch dimensions not leading, into that form (transposing and reshaping its
    operands); it leaves any other dot as it is, in that form only when the lhs is contracted
    along its last axis and the rhs along its first after the batch axes."""
    if dot is None or dot.name != "jax.dot_general":
        return False
    (lc, rc), (lb, rb) = dot.attrs["dimension_numbers"]
    lrank, rrank = (len(x.type.shape) for x in dot.operands[:2])
    if (len(lc) != 1 or lrank > len(lb) + 2 or rrank > len(rb) + 2
            or tuple(lb) != tuple(range(len(lb))) or tuple(rb) != tuple(range(len(rb)))):
        return True  # DotDecomposer's canonical form
    return lc[0] == lrank - 1 and rc[0] == len(rb)


def _sink_transpose(rw: BlockRewriter, op: Operation) -> Operation:
    """all_reduce(transpose(x)) -> transpose(all_reduce(x)) for a chain of transposes each used
    only by the next (composed into one, none when they cancel) when x is a dot XLA runs as a
    matrix product (`_xla_matmul`) or the chain cancels; returns the all_reduce left.
    Not when a piece of the result is taken (`sx.shard`): shard-optimizer-state makes that a
    reduce-scatter, which a transpose in between would stop."""
    if op.attrs.get("compression"):
        return op
    chain: list[Operation] = []
    v = op.operands[0]
    while True:
        t = rw.producer(v)
        if (t is None or t.name != "jax.transpose" or rw.num_uses(t.result) != 1
                or t.operands[0].type.locality is not Locality.PER_REPLICA):
            break
        chain.append(t)
        v = t.operands[0]
    if not chain:
        return op
    perm = list(range(len(op.result.type.shape)))
    for t in chain:  # outermost first: result axis i is axis perm[i] of v
        perm = [int(t.attrs["permutation"][i]) for i in perm]
    if perm != sorted(perm) and (not _xla_matmul(rw.producer(v))
                                 or any(u.name == "sx.shard" for u in rw.users(op.result))):
        return op
    reduced = Operation("sx.all_reduce", [v], [Value(v.type.with_locality(op.result.type.locality), op.result.name)],
                        dict(op.attrs), loc=op.loc)
    new = [reduced]
    if perm != sorted(perm):
        new.append(Operation("jax.transpose", [reduced.result], [Value(op.result.type, op.result.name)],
                             {**chain[0].attrs, "permutation": tuple(perm)}, loc=chain[0].loc))
    rw.insert_before(op, new)
    rw.replace(op, [new[-1].result])
    for t in chain:
        rw.erase(t)
    return reduced


def _gathered_sum(rw: BlockRewriter, op: Operation, seen: dict) -> None:
    """reduce_sum over the gathered axis of an all_gather used only there."""
    g = rw.producer(op.operands[0])
    if (g is not None and g.name == "sx.all_gather" and g.attrs["axis"] in tuple(op.attrs.get("axes", ()))
            and rw.num_uses(g.result) == 1):
        new = _gather_sum(op, g)
        rw.insert_before(op, new)
        rw.replace(op, [new[-1].result])
        rw.erase(g)
        seen.pop(_key(g), None)  # a later duplicate gathers anew


def simplify_block(rw: BlockRewriter, num_replicas: int) -> None:
    seen: dict[tuple, Value] = {}
    for op in rw.ops():
        if op.name == "sx.all_reduce":
            op = _sink_transpose(rw, op)
        if op.name in ("sx.all_reduce", "sx.all_gather"):
            _collective(rw, op, seen, num_replicas)
        elif op.name == "jax.reduce_sum":
            _gathered_sum(rw, op, seen)


@dataclass(frozen=True)
class SimplifyCollectives:
    """Drop collectives of mirrored values, turn gather-then-sum into all_reduce, merge duplicates."""

    name: ClassVar[str] = "simplify-collectives"
    requires: ClassVar[tuple[str, ...]] = ("infer-locality",)

    def apply(self, module: Module) -> bool:
        n = int(module.attrs.get("num_replicas", 1))
        return rewrite_blocks(module, lambda rw: simplify_block(rw, n))
