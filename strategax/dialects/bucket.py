"""`sx.all_reduce_bucket`: several all_reduces of one reduce op packed into one collective;
`sx.reduce_scatter_bucket`: several reduce-scatters likewise (a sharded optimizer's gradients),
lowered by the same per-backend rule (one collective of rows side by side; on CPU the members
over CPU_PACK_BYTES alone).

`fuse-collectives` makes it. N operands give N results (each the reduction of its operand);
`reasons` and `locs` keep every member's reason and source line so the dump's bucket table can
say where each tensor came from. How a bucket is lowered depends on the backend the program is
lowered for (JAX picks the rule per platform, also for `f.export(platforms=...)`):

- TPU and GPU (and any other): ONE flat collective: ravel, concatenate, one reduction, split,
  reshape, so the lowered program holds exactly one all_reduce per bucket; on these the
  copies are cheap next to the launches they save.
- CPU: members of at most CPU_PACK_BYTES share one flat collective, larger members are
  reduced on their own, and XLA:CPU combines these all_reduces into one tuple all_reduce.
  Each tuple element costs XLA:CPU a rendezvous of the device threads (~70 us on 8
  simulated devices over 2 cores) where the flat buffer's copies cost ~1 us per KB, so
  small tensors are copied and large ones are not: a 20-step loop of a 16-32-4 MLP ran 2.1x
  the hand-written flat step with one all_reduce per member, and the copies cost 2-4% of
  the 256-512-10 MLP step (docs/performance.md, issue 18). (A variadic all_reduce would keep
  one op without copies, but XLA's SPMD partitioner rejects it inside `shard_map`, JAX 0.10.2.)
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import core as jax_core
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import mlir

from ..ir import Attr, Enum, Int, OpDef, Operation, Str, declare
from .collectives import REDUCE_OPS, mirrored, padded, per_replica, reduce_over_replicas, reference_reduce, shard_size
from .registry import LOWERINGS, REFERENCE


def _verify_bucket(op: Operation) -> str | None:
    if len(op.operands) != len(op.results) or not op.operands:
        return f"needs as many results as operands (at least one), has {len(op.operands)} and {len(op.results)}"
    for i, (a, r) in enumerate(zip(op.operands, op.results)):
        if not a.type.same_tensor(r.type):
            return f"result {i} type {r.type} differs from operand type {a.type}"
    if len({a.type.dtype for a in op.operands}) != 1:
        return "every operand of a bucket has the same dtype"
    for key in ("reasons", "locs"):
        value = op.attrs.get(key)
        if value is not None and len(value) != len(op.operands):
            return f"`{key}` must be a list with one entry per operand"
    return None


declare(OpDef("sx.all_reduce_bucket", "All-reduce several tensors of one dtype as one flat collective.",
              attrs={"op": Enum(*REDUCE_OPS), "reason": Str(),
                     "reasons": Attr("strs", required=False), "locs": Attr("strs", required=False),
                     "bytes_per_pack": Int(minimum=0, required=False)},
              locality=mirrored, verify=_verify_bucket, is_collective=True, traffic="reduce",
              identity_on_one_replica=True))


def flat_bucket(*xs, op: str, axis_name):
    """The bucket as one flat collective (ravel, concatenate, reduce, split)."""
    flat = jnp.concatenate([jnp.ravel(x) for x in xs])
    reduced = reduce_over_replicas(op, flat, axis_name)
    outs, start = [], 0
    for x in xs:
        size = int(np.prod(x.shape, dtype=np.int64))
        outs.append(reduced[start:start + size].reshape(x.shape))
        start += size
    return outs


CPU_PACK_BYTES = 64 * 1024  # where copying a member costs XLA:CPU about one rendezvous


def cpu_bucket(*xs, op: str, axis_name):
    """The bucket on XLA:CPU: the small members as one flat collective, each large one alone."""
    small = [i for i, x in enumerate(xs) if x.size * x.dtype.itemsize <= CPU_PACK_BYTES]
    packed = dict(zip(small, flat_bucket(*[xs[i] for i in small], op=op, axis_name=axis_name))) \
        if len(small) > 1 else {}
    return [packed[i] if i in packed else reduce_over_replicas(op, x, axis_name) for i, x in enumerate(xs)]


# The lowering is chosen per platform when the program is lowered, not when it is traced.
bucket_p = Primitive("sx_all_reduce_bucket")
bucket_p.multiple_results = True
bucket_p.def_abstract_eval(lambda *xs, **params: list(xs))
mlir.register_lowering(bucket_p, mlir.lower_fun(flat_bucket, multiple_results=True))
mlir.register_lowering(bucket_p, mlir.lower_fun(cpu_bucket, multiple_results=True), platform="cpu")

LOWERINGS["sx.all_reduce_bucket"] = lambda op, args, ctx: bucket_p.bind(
    *args, op=op.attrs["op"], axis_name=ctx.axis_name)
REFERENCE["sx.all_reduce_bucket"] = lambda op, args, ctx: [
    [reference_reduce(op.attrs["op"], x)] * len(x) for x in args]


# --- sx.reduce_scatter_bucket: several reduce-scatters of one reduce op as one collective ------
def _verify_scatter_bucket(op: Operation) -> str | None:
    n = op.attrs["num_replicas"]
    if len(op.operands) != len(op.results) or not op.operands:
        return f"needs as many results as operands (at least one), has {len(op.operands)} and {len(op.results)}"
    for i, (a, r) in enumerate(zip(op.operands, op.results)):
        want = (shard_size(int(np.prod(a.type.shape, dtype=np.int64)), n),)
        if r.type.dtype != a.type.dtype or tuple(r.type.shape) != want:
            return f"result {i} type {r.type} is not 1/{n} of the flattened, padded operand {a.type}"
    if len({a.type.dtype for a in op.operands}) != 1:
        return "every operand of a bucket has the same dtype"
    for key in ("reasons", "locs", "serves"):
        value = op.attrs.get(key)
        if value is not None and len(value) != len(op.operands):
            return f"`{key}` must be a list with one entry per operand"
    return None


declare(OpDef("sx.reduce_scatter_bucket", "Reduce-scatter several tensors of one dtype as one collective: "
              "each replica gets its piece of every reduction.",
              attrs={"op": Enum("sum", "mean"), "num_replicas": Int(1), "reason": Str(),
                     "reasons": Attr("strs", required=False), "locs": Attr("strs", required=False),
                     "serves": Attr("strs", required=False), "bytes_per_pack": Int(minimum=0, required=False)},
              locality=per_replica, verify=_verify_scatter_bucket, is_collective=True, traffic="scatter"))


def flat_scatter_bucket(*xs, op: str, n: int, axis_name):
    """Each member flattened, padded and laid out as N rows of its piece; the rows side by side;
    one reduce-scatter of the rows; the pieces cut apart."""
    ks = [shard_size(x.size, n) for x in xs]
    rows = jnp.concatenate([padded(x, n, jnp).reshape(n, k) for x, k in zip(xs, ks)], axis=1)
    mine = lax.psum_scatter(rows, axis_name, scatter_dimension=0, tiled=True).reshape(-1)
    if op == "mean":
        mine = mine / n if jnp.issubdtype(mine.dtype, jnp.inexact) else mine // n
    return list(jnp.split(mine, np.cumsum(ks)[:-1]))


def cpu_scatter_bucket(*xs, op: str, n: int, axis_name):
    """On XLA:CPU, as `cpu_bucket`: the small members as one collective, each large one alone
    (laying out a large gradient as rows would copy it, for one rendezvous saved)."""
    small = [i for i, x in enumerate(xs) if x.size * x.dtype.itemsize <= CPU_PACK_BYTES]
    packed = dict(zip(small, flat_scatter_bucket(*[xs[i] for i in small], op=op, n=n, axis_name=axis_name))) \
        if len(small) > 1 else {}
    return [packed[i] if i in packed else flat_scatter_bucket(x, op=op, n=n, axis_name=axis_name)[0]
            for i, x in enumerate(xs)]


scatter_bucket_p = Primitive("sx_reduce_scatter_bucket")
scatter_bucket_p.multiple_results = True
scatter_bucket_p.def_abstract_eval(lambda *xs, op, n, axis_name: [
    jax_core.ShapedArray((shard_size(x.size, n),), x.dtype) for x in xs])
mlir.register_lowering(scatter_bucket_p, mlir.lower_fun(flat_scatter_bucket, multiple_results=True))
mlir.register_lowering(scatter_bucket_p, mlir.lower_fun(cpu_scatter_bucket, multiple_results=True), platform="cpu")


def _lower_scatter_bucket(op, args, ctx):
    n = op.attrs["num_replicas"]
    if n == 1:
        return [jnp.reshape(x, (-1,)) for x in args]
    pieces = scatter_bucket_p.bind(*args, op=op.attrs["op"], n=n, axis_name=ctx.axis_name)
    return [piece.astype(r.type.dtype) for piece, r in zip(pieces, op.results)]


def _reference_scatter_bucket(op, args, ctx):
    n = op.attrs["num_replicas"]
    out = []
    for values, r in zip(args, op.results):
        k = r.type.shape[0]
        whole = padded(reference_reduce(op.attrs["op"], values), n, np)
        out.append([whole[i * k:(i + 1) * k] for i in ctx.replica_ids])
    return out


LOWERINGS["sx.reduce_scatter_bucket"] = _lower_scatter_bucket
REFERENCE["sx.reduce_scatter_bucket"] = _reference_scatter_bucket
