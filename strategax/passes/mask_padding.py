"""mask-padding: padded rows of a partial batch (and padded entries of values whose shapes
differ across replicas) never count.

A padded input batch arrives marked `sx.rows %x, %count` (axis 0 is its row axis, the first
`count` rows are real); a value whose shape differs across replicas is padded to the largest
extent along each differing axis k and marked `sx.rows %x, %extent {axis = k, extent}`. Every
marked axis is a "row axis" below: the analysis is the same for all. The pass:

1. finds every axis that is a row axis (`axis_rules.rule` says how each op moves axes; axis
   identities are unified in both directions, so the backward pass jax.grad emitted is covered
   as well as the forward one; through `cond`/`while`/`scan` the operands, region arguments,
   region results and loop carries are unified as `control_flow.region_flows` pairs them, which
   makes the carries' row axes a fixpoint over the body);
2. makes an `sx.all_gather` along a row axis an `sx.all_gather_real`: the replicas' real
   entries concatenated (as TensorFlow concatenates values of different lengths), padded after
   them, with their total as the new count (the same on every replica); then follows again;
3. masks each op that combines rows: every operand axis it combines that is a row axis is
   passed through `sx.mask_rows` (a select against the op's identity, with the reason
   `padded rows`) first;
4. makes means count real rows: a row sum divided by the number of elements it added (what
   `jnp.mean`, `jnp.var`... lower to), and that division's transpose (a cotangent divided by
   that number, then broadcast along the rows), divide by the real count instead;
5. where a row axis reaches an op it cannot follow, records the gap (op, user's line, fix) in
   the module attribute `padding_gaps` instead of masking: a full batch has no padded rows and
   runs; a call that brings padding raises the gap's error (`padding_gap_error`). A collective
   that combines padded entries with the other replicas' (an all_reduce of rows, an all_gather
   along another axis) is right while every replica has the same real count: its gap raises
   only for a call whose counts differ (TensorFlow raises there too);
6. records how results of the entry function are trimmed after the program runs:
   `per_example_results`, those whose rows are an input batch's (row axis first), and
   `padded_results`, every result with a row axis, as (result, axis, "arg" or "out", index)
   entries: the count is that argument, or a result the pass appends to the function;
7. drops the marks.
Inside a region the real row count is threaded in as a new region constant
(`BlockRewriter.add_region_const`).

A `jnp.where(sx.nn.batch_mask(x), x, fill)` written by the user already says what padded rows
hold: the analysis does not follow rows through it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple
from math import prod

import numpy as np

from ..dialects.control_flow import region_flows, scanned_axes
from ..errors import DistributionValueError
from ..ir import Block, Func, Locality, Module, Operation, TensorType, Value
from .rewrite import BlockRewriter, all_blocks, rewrite_blocks
from .axis_rules import rule
from .fixed_extents import FIX as FIXED_EXTENT_FIX, fixed_extent_sources

REASON = "padded rows"
_FIX = ("mask the padded rows yourself before it, e.g. `x = jnp.where(sx.nn.batch_mask(x)[:, None], "
        "x, 0)` (sx.nn.batch_mask(x) is True on this replica's real rows), or keep the row axis "
        "first and use row-wise operations")
_SHAPE_OPS = ("jax.broadcast_in_dim", "jax.reshape", "jax.convert_element_type", "jax.squeeze")


GAPS = "padding_gaps"  # module attribute: the Gap entries, as plain tuples
# when a gap raises: a call with any padded row, or only one whose real counts differ across replicas
PADDED, UNEVEN = "padded", "uneven"
PADDED_RESULTS = "padded_results"  # module attribute: the PaddedResult entries, as plain tuples


class Gap(NamedTuple):
    """A place the analysis cannot follow the rows: the user's line, what happens there, the fix,
    and when a call raises for it (PADDED: any padded row; UNEVEN: real counts that differ)."""

    file: str
    line: int
    message: str
    fix: str
    when: str


class PaddedResult(NamedTuple):
    """Result `result` of the entry function is padded along `axis`; its real extent is argument
    `index` (`source` "arg") or the function's result `index` (`source` "out")."""

    result: int
    axis: int
    source: str
    index: int


def padding_gaps(module: Module) -> tuple[Gap, ...]:
    """The module's `padding_gaps` (after the pass, or read back from IR text)."""
    return tuple(Gap(*g) for g in module.attrs.get(GAPS, ()))


