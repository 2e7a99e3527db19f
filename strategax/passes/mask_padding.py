"""mask-padding: padded rows of a partial batch never count.

A padded input batch arrives marked `sx.rows %x, %count` (axis 0 is its row axis, the first
`count` rows are real). The pass:

1. finds every axis that is that row axis (`row_axes.rule` says how each op moves axes; axis
   identities are unified in both directions, so the backward pass jax.grad emitted is covered
   as well as the forward one);
2. masks each op that combines rows: every operand axis it combines that is a row axis is
   passed through `sx.mask_rows` (a select against the op's identity, with the reason
   `padded rows`) first;
3. makes means count real rows: a row sum divided by the number of elements it added (what
   `jnp.mean`, `jnp.var`... lower to), and that division's transpose (a cotangent divided by
   that number, then broadcast along the rows), divide by the real count instead;
4. raises, naming the op and the user's line, where a row axis reaches an op it cannot follow;
5. records which results of the entry function are per-example (row axis first) in the module
   attribute `per_example_results`, so exactly those are trimmed to the real rows;
6. drops the marks.

A `jnp.where(sx.nn.batch_mask(x), x, fill)` written by the user already says what padded rows
hold: the analysis does not follow rows through it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from math import prod

import numpy as np

from ..errors import DistributionValueError
from ..ir import Block, Locality, Module, Operation, TensorType, Value
from .rewrite import BlockRewriter, all_blocks, rewrite_blocks
from .row_axes import rule

REASON = "padded rows"
_FIX = ("mask the padded rows yourself before it, e.g. `x = jnp.where(sx.nn.batch_mask(x)[:, None], "
        "x, 0)` (sx.nn.batch_mask(x) is True on this replica's real rows), or keep the row axis "
        "first and use row-wise operations")
_SHAPE_OPS = ("jax.broadcast_in_dim", "jax.reshape", "jax.convert_element_type", "jax.squeeze")


def _where(op: Operation) -> tuple[str, int]:
    return (op.loc.file, op.loc.line) if op.loc is not None else ("<unknown>", 0)


def _error(op: Operation, message: str, fix: str = _FIX) -> DistributionValueError:
    e = DistributionValueError(message, fix, location=_where(op))
    e.op = op
    return e


class _Rows:
    """Union-find over (value, axis); a class holding a marked row axis knows its row count."""

    def __init__(self):
        self.parent: dict[tuple[Value, int], tuple[Value, int]] = {}
        self.count: dict[tuple[Value, int], Value] = {}

    def find(self, k):
        root = k
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while k != root:
            self.parent[k], k = root, self.parent.get(k, k)
        return root

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb

    def of(self, v: Value, axis: int) -> Value | None:
        """The row count of `v`'s axis `axis` if it is a row axis, else None."""
        return self.count.get(self.find((v, axis)))

    def axes(self, v: Value) -> list[int]:
        return [i for i in range(len(v.type.shape)) if self.of(v, i) is not None]


def _through_shape_ops(v: Value, producer: dict) -> Value:
    op = producer.get(v)
    while op is not None and op.name in _SHAPE_OPS:
        v = op.operands[0]
        op = producer.get(v)
    return v


def _is_row_mask(pred: Value, producer: dict, counts: set[Value]) -> bool:
    """Whether `pred` is `iota < count` (sx.nn.batch_mask), through broadcasts and reshapes."""
    op = producer.get(_through_shape_ops(pred, producer))
    if op is None or op.name != "jax.lt":
        return False
    lhs = producer.get(_through_shape_ops(op.operands[0], producer))
    if lhs is None or lhs.name != "jax.iota":
        return False
    v = op.operands[1]
    while v not in counts:  # the count itself may be made by a shape op (a loop's slice)
        p = producer.get(v)
        if p is None or p.name not in _SHAPE_OPS:
            return False
        v = p.operands[0]
    return True


def _constant(v: Value, producer: dict) -> float | None:
    """The one value every element of `v` has, when `v` is computed from constants alone."""
    op = producer.get(v)
    if op is None:
        return None
    if op.name == "sx.constant":
        values = np.unique(np.asarray(op.attrs["value"]))
        return float(values[0]) if values.size == 1 else None
    if op.name in _SHAPE_OPS:
        return _constant(op.operands[0], producer)
    if op.name in ("jax.sub", "jax.add", "jax.mul", "jax.div") and len(op.operands) == 2:
        a, b = (_constant(x, producer) for x in op.operands)
        if a is None or b is None or (op.name == "jax.div" and b == 0):
            return None
        return {"jax.sub": a - b, "jax.add": a + b, "jax.mul": a * b, "jax.div": a / b if b else None}[op.name]
    return None


