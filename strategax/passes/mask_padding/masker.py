"""Steps 3 and 4 of mask-padding, one block at a time: mask every row axis an op combines, then
make every mean over the rows (and its transpose) divide by the real count."""
from __future__ import annotations

from math import prod

import numpy as np

from ...dialects.control_flow import scanned_axes
from ...ir import Block, Locality, Operation, TensorType, Value
from ..axis_rules import rule
from ..rewrite import BlockRewriter
from .counts import Counts
from .divisors import Divisors
from .gaps import REASON, UNEVEN, Gaps
from .rows import SHAPE_OPS, Rows, through_shape_ops

UNPROVEN_FIX = ("divide by a count the pass can read: a Python number or NumPy constant, or the real rows "
                "themselves (`jnp.sum(sx.nn.batch_mask(x))`, `sx.nn.compute_average_loss(per_example_loss)`)")


class Masker:
    """Masks the row axes each op of one block combines (`mask`), makes its means count real
    rows (`means`) and records the gaps."""

    def __init__(self, block: Block, rows: Rows, counts: Counts, gaps: Gaps):
        self.block, self.rows, self.counts, self.gaps = block, rows, counts, gaps
        self.rw = BlockRewriter(block)
        self.masked_sums: dict[Operation, tuple[Value, int]] = {}  # reduce_sum -> (count, rows per element)
        self.guarded: set[Value] = set()  # divide_no_nan divisors already reading the real count
        self.divisors: Divisors | None = None
        self.loc = None  # the user's line of the division being rewritten

    def new(self, before: Operation, name: str, operands, type_, attrs, loc) -> Value:
        """A per-replica value computed by a new op placed before `before`."""
        v = Value(TensorType(type_.shape, type_.dtype, Locality.PER_REPLICA))
        self.rw.insert_before(before, [Operation(name, list(operands), [v], attrs, loc=loc)])
        return v

    def mask(self) -> bool:
        """Mask what every op of the block combines along a row axis; whether anything changed."""
        self.rw = BlockRewriter(self.block)
        for op in self.rw.ops():
            if op.regions:
                for v, i in scanned_axes(op):
                    if self.rows.of(v, i) is not None:
                        self.gaps.add(op, f"{op.name} steps along the rows of a partial batch (axis {i} "
                                          f"of {v.type}), one row per iteration")
                continue
            if op.name in ("sx.all_gather", "sx.all_reduce"):
                self.collective(op)
            r = rule(op, rows=True)
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
            self.mask_op(op, r)
        return self.rw.commit()

    def collective(self, op: Operation) -> None:
        """An all_gather along another axis than a row axis (one along it is made an
        all_gather_real), or an all_reduce of rows, combines the replicas' padded entries with
        real ones unless every replica has the same real count: a gap where the counts differ."""
        x = op.operands[0]
        for i in self.rows.axes(x):
            count = self.rows.of(x, i)
            if count is not None and count.type.locality is Locality.MIRRORED:
                continue  # the same real count on every replica: padded entries meet padded entries
            what = (f"gathers along axis {op.attrs.get('axis')} values padded along axis {i} ({x.type}): the "
                    "replicas' pieces do not line up" if op.name == "sx.all_gather" else
                    f"combines the replicas' values ({x.type}) entry by entry along axis {i}, whose real "
                    "extent differs across replicas")
            self.gaps.add(op, f"{op.name} {what} (TensorFlow raises too)",
                          "combine along the padded axis (all_gather / strategy.gather along it, "
                          "strategy.reduce over it), or reduce each replica's value to one shape first",
                          when=UNEVEN)

    def mask_op(self, op: Operation, r) -> None:
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

    def real_count(self, place, dtype, total: float, count: Value, padded: int, minus: Value | None) -> Value:
        """A new scalar: the real count's share of `total` (minus `minus`), in `dtype`; its ops
        are handed to `place`."""
        ops: list[Operation] = []

        def add(name, operands, type_, attrs) -> Value:
            v = Value(TensorType(type_.shape, type_.dtype, Locality.PER_REPLICA))
            ops.append(Operation(name, list(operands), [v], attrs, loc=self.loc))
            return v
        scalar = TensorType((), dtype, Locality.PER_REPLICA)
        n = add("jax.convert_element_type", [count], scalar, {"new_dtype": np.dtype(dtype), "weak_type": False,
                                                              "sharding": None})
        if total != padded:
            c = Value(TensorType((), dtype, Locality.MIRRORED))
            ops.append(Operation("sx.constant", [], [c], {"value": np.asarray(total / padded, dtype)}))
            n = add("jax.mul", [n, c], scalar, {"out_dtype": None})
        if minus is not None:
            n = add("jax.sub", [n, minus], scalar, {})
        place(ops)
        return n

    def real_divisor(self, op: Operation, d: Value, total: float, count: Value, padded: int,
                     minus: Value | None) -> None:
        """Replace divisor `d` of `op` (== total, or total - minus) by the real count's share."""
        f = d.type
        self.loc = op.loc
        n = self.real_count(lambda ops: self.rw.insert_before(op, ops), f.dtype, total, count, padded, minus)
        if f.shape != ():
            n = self.new(op, "jax.broadcast_in_dim", [n], f, {"shape": tuple(f.shape), "broadcast_dimensions": (),
                                                              "sharding": None}, op.loc)
        self.rw.set_operand(op, 1, n)

    def real_guarded(self, op: Operation, guarded: Value, total: float, count: Value, padded: int) -> None:
        """`divide_no_nan(x, guarded)` (Keras' means): its tests against 0 and its divisor read
        the real count instead, so a replica without real rows gets the library's 0, not 0/0."""
        self.loc = op.loc
        assert self.divisors is not None
        producer = self.rw.producer(count)
        if producer is None:  # an argument of the block: before its first op
            first = self.block.ops[0]
            n = self.real_count(lambda ops: self.rw.insert_before(first, ops), guarded.type.dtype, total, count,
                                padded, None)
        else:
            n = self.real_count(lambda ops: self.rw.insert_after(producer, ops), guarded.type.dtype, total, count,
                                padded, None)
        position = {o: i for i, o in enumerate(self.block.ops)}
        tests = [user for user in self.rw.users(guarded)  # found first: rewriting a test hides its select
                 if (user.name == "jax.eq" and _is_zero_test(user, guarded, self.divisors))
                 or (user.name == "jax.select_n" and _zero_guard_of(user, self.rw, self.divisors) is guarded)]
        for user in tests:
            self.rw.set_operands(user, [n if x is guarded else x for x in user.operands])
            for r in user.results:  # they read a per-replica count now (infer-locality agrees later)
                r.type = r.type.with_locality(Locality.PER_REPLICA)
            self.guarded.update(user.results)
            if producer is not None and position.get(user, len(position)) < position[producer]:
                self.rw.reorder()  # a test read before the count is made

    def means(self, divisors: Divisors) -> bool:
        """Make every division of a masked row sum (or a mean's transpose) by the number of
        elements it added divide by the real count; one by a divisor the pass cannot evaluate,
        which no runtime value reaches, is a gap. Whether anything changed."""
        self.rw = rw = BlockRewriter(self.block)
        self.divisors = divisors
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
            if d in self.guarded:
                continue  # a divide_no_nan's divisor made real already (the forward's, for its transpose)
            guarded = _zero_guard_of(rw.producer(d), rw, divisors)
            if guarded is not None and divisors.scalar(guarded) == total and guarded.type.shape == ():
                self.real_guarded(op, guarded, total, count, padded)
                continue
            if divisors.scalar(d) == total:
                self.real_divisor(op, d, total, count, padded, None)
                continue
            sub = rw.producer(d)  # jnp.var's `rows - ddof`
            if sub is not None and sub.name == "jax.sub" and divisors.scalar(sub.operands[0]) == total \
                    and divisors.scalar(sub.operands[1]) is not None and sub.operands[1].type.shape == ():
                self.real_divisor(op, d, total, count, padded, sub.operands[1])
                continue
            if divisors.value(d) is None and not divisors.from_runtime(d):
                self.gaps.add(op, f"{op.name} divides a sum over the rows of a partial batch by a value computed "
                                  f"from constants that strategax cannot evaluate ({d.type}), so it cannot tell "
                                  "whether that is the padded row count (a mean, which must count the real rows "
                                  "only) or another number", UNPROVEN_FIX)
        return rw.commit()

    def forward_mean(self, op: Operation):
        """(count, padded rows, elements summed) when op divides a masked row sum."""
        src = self.rw.producer(through_shape_ops(op.operands[0], self.rw.producers))
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
            if len(nxt) != 1 or nxt[0].name not in SHAPE_OPS:
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


def _is_zero_test(op: Operation, v: Value, divisors: Divisors) -> bool:
    """Whether `op` is `v == 0` (either way round)."""
    a, b = op.operands
    other = b if a is v else a if b is v else None
    return other is not None and divisors.scalar(other) == 0


def _zero_guard_of(op: Operation | None, rw: BlockRewriter, divisors: Divisors) -> Value | None:
    """`v` when `op` is `select_n(v == 0, v, 1)`, divide_no_nan's safe divisor; else None."""
    if op is None or op.name != "jax.select_n" or len(op.operands) != 3:
        return None
    pred, v, one = op.operands
    test = rw.producer(pred)
    if test is None or test.name != "jax.eq" or not _is_zero_test(test, v, divisors) or divisors.scalar(one) != 1:
        return None
    return v
