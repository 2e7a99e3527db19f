"""`sx.all_reduce_bucket`: several all_reduces of one reduce op packed into one collective.

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
from jax.extend.core import Primitive
from jax.interpreters import mlir

from ..ir import Attr, Enum, Int, OpDef, Operation, Str, declare
from .collectives import REDUCE_OPS, mirrored, reduce_over_replicas, reference_reduce
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
