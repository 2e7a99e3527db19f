"""What a module communicates: each collective with its bytes, reason and source line.

Bytes moved per replica follow the ring algorithms, by the traffic class each collective
declares (`OpDef.traffic`, `opdefs.TRAFFIC`): an all-reduce of B bytes sends 2(N-1)/N * B per
replica, an all-gather producing B bytes (`sx.all_gather_real` too: its pieces and every
replica's count) and a broadcast of B bytes send (N-1)/N * B, a reduce-scatter producing B bytes
(1/N of the tensor reduced) (N-1) * B: with the all-gather of its pieces, an all-reduce's bytes.
A collective
inside a `jax.scan` counts once per iteration (times its length); one inside a `jax.while`
(a `fori_loop` with traced bounds, an `sx.range` loop) counts once, for one iteration, and
says so: its `per_iteration_of` names the loop, whose trip count is known only when it runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .opdefs import TRAFFIC, declaration, is_collective
from .ops import Block, Module, Operation


@dataclass(frozen=True)
class CollectiveInfo:
    op: str
    kind: str  # the reduce op ("sum", "mean", ...), else the traffic class ("gather", "broadcast")
    dtype: str
    shape: tuple[int, ...]
    payload_bytes: int
    bytes_moved: int  # per replica, per execution, times `repeats`
    repeats: int
    reason: str
    location: str
    members: tuple[tuple[str, str, int], ...] = ()  # a bucket's tensors: (reason, location, bytes)
    per_iteration_of: str = ""  # "jax.while at file:line": counted for one iteration of that loop


@dataclass
class CollectiveStats:
    num_replicas: int
    collectives: list[CollectiveInfo] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.collectives)

    @property
    def bytes_per_replica(self) -> int:
        return sum(c.bytes_moved for c in self.collectives)

    def table(self) -> str:
        rows = [f"{'op':<20} {'kind':<6} {'type':<20} {'tensor bytes':>12} {'bytes moved':>12}  reason @ location"]
        for c in self.collectives:
            ty = f"{c.dtype}{list(c.shape)}".replace(" ", "")
            rep = f" x{c.repeats}" if c.repeats != 1 else ""
            if c.per_iteration_of:
                rep += f" [per iteration of {c.per_iteration_of}]"
            rows.append(f"{c.op:<20} {c.kind:<6} {ty:<20} {c.payload_bytes:>12} {c.bytes_moved:>12}  "
                        f"{c.reason}{rep} @ {c.location}")
            for k, (reason, loc, nbytes) in enumerate(c.members):
                rows.append(f"{'':<20}   [{k}] {nbytes:>8} bytes  {reason} @ {loc}")
        loops = " (while loops: one iteration each)" if any(c.per_iteration_of for c in self.collectives) else ""
        rows.append(f"{self.count} collective(s), {self.bytes_per_replica} bytes moved per replica per step "
                    f"({self.num_replicas} replicas){loops}")
        rows.append("tensor bytes: the size of the tensor reduced (or gathered, or broadcast); bytes moved: "
                    "what each replica sends per step for it with a ring algorithm (all-reduce 2(N-1)/N x "
                    "tensor bytes, all-gather and broadcast (N-1)/N x tensor bytes, reduce-scatter (N-1) x its "
                    "piece's bytes), times its repeats")
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.table()


def _traffic(op: Operation) -> str:
    """The traffic class the collective `op` declares (a key of `TRAFFIC`)."""
    traffic = declaration(op).traffic
    if traffic not in TRAFFIC:
        raise ValueError(f"internal error: collective {op.name} declares no traffic class (OpDef.traffic: "
                         f"one of {', '.join(TRAFFIC)}), so its bytes cannot be counted")
    return traffic


def _payload(op: Operation, n: int) -> int:
    """The bytes a collective carries: its results' (a bucket's, all of them); an
    `sx.all_gather_real`'s gathered tensor and every replica's count (its total is not sent)."""
    if op.name == "sx.all_gather_real":
        return op.results[0].type.nbytes + n * op.results[1].type.nbytes
    return sum(r.type.nbytes for r in op.results)


def collective_stats(module: Module) -> CollectiveStats:
    n = int(module.attrs.get("num_replicas", 1))
    stats = CollectiveStats(n)

    def walk(block: Block, repeats: int, loop: str) -> None:
        for op in block.ops:
            if is_collective(op):
                t = op.results[0].type
                nbytes = _payload(op, n)
                shape, members = t.shape, ()
                if op.name in ("sx.all_reduce_bucket", "sx.reduce_scatter_bucket"):  # one flat buffer of its tensors
                    shape = (sum(r.type.nbytes // r.type.dtype.itemsize for r in op.results),)
                    reasons = op.attrs.get("reasons") or [""] * len(op.results)
                    locs = op.attrs.get("locs") or ["?"] * len(op.results)
                    members = tuple(zip(reasons, locs, (r.type.nbytes for r in op.results)))
                traffic = _traffic(op)
                moved = TRAFFIC[traffic](nbytes, n) if n > 1 else 0
                stats.collectives.append(CollectiveInfo(
                    op.name, op.attrs.get("op", traffic), t.dtype.name, shape, nbytes,
                    moved * repeats, repeats, op.attrs.get("reason", ""),
                    str(op.loc) if op.loc else "?", members, loop))
            inner = repeats * op.attrs["length"] if op.name == "jax.scan" else repeats
            inner_loop = f"jax.while at {op.loc or '?'}" if op.name == "jax.while" else loop
            for region in op.regions:
                walk(region, inner, inner_loop)

    for f in module.funcs:
        walk(f.body, 1, "")
    return stats
