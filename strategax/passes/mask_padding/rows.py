"""Step 1 of mask-padding: which (value, axis) pairs are row axes, and of which row count (a
union-find over axis identities, both ways, through ops and region flows)."""
from __future__ import annotations

from ...dialects.control_flow import region_flows
from ...ir import Block, Operation, Value
from ..axis_rules import rule
from .gaps import Gaps

SHAPE_OPS = ("jax.broadcast_in_dim", "jax.reshape", "jax.convert_element_type", "jax.squeeze")


class Rows:
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


def through_shape_ops(v: Value, producer: dict) -> Value:
    """The value `v` is a broadcast, reshape, conversion or squeeze of (itself if none)."""
    op = producer.get(v)
    while op is not None and op.name in SHAPE_OPS:
        v = op.operands[0]
        op = producer.get(v)
    return v


def _is_row_mask(pred: Value, producer: dict, counts: set[Value]) -> bool:
    """Whether `pred` is `iota < count` (sx.nn.batch_mask), through broadcasts and reshapes."""
    op = producer.get(through_shape_ops(pred, producer))
    if op is None or op.name != "jax.lt":
        return False
    lhs = producer.get(through_shape_ops(op.operands[0], producer))
    if lhs is None or lhs.name != "jax.iota":
        return False
    v = op.operands[1]
    while v not in counts:  # the count itself may be made by a shape op (a loop's slice)
        p = producer.get(v)
        if p is None or p.name not in SHAPE_OPS:
            return False
        v = p.operands[0]
    return True


def follow(every: list[Block], marks: list[Operation], gaps: Gaps) -> Rows:
    """Every (value, axis) that is a marked row axis, with its count."""
    rows = Rows()
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