def padded_results(module: Module) -> tuple[PaddedResult, ...]:
    """The module's `padded_results` (after the pass, or read back from IR text)."""
    return tuple(PaddedResult(*p) for p in module.attrs.get(PADDED_RESULTS, ()))


def _where(op: Operation | None) -> tuple[str, int]:
    return (op.loc.file, op.loc.line) if op is not None and op.loc is not None else ("<unknown>", 0)


class _Gaps(list[Gap]):
    """The places the analysis cannot follow the rows, as `padding_gaps` entries."""

    def add(self, op: Operation | None, message: str, fix: str = _FIX, when: str = PADDED) -> None:
        entry = Gap(*_where(op), message, fix, when)
        if entry not in self:
            self.append(entry)


def gaps_raised(gaps: tuple[Gap, ...], padded: bool, uneven: bool) -> tuple[Gap, ...]:
    """The gaps a call meets: those of any padding where it brings padded rows, the others only
    where its real counts differ across replicas."""
    return tuple(g for g in gaps if uneven or (padded and g.when == PADDED))


def padding_gap_error(gaps: tuple[Gap, ...], extents: bool = False) -> DistributionValueError:
    """The error a call with a partial batch (`extents`: with values whose shapes differ across
    replicas) raises for the `padding_gaps` it meets."""
    file, line, message, fix, _ = gaps[0]
    more = f" (and {len(gaps) - 1} more place(s) the analysis cannot follow)" if len(gaps) > 1 else ""
    if extents:
        return DistributionValueError(
            f"this call's per-replica values differ in shape across replicas (each is padded to the largest "
            f"extent), and {message}{more}; padded entries would count", fix + "; or give every replica "
            "values of one shape", location=(file, line))
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

    def union(self, a, b) -> bool:
        """Make `a` and `b` one axis; False when both were row axes of different counts."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        self.parent[ra] = rb
        ca, cb = self.count.pop(ra, None), self.count.get(rb)
        if ca is not None and cb is None:
            self.count[rb] = ca
        return ca is None or cb is None or ca is cb

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
    value = _constant_array(v, producer, 0)
    if value is None:
        return None
    values = np.unique(value)
    return float(values[0]) if values.size == 1 else None


_FOLD_BINARY = {"jax.sub": np.subtract, "jax.add": np.add, "jax.mul": np.multiply, "jax.max": np.maximum,
                "jax.min": np.minimum, "jax.eq": np.equal, "jax.ne": np.not_equal}


def _constant_array(v: Value, producer: dict, depth: int) -> np.ndarray | None:
    """`v`'s value when it is computed from constants alone by a few elementwise ops and
    reductions (what a library's `divide_no_nan(total, prod(shape))` traces to: Keras' mean
    losses), else None. Small and bounded: a divisor, not a program."""
    op = producer.get(v)
    if op is None or depth > 12:
        return None
    if op.name == "sx.constant":
        return np.asarray(op.attrs["value"])
    maybe = [_constant_array(x, producer, depth + 1) for x in op.operands]
    args = [a for a in maybe if a is not None]
    if len(args) != len(maybe):
        return None
    try:
        with np.errstate(all="ignore"):
            if op.name in _SHAPE_OPS:
                return np.broadcast_to(args[0], v.type.shape) if args[0].size == 1 else \
                    np.reshape(args[0], v.type.shape)
            if op.name in _FOLD_BINARY and len(args) == 2:
                return _FOLD_BINARY[op.name](args[0], args[1])
            if op.name == "jax.div" and len(args) == 2:
                return None if np.any(args[1] == 0) else np.divide(args[0], args[1])
            if op.name == "jax.select_n" and len(args) >= 2:
                return np.choose(np.asarray(args[0], int), args[1:])
            if op.name in ("jax.reduce_prod", "jax.reduce_sum") and len(args) == 1:
                fold = np.prod if op.name == "jax.reduce_prod" else np.sum
                return np.asarray(fold(args[0], axis=tuple(op.attrs["axes"])))
    except (KeyError, TypeError, ValueError, IndexError):  # attributes this fold does not know: not constant
        return None
    return None


class _Masker:
    """Masks the row axes each op of one block combines, makes its means count real rows and
    records the gaps."""

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
            self.mask(op, r)
        changed = self.rw.commit()
        self.rw = BlockRewriter(self.block)
        self.means()
        return self.rw.commit() or changed

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
        for region, arg in zip(op.regions, BlockRewriter(outer).add_region_const(op, outer_count)):
            self.carried[(region, count)] = arg
            self.home[arg] = region
        return self.carried[(block, count)]


def _follow(every: list[Block], marks: list[Operation], gaps: _Gaps) -> _Rows:
    """Every (value, axis) that is a marked row axis, with its count (step 1)."""
    rows = _Rows()
    producer = {r: op for b in every for op in b.ops for r in op.results}
    counts = {op.operands[1] for op in marks}
    for op in marks:
        rows.count[rows.find((op.result, op.attrs.get("axis", 0)))] = op.operands[1]

    def union(op: Operation, a, b) -> None:
        if not rows.union(a, b):
            gaps.add(op, "values of two padded batches (whose real row counts may differ) are combined row "
                     f"by row by {op.name} (or values whose shapes differ differently across replicas)",
                     "combine batches of the same dataset element, or values of one shape on each replica")
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
                        union(op, (outer, k + shift), (inner, k))
                continue
            r = rule(op, rows=True)
            for (x, i), (y, j) in (r.same if r is not None else ()):
                union(op, (x, i), (y, j))
    return rows


def _gather_real(every: list[Block], rows: _Rows, num_replicas: int) -> bool:
    """Make each sx.all_gather along a row axis an sx.all_gather_real whose result is marked
    with the gathered real count (step 2); whether any was made."""
    threads, made = _Counts(every), False
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


def _trims(func: Func, rows: _Rows, batch_counts: set[Value], home: dict, gaps: _Gaps,
           producer: dict) -> tuple[tuple[int, ...], tuple[PaddedResult, ...]]:
    """(per_example_results, padded_results) of `func` (step 6); appends the counts that are
    not arguments to its results."""
    body = func.body
    args = {a: i for i, a in enumerate(body.args)}
    per_example: list[int] = []
    padded: list[PaddedResult] = []
    out: dict[Value, int] = {}
    for i, v in enumerate(list(body.results)):
        axes = rows.axes(v)
        if axes == [0] and rows.of(v, 0) in batch_counts and rows.of(v, 0) in args:
            per_example.append(i)  # also in `padded`: a result that is not per-replica is cut by it
        for axis in axes:
            count = rows.of(v, axis)
            assert count is not None  # `axes` are the axes that have one
            if count in args:
                padded.append(PaddedResult(i, axis, "arg", args[count]))
            elif home.get(count) is body:
                if count not in out:
                    out[count] = BlockRewriter(body).add_result(count)
                padded.append(PaddedResult(i, axis, "out", out[count]))
            else:
                gaps.add(producer.get(v) or producer.get(count), f"a result ({v.type}) carries padded entries along "
                         f"axis {axis} whose real count is made inside a loop or branch, so they cannot be trimmed",
                         "return values whose padded axis comes from the function's inputs")
    return tuple(per_example), tuple(padded)


def _drop_marks(rw: BlockRewriter) -> None:
    for op in rw.ops():
        if op.name == "sx.rows":
            rw.replace(op, [op.operands[0]])


@dataclass(frozen=True)
class MaskPadding:
    """Follow the padded row axes from `sx.rows`; mask every op that combines rows."""

    name: ClassVar[str] = "mask-padding"
    requires: ClassVar[tuple[str, ...]] = ()

    def apply(self, module: Module) -> bool:
        every = all_blocks(module)
        if not any(op.name == "sx.rows" for b in every for op in b.ops):
            return False
        batch_counts = {op.operands[1] for b in every for op in b.ops
                        if op.name == "sx.rows" and not op.attrs.get("extent")}
        while True:
            gaps = _Gaps()
            marks = [op for b in every for op in b.ops if op.name == "sx.rows"]
            rows = _follow(every, marks, gaps)
            if not _gather_real(every, rows, module.attrs.get("num_replicas", 1)):
                break
            every = all_blocks(module)
        for at, message in fixed_extent_sources(module, every, rows.of):  # e.g. `x @ W` along a padded axis
            gaps.add(at, message, FIXED_EXTENT_FIX)
        producer = {r: op for b in every for op in b.ops for r in op.results}
        threads = _Counts(every)
        per_example, padded = _trims(module.main, rows, batch_counts, threads.home, gaps, producer)
        for b in every:
            _Masker(b, rows, threads, gaps).run()
        rewrite_blocks(module, _drop_marks)
        if per_example:
            module.attrs["per_example_results"] = per_example
        if padded:  # plain data, as IR attributes are
            module.attrs[PADDED_RESULTS] = tuple(tuple(p) for p in padded)
        if gaps:
            module.attrs[GAPS] = tuple(tuple(g) for g in gaps)
        return True