class _Block:
    """Masks, means and checks for one block."""

    def __init__(self, block: Block, rows: _Rows, is_region: bool):
        self.block, self.rows, self.is_region = block, rows, is_region
        self.rw = BlockRewriter(block)
        self.defined = set(block.args)
        self.masked_sums: dict[Operation, tuple[Value, int]] = {}  # reduce_sum -> (count, rows per element)

    def new(self, before: Operation, name: str, operands, type_, attrs, loc) -> Value:
        """A per-replica value computed by a new op placed before `before`."""
        v = Value(TensorType(type_.shape, type_.dtype, Locality.PER_REPLICA))
        self.rw.insert_before(before, [Operation(name, list(operands), [v], attrs, loc=loc)])
        self.defined.add(v)
        return v

    def count_here(self, op: Operation, count: Value) -> Value:
        if count not in self.defined:
            raise _error(op, f"{op.name} combines the padded rows of a batch inside a loop or branch "
                             "whose row count is not visible there")
        return count

    def run(self) -> bool:
        for op in self.rw.ops():
            r = rule(op) if not op.regions else None
            if r is None:
                for x in op.operands:
                    if self.rows.axes(x):
                        raise _error(op, f"{op.name} takes a value with padded rows (a partial "
                                         "batch's row axis), and strategax cannot tell which of its "
                                         "results the padded rows reach")
            else:
                for v, i in r.opaque:
                    if self.rows.of(v, i) is not None:
                        raise _error(op, f"{op.name} moves the rows of a partial batch (axis {i} of "
                                         f"its operand {v.type}) so that padded rows could mix with "
                                         "real ones")
                self.mask(op, r)
            self.defined.update(op.results)
        if self.is_region and any(self.rows.axes(v) for v in self.block.results):
            where = self.block.ops[-1] if self.block.ops else None
            raise _error(where or Operation("region", [], []), "a value with padded rows leaves a "
                         "loop or branch body, where its real rows can no longer be told apart")
        changed = self.rw.commit()
        self.rw = BlockRewriter(self.block)
        self.means()
        return self.rw.commit() or changed

    def mask(self, op: Operation, r) -> None:
        for k, axis, fill in r.combines:
            x = op.operands[k]
            count = self.rows.of(x, axis)
            if count is None:
                continue
            count = self.count_here(op, count)
            self.rw.set_operand(op, k, self.new(op, "sx.mask_rows", [x, count], x.type,
                                                {"axis": axis, "fill": fill, "reason": REASON}, op.loc))
            if op.name == "jax.reduce_sum":
                prev = self.masked_sums.get(op, (count, 1))
                self.masked_sums[op] = (count, prev[1] * x.type.shape[axis])

    def real_divisor(self, op: Operation, d: Value, total: float, count: Value, padded: int,
                     minus: Value | None) -> None:
        """Replace divisor `d` of `op` (== total, or total - minus) by the real count's share."""
        f = d.type
        scalar = TensorType((), f.dtype, Locality.PER_REPLICA)
        n = self.new(op, "jax.convert_element_type", [count], scalar,
                     {"new_dtype": np.dtype(f.dtype), "weak_type": False, "sharding": None}, op.loc)
        if total != padded:
            c = Value(TensorType((), f.dtype, Locality.MIRRORED))
            self.rw.insert_before(
                op, [Operation("sx.constant", [], [c], {"value": np.asarray(total / padded, f.dtype)})])
            n = self.new(op, "jax.mul", [n, c], scalar, {"out_dtype": None}, op.loc)
        if minus is not None:
            n = self.new(op, "jax.sub", [n, minus], scalar, {}, op.loc)
        if f.shape != ():
            n = self.new(op, "jax.broadcast_in_dim", [n], f, {"shape": tuple(f.shape), "broadcast_dimensions": (),
                                                              "sharding": None}, op.loc)
        self.rw.set_operand(op, 1, n)

    def means(self) -> None:
        rw = self.rw
        for op in rw.ops():
            if op.name != "jax.div":
                continue
            try:
                found = self.forward_mean(op) or self.backward_mean(op)
            except (KeyError, TypeError, ValueError, IndexError):  # hostile attributes: no mean
                continue
            if found is None:
                continue
            count, padded, total = found
            d = op.operands[1]
            c = _constant(d, rw.producers)
            if c == total:
                self.real_divisor(op, d, total, count, padded, None)
                continue
            sub = rw.producer(d)  # jnp.var's `rows - ddof`
            if sub is not None and sub.name == "jax.sub" and _constant(sub.operands[0], rw.producers) == total \
                    and _constant(sub.operands[1], rw.producers) is not None and sub.operands[1].type.shape == ():
                self.real_divisor(op, d, total, count, padded, sub.operands[1])

    def forward_mean(self, op: Operation):
        """(count, padded rows, elements summed) when op divides a masked row sum."""
        src = self.rw.producer(_through_shape_ops(op.operands[0], self.rw.producers))
        if src is None or src not in self.masked_sums:
            return None
        count, padded = self.masked_sums[src]
        total = prod(src.operands[0].type.shape[i] for i in src.attrs["axes"])  # valid: it was masked
        return count, padded, total

    def backward_mean(self, op: Operation):
        """(count, padded rows, elements) when op's result is broadcast along the rows: the
        transpose of a mean, dividing a cotangent before it is spread over the summed elements."""
        v, seen = op.result, 0
        while seen < 8:
            seen += 1
            nxt = self.rw.users(v)
            if len(nxt) != 1 or nxt[0].name not in _SHAPE_OPS:
                return None
            b = nxt[0]
            if b.name == "jax.broadcast_in_dim":
                made = [j for j in range(len(b.result.type.shape)) if j not in b.attrs.get("broadcast_dimensions", ())]
                rows = [j for j in made if self.rows.of(b.result, j) is not None]
                if rows:
                    count = self.rows.of(b.result, rows[0])
                    if count not in self.defined:
                        return None
                    padded = prod(b.result.type.shape[j] for j in rows)
                    return count, padded, prod(b.result.type.shape[j] for j in made)
            v = b.result
        return None


