"""mask-padding: padded rows of a partial batch never count.

A padded input batch arrives marked `sx.rows %x, %count` (axis 0 is its row axis, the first
`count` rows are real). The pass:

1. finds every axis that is that row axis (`axis_rules.rule` says how each op moves axes; axis
   identities are unified in both directions, so the backward pass jax.grad emitted is covered
   as well as the forward one; through `cond`/`while`/`scan` the operands, region arguments,
   region results and loop carries are unified as `control_flow.region_flows` pairs them, which
   makes the carries' row axes a fixpoint over the body);
2. masks each op that combines rows: every operand axis it combines that is a row axis is
   passed through `sx.mask_rows` (a select against the op's identity, with the reason
   `padded rows`) first;
3. makes means count real rows: a row sum divided by the number of elements it added (what
   `jnp.mean`, `jnp.var`... lower to), and that division's transpose (a cotangent divided by
   that number, then broadcast along the rows), divide by the real count instead;
4. where a row axis reaches an op it cannot follow, records the gap (op, user's line, fix) in
   the module attribute `padding_gaps` instead of masking: a full batch has no padded rows and
   runs; a call that brings a partial batch raises the gap's error (`padding_gap_error`);
5. records which results of the entry function are per-example (row axis first) in the module
   attribute `per_example_results`, so exactly those are trimmed to the real rows;
6. drops the marks.
Inside a region the real row count is threaded in as a new region constant (`add_const`).

A `jnp.where(sx.nn.batch_mask(x), x, fill)` written by the user already says what padded rows
hold: the analysis does not follow rows through it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from math import prod

import numpy as np

from ..dialects.control_flow import add_const, region_flows, scanned_axes
from ..errors import DistributionValueError
from ..ir import Block, Locality, Module, Operation, TensorType, Value
from .rewrite import BlockRewriter, all_blocks, rewrite_blocks
from .axis_rules import rule

REASON = "padded rows"
_FIX = ("mask the padded rows yourself before it, e.g. `x = jnp.where(sx.nn.batch_mask(x)[:, None], "
        "x, 0)` (sx.nn.batch_mask(x) is True on this replica's real rows), or keep the row axis "
        "first and use row-wise operations")
_SHAPE_OPS = ("jax.broadcast_in_dim", "jax.reshape", "jax.convert_element_type", "jax.squeeze")


GAPS = "padding_gaps"  # module attribute: ((file, line, message, fix), ...)


def _where(op: Operation) -> tuple[str, int]:
    return (op.loc.file, op.loc.line) if op.loc is not None else ("<unknown>", 0)


class _Gaps(list):
    """The places the analysis cannot follow the rows, as `padding_gaps` entries."""

    def add(self, op: Operation, message: str, fix: str = _FIX) -> None:
        entry = (*_where(op), message, fix)
        if entry not in self:
            self.append(entry)


def padding_gap_error(gaps: tuple) -> DistributionValueError:
    """The error a call with a partial batch raises for a program with `padding_gaps`."""
    file, line, message, fix = gaps[0]
    more = f" (and {len(gaps) - 1} more place(s) the analysis cannot follow)" if len(gaps) > 1 else ""
    return DistributionValueError(
        f"this call's batch is partial (some replicas hold padded rows), and {message}{more}; "
        "full batches run, a partial one would let padded rows count", fix + "; or drop the partial "
        "batch: `dataset.batch(n, drop_remainder=True)`", location=(file, line))


class _Rows:
    """Union-find over (value, axis); a class holding a marked row axis knows its row count."""

    def __init__(self):
        self.parent: dict[tuple[Value, int], tuple[Value, int]] = {}
        self.count: dict[tuple[Value, int], Value] = {}

    def find(self, k: tuple[Value, int]) -> tuple[Value, int]:
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

    def __init__(self, block: Block, rows: _Rows, counts: "_Counts", gaps: _Gaps):
        self.block, self.rows, self.counts, self.gaps = block, rows, counts, gaps
        self.rw = BlockRewriter(block)
        self.masked_sums: dict[Operation, tuple[Value, int]] = {}  # reduce_sum -> (count, rows per element)

    def new(self, before: Operation, name: str, operands, type_, attrs, loc) -> Value:
        """A per-replica value computed by a new op placed before `before`."""
        v = Value(TensorType(type_.shape, type_.dtype, Locality.PER_REPLICA))
        self.rw.insert_before(before, [Operation(name, list(operands), [v], attrs, loc=loc)])
        return v

    def run(self) -> bool:
        for op in self.rw.ops():
            if op.regions:
                for v, i in scanned_axes(op):
                    if self.rows.of(v, i) is not None:
                        self.gaps.add(op, f"{op.name} steps along the rows of a partial batch (axis {i} "
                                          f"of {v.type}), one row per iteration")
                continue
            r = rule(op)
            if r is None:
                if any(self.rows.axes(x) for x in op.operands):
                    self.gaps.add(op, f"{op.name} takes a value with padded rows (a partial batch's "
                                      "row axis), and strategax cannot tell which of its results the "
                                      "padded rows reach")
                continue
            for v, i in r.opaque:
                if self.rows.of(v, i) is not None:
                    self.gaps.add(op, f"{op.name} moves the rows of a partial batch (axis {i} of its "
                                      f"operand {v.type}) so that padded rows could mix with real ones")
            self.mask(op, r)
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
            count = self.counts.visible(self.block, count)
            if count is None:
                self.gaps.add(op, f"{op.name} combines the rows of a batch whose row count is not "
                                  "visible where it runs")
                continue
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
        count, padded = self.masked_sums[src]  # already visible here
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
                    row_count = self.rows.of(b.result, rows[0])
                    count = self.counts.visible(self.block, row_count) if row_count is not None else None
                    if count is None:
                        return None
                    padded = prod(b.result.type.shape[j] for j in rows)
                    return count, padded, prod(b.result.type.shape[j] for j in made)
            v = b.result
        return None


class _Counts:
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
        for region, arg in zip(op.regions, add_const(op, outer_count)):
            self.carried[(region, count)] = arg
            self.home[arg] = region
        return self.carried[(block, count)]


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
        rows, gaps = _Rows(), _Gaps()
        producer = {r: op for b in every for op in b.ops for r in op.results}
        counts = {op.operands[1] for op in marks}
        for b in every:
            for op in b.ops:
                if op.name == "jax.select_n" and _is_row_mask(op.operands[0], producer, counts):
                    continue  # the user's own mask says what padded rows hold
                if op.regions:
                    results = set(op.results)
                    for src, dst, shift in region_flows(op):
                        # a scan's ys flow from the region out: the region side is the source
                        outer, inner = (dst, src) if dst in results else (src, dst)
                        for k in range(len(inner.type.shape)):
                            rows.union((outer, k + shift), (inner, k))
                    continue
                r = rule(op)
                for (x, i), (y, j) in (r.same if r is not None else ()):
                    rows.union((x, i), (y, j))
        for op in marks:
            root = rows.find((op.result, 0))
            if rows.count.get(root, op.operands[1]) is not op.operands[1]:
                gaps.add(op, "values of two padded batches (whose real row counts may differ) are "
                         "combined row by row", "combine batches of the same dataset element")
                continue
            rows.count[root] = op.operands[1]
        results = {}
        for f in module.funcs:
            results[f.name] = _per_example_results(f.body, rows)
            bad = [v for v in f.body.results if rows.axes(v) and rows.axes(v)[0] != 0]
            if bad:
                gaps.add(producer.get(bad[0], marks[0]), f"a result ({bad[0].type}) carries the rows of a "
                         "partial batch on an axis other than its first, so its padded rows cannot be "
                         "trimmed", "return per-example values with the row axis first")
        threads = _Counts(every)
        for b in every:
            _Block(b, rows, threads, gaps).run()
        rewrite_blocks(module, _drop_marks)
        if results.get(module.main.name):
            module.attrs["per_example_results"] = results[module.main.name]
        if gaps:
            module.attrs[GAPS] = tuple(gaps)
        return True