def _per_example_results(func_body: Block, rows: _Rows) -> tuple[int, ...]:
    args = set(func_body.args)
    out = []
    for i, v in enumerate(func_body.results):
        axes = rows.axes(v)
        if axes and axes[0] == 0 and rows.of(v, 0) in args:
            out.append(i)
    return tuple(out)


def _drop_marks(rw: BlockRewriter) -> None:
    for op in rw.ops():
        if op.name == "sx.rows":
            rw.replace(op, [op.operands[0]])


@dataclass(frozen=True)
class MaskPadding:
    """Follow the padded row axis from `sx.rows`; mask every op that combines rows."""

    name: ClassVar[str] = "mask-padding"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        every = all_blocks(module)
        marks = [op for b in every for op in b.ops if op.name == "sx.rows"]
        if not marks:
            return False
        rows = _Rows()
        producer = {r: op for b in every for op in b.ops for r in op.results}
        counts = {op.operands[1] for op in marks}
        for b in every:
            for op in b.ops:
                if op.name == "jax.select_n" and _is_row_mask(op.operands[0], producer, counts):
                    continue  # the user's own mask says what padded rows hold
                r = rule(op) if not op.regions else None
                for (x, i), (y, j) in (r.same if r is not None else ()):
                    rows.union((x, i), (y, j))
        for op in marks:
            root = rows.find((op.result, 0))
            if rows.count.get(root, op.operands[1]) is not op.operands[1]:
                raise _error(op, "values of two padded batches with different real row counts are "
                             "combined row by row", "combine batches of the same dataset element")
            rows.count[root] = op.operands[1]
        results = {}
        for f in module.funcs:
            results[f.name] = _per_example_results(f.body, rows)
            bad = [v for v in f.body.results if rows.axes(v) and rows.axes(v)[0] != 0]
            if bad:
                raise _error(producer.get(bad[0], marks[0]),
                             f"a result ({bad[0].type}) carries the rows of a partial batch "
                             "on an axis other than its first, so its padded rows cannot be trimmed",
                             "return per-example values with the row axis first")
        for b in every:
            _Block(b, rows, is_region=all(b is not f.body for f in module.funcs)).run()
        rewrite_blocks(module, _drop_marks)
        if results.get(module.main.name):
            module.attrs["per_example_results"] = results[module.main.name]
        return True
