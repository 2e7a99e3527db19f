"""strategax's own ops (`sx.*`): constants and the cross-replica operations.

Each op is whole here: its declaration (`OpDef`), its JAX primitive (what tracing binds, named
like the op so the importer turns it into that op), abstract evaluation with the collective
effect, AD (TensorFlow's rule: the gradient of an all_reduce is the same all_reduce of the
gradient), batching, the JAX lowering (inside `shard_map` over the `replica` axis) and the
reference-interpreter rule (a list holding one value per replica).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import core as jax_core
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching

from ..errors import DistributionTypeError, DistributionValueError
from ..ir import Attr, Enum, Int, Locality, OpDef, Operation, Splat, Str, declare, dense_array, dtype_name
from .effects import COLLECTIVE
from .primitives import register_primitive
from .registry import LOWERINGS, REFERENCE

REDUCE_OPS = ("sum", "mean", "max", "min")
COMPRESSIONS = ("bf16", "f16")  # the types compress-collectives sends reductions in


def mirrored(op, localities):
    return [Locality.MIRRORED] * len(op.results)


def per_replica(op, localities):
    return [Locality.PER_REPLICA] * len(op.results)


def same_type(op: Operation) -> str | None:
    if not op.operands[0].type.same_tensor(op.results[0].type):
        return f"result type {op.results[0].type} differs from operand type {op.operands[0].type}"
    return None


def primitive(name: str) -> Primitive:
    """A strategax primitive, findable by the importer under its op name."""
    p = Primitive(name)
    p.def_impl(_no_impl)
    register_primitive(p)
    return p


def _no_impl(*args, **params):
    raise RuntimeError("strategax distribution primitives only run inside a compiled strategax "
                       "program; call them inside strategy.run")


# --- sx.constant: a literal array --------------------------------------------------------
def _verify_constant(op: Operation) -> str | None:
    value = op.attrs["value"]
    if value.shape != op.result.type.shape or value.dtype != op.result.type.dtype:
        return f"`value` is {value.dtype}{list(value.shape)} but the result is {op.result.type}"
    return None


declare(OpDef("sx.constant", "A literal array, the same on every replica.", num_operands=0,
              num_results=1, attrs={"value": Attr("dense")}, locality=mirrored,
              verify=_verify_constant))


def _lower_constant(op, args, ctx):
    value = op.attrs["value"]
    if isinstance(value, Splat):  # a broadcast scalar in the program, never a host array
        return [jnp.full(value.shape, np.asarray(value.value), value.dtype)]
    return [jnp.asarray(value)]


LOWERINGS["sx.constant"] = _lower_constant
REFERENCE["sx.constant"] = lambda op, args, ctx: [[dense_array(op.attrs["value"])] * ctx.num_replicas]


# --- sx.replica_id: this replica's index in the sync group --------------------------------
declare(OpDef("sx.replica_id", "`replica_id_in_sync_group`: this replica's index (i32[]).",
              num_operands=0, num_results=1, attrs={}, locality=per_replica))
replica_id_p = primitive("sx.replica_id")
replica_id_p.def_abstract_eval(lambda: jax_core.ShapedArray((), np.dtype(np.int32)))
LOWERINGS["sx.replica_id"] = lambda op, args, ctx: [lax.axis_index(ctx.axis_name).astype(jnp.int32)]
REFERENCE["sx.replica_id"] = lambda op, args, ctx: [[np.int32(i) for i in ctx.replica_ids]]


def replica_id():
    """This replica's index (traced)."""
    return replica_id_p.bind()


# --- sx.all_reduce: every replica gets the reduction of all replicas' values ---------------
# What an all_reduce carries, where a pass must know it (compress-collectives): "variable", the
# aggregation insert-collectives adds for a variable; "gradient", a reduction of gradients (an
# all_reduce's or all_gather's transpose, and ReplicaContext.all_reduce / batch_reduce_to, where
# a custom training loop reduces its gradients). Absent: a value the user reduces.
CARRIES = ("gradient", "variable")
declare(OpDef("sx.all_reduce", "Reduce (sum, mean, max, min) a value over all replicas.",
              num_operands=1, num_results=1,
              attrs={"op": Enum(*REDUCE_OPS), "reason": Str(),
                     "bytes_per_pack": Int(minimum=0, required=False),
                     "compression": Enum(*COMPRESSIONS, required=False),
                     "carries": Enum(*CARRIES, required=False)},
              locality=mirrored, verify=same_type, is_collective=True, traffic="reduce",
              identity_on_one_replica=True))
all_reduce_p = primitive("sx.all_reduce")
all_reduce_p.def_effectful_abstract_eval(
    lambda x, **params: (jax_core.ShapedArray(x.shape, x.dtype), {COLLECTIVE}))


def _all_reduce_transpose(ct, x, *, op, reason, **extra):
    if op not in ("sum", "mean"):
        raise TypeError(f"all_reduce({op.upper()}) is not differentiable; use SUM or MEAN")
    extra["carries"] = "gradient"
    return [all_reduce_p.bind(ct, op=op, reason=f"gradient of {reason}", **extra)]


ad.deflinear2(all_reduce_p, _all_reduce_transpose)
# A reduction over replicas is elementwise in every other axis: a batch of values reduces as one.
batching.primitive_batchers[all_reduce_p] = lambda args, dims, **params: (
    all_reduce_p.bind(*args, **params), dims[0])

_LAX_REDUCE = {"sum": lax.psum, "mean": lax.pmean, "max": lax.pmax, "min": lax.pmin}


def reduce_over_replicas(kind: str, x, axis_name):
    """The lax collective for reduce op `kind`."""
    return _LAX_REDUCE[kind](x, axis_name)


def reference_reduce(kind: str, values: list) -> np.ndarray:
    """The reduction of one value per replica, as the reference interpreter computes it. A
    narrow float's sum (a compressed gradient's) follows XLA:CPU, whose rounding it shares:
    bf16 summed in float32 and rounded once, f16 summed in f16 in replica order."""
    stacked = np.stack([np.asarray(x) for x in values])
    narrow = jnp.issubdtype(stacked.dtype, jnp.floating) and stacked.dtype.itemsize < 4
    if narrow and kind in ("sum", "mean"):
        if stacked.dtype == jnp.bfloat16:
            total = stacked.astype(np.float32).sum(0).astype(stacked.dtype)
        else:
            total = stacked[0]
            for x in stacked[1:]:
                total = total + x
        return np.asarray(total / np.asarray(len(values), stacked.dtype) if kind == "mean" else total)
    if kind == "mean":
        total = stacked.sum(0)
        out = total / len(values) if jnp.issubdtype(stacked.dtype, jnp.inexact) else total // len(values)
    else:
        out = {"sum": stacked.sum, "max": stacked.max, "min": stacked.min}[kind](0)
    return np.asarray(out, dtype=stacked.dtype)


LOWERINGS["sx.all_reduce"] = lambda op, args, ctx: [
    reduce_over_replicas(op.attrs["op"], args[0], ctx.axis_name)]
REFERENCE["sx.all_reduce"] = lambda op, args, ctx: [
    [reference_reduce(op.attrs["op"], args[0])] * len(args[0])]


def all_reduce(x, op: str, reason: str, *, bytes_per_pack: int | None = None, compression: str | None = None,
               carries: str | None = None):
    """All-reduce `x`; `bytes_per_pack` (from CommunicationOptions) becomes an op attribute that
    `fuse-collectives` reads (absent or 0: the pass's default, 64 KiB buckets);
    `compression` ("bf16", "f16") one that `compress-collectives` reads, kept only where it
    can apply: a SUM or MEAN of a float type wider than it; `carries` one of CARRIES."""
    x = jnp.asarray(x)
    extra: dict[str, int | str] = {} if bytes_per_pack is None else {"bytes_per_pack": int(bytes_per_pack)}
    if compression is not None and compressible(op, x.dtype):
        extra["compression"] = compression
    if carries is not None:
        extra["carries"] = carries
    return all_reduce_p.bind(x, op=op, reason=reason, **extra)


def compressible(op: str, dtype) -> bool:
    """Whether an all_reduce `op` of `dtype` values can be sent in a narrower float: a SUM or
    MEAN of float32/float64 (integers would lose exactness, MAX and MIN gain nothing)."""
    return op in ("sum", "mean") and np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.float64))


# --- sx.convert: a collective's payload in another float type (compress-collectives) -------
def _verify_convert(op: Operation) -> str | None:
    src, dst = op.operands[0].type, op.results[0].type
    floats = jnp.issubdtype(src.dtype, jnp.floating) and jnp.issubdtype(dst.dtype, jnp.floating)
    if src.shape != dst.shape or not floats:
        return f"sx.convert changes a float type only, not {src} to {dst}"
    return None


declare(OpDef("sx.convert", "The value in the result's float type, for a collective; `reason` says why.",
              num_operands=1, num_results=1, attrs={"reason": Str()}, verify=_verify_convert))
LOWERINGS["sx.convert"] = lambda op, args, ctx: [args[0].astype(op.result.type.dtype)]
REFERENCE["sx.convert"] = lambda op, args, ctx: [
    [np.asarray(jnp.asarray(x).astype(op.result.type.dtype)) for x in args[0]]]


# --- sx.all_gather: every replica gets all replicas' values concatenated along `axis` ------
def _verify_all_gather(op: Operation) -> str | None:
    src, dst = op.operands[0].type, op.results[0].type
    axis = op.attrs["axis"]
    if not 0 <= axis < max(len(src.shape), 1):
        return f"`axis` {axis!r} is out of range for {src}"
    if src.dtype != dst.dtype or len(src.shape) != len(dst.shape) or any(
            a != b for i, (a, b) in enumerate(zip(src.shape, dst.shape)) if i != axis):
        return f"result type {dst} is not operand type {src} gathered along axis {axis}"
    n = op.attrs.get("num_replicas")
    if n is not None and src.shape and dst.shape[axis] != src.shape[axis] * n:
        return f"result type {dst} is not operand type {src} gathered along axis {axis} from {n} replicas"
    return None


declare(OpDef("sx.all_gather", "Concatenate every replica's value along `axis`.",
              num_operands=1, num_results=1,
              attrs={"axis": Int(minimum=0), "reason": Str(), "num_replicas": Int(1, required=False)},
              locality=mirrored, verify=_verify_all_gather, is_collective=True, traffic="gather",
              identity_on_one_replica=True))
all_gather_p = primitive("sx.all_gather")


def _all_gather_abstract(x, *, axis, num_replicas, reason):
    shape = list(x.shape)
    shape[axis] *= num_replicas
    return jax_core.ShapedArray(tuple(shape), x.dtype), {COLLECTIVE}


all_gather_p.def_effectful_abstract_eval(_all_gather_abstract)


def _all_gather_transpose(ct, x, *, axis, num_replicas, reason):
    # Each replica's piece receives the sum over replicas of that piece's cotangent.
    total = all_reduce_p.bind(ct, op="sum", reason=f"gradient of {reason}", carries="gradient")
    size = total.shape[axis] // num_replicas
    start = replica_id() * size
    return [lax.dynamic_slice_in_dim(total, start, size, axis)]


ad.deflinear2(all_gather_p, _all_gather_transpose)


def _all_gather_batch(args, dims, *, axis, num_replicas, reason):
    # The gathered axis moves one place right when the batch axis sits before it.
    (x,), (b,) = args, dims
    return all_gather_p.bind(x, axis=axis + (b <= axis), num_replicas=num_replicas, reason=reason), b


batching.primitive_batchers[all_gather_p] = _all_gather_batch
LOWERINGS["sx.all_gather"] = lambda op, args, ctx: [
    lax.all_gather(args[0], ctx.axis_name, axis=op.attrs["axis"], tiled=True)]
REFERENCE["sx.all_gather"] = lambda op, args, ctx: [
    [np.concatenate([np.asarray(x) for x in args[0]], axis=op.attrs["axis"])] * len(args[0])]



# --- sx.all_gather_real: an all_gather of padded values that keeps only the real entries -----
def _verify_all_gather_real(op: Operation) -> str | None:
    (src, count), (dst, total) = [v.type for v in op.operands], [v.type for v in op.results]
    axis, n = op.attrs["axis"], op.attrs["num_replicas"]
    if not 0 <= axis < len(src.shape):
        return f"`axis` {axis!r} is out of range for {src}"
    if dst.dtype != src.dtype or tuple(dst.shape) != tuple(
            d * n if i == axis else d for i, d in enumerate(src.shape)):
        return f"result type {dst} is not operand type {src} gathered along axis {axis} from {n} replicas"
    if count.shape != () or total.shape != () or count.dtype != total.dtype \
            or not np.issubdtype(count.dtype, np.integer):
        return f"the extents must be integer scalars of one dtype, not {count} and {total}"
    return None


declare(OpDef("sx.all_gather_real", "Concatenate the first `count` entries along `axis` of every "
              "replica's value (its real extent; the rest is padding) and return them first, padded "
              "with zeros to the gathered size, with their total count (mask-padding makes it from an "
              "sx.all_gather of a padded axis).",
              num_operands=2, num_results=2,
              attrs={"axis": Int(minimum=0), "num_replicas": Int(1), "reason": Str()},
              locality=mirrored, verify=_verify_all_gather_real, is_collective=True, traffic="gather",
              identity_on_one_replica=True))


def _compact(pieces, counts, axis: int, xp):
    """The first counts[r] entries along `axis` of each of the len(counts) equal `pieces` (one
    array, concatenated), moved to the front; the rest zeros; and their total."""
    n = counts.shape[0]
    size = pieces.shape[axis] // n
    ends = xp.cumsum(counts)
    total = ends[-1]
    j = xp.arange(n * size)
    r = xp.clip(xp.searchsorted(ends, j, side="right"), 0, n - 1)
    valid = j < total
    src = xp.where(valid, r * size + j - (ends - counts)[r], 0)
    shape = [1] * pieces.ndim
    shape[axis] = n * size
    out = xp.where(valid.reshape(shape), xp.take(pieces, src, axis=axis), xp.zeros((), pieces.dtype))
    return out.astype(pieces.dtype), total.astype(counts.dtype)


def _lower_all_gather_real(op, args, ctx):
    x, count = args
    pieces = lax.all_gather(x, ctx.axis_name, axis=op.attrs["axis"], tiled=True)
    counts = lax.all_gather(count.reshape((1,)), ctx.axis_name, axis=0, tiled=True)
    return list(_compact(pieces, counts, op.attrs["axis"], jnp))


def _reference_all_gather_real(op, args, ctx):
    xs, counts = ([np.asarray(v) for v in a] for a in args)
    out, total = _compact(np.concatenate(xs, axis=op.attrs["axis"]), np.stack(counts), op.attrs["axis"], np)
    return [[out] * len(xs), [total] * len(xs)]


LOWERINGS["sx.all_gather_real"] = _lower_all_gather_real
REFERENCE["sx.all_gather_real"] = _reference_all_gather_real

def check_axis_type(axis, api: str, allow_none: bool = False) -> None:
    """`axis` is a Python (or NumPy) int (or None where `allow_none`), not a string or bool."""
    if axis is None and allow_none:
        return
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise DistributionTypeError(
            f"{api}: axis must be an int{' or None' if allow_none else ''}, not "
            f"{type(axis).__name__} {axis!r}", "pass an int axis, e.g. axis=0 for the batch axis")


def check_axis(axis, ndim: int, api: str) -> int:
    """`axis` in [-ndim, ndim) for a value of rank `ndim`, as a non-negative int (TensorFlow
    raises for an axis out of range; it must not wrap around)."""
    check_axis_type(axis, api)
    if not -ndim <= int(axis) < ndim:
        raise DistributionValueError(
            f"{api}: axis {axis} is out of range for a value of rank {ndim} "
            f"(valid: {-ndim}..{ndim - 1})" if ndim else f"{api}: axis {axis} given for a scalar value",
            "pass an axis of the per-replica value (0 is the batch axis)" if ndim else
            "reduce a scalar without an axis (axis=None), or give it a dimension (x[None])")
    return int(axis) % ndim


def all_gather(x, axis: int, num_replicas: int, reason: str):
    """Every replica's `x` concatenated along `axis` (traced)."""
    x = jnp.asarray(x)
    if x.ndim == 0:
        raise DistributionValueError("all_gather of a scalar: there is no axis to concatenate along",
                                     "gather a value of rank >= 1 (e.g. x[None])")
    axis = check_axis(axis, x.ndim, reason)
    return all_gather_p.bind(x, axis=axis, num_replicas=num_replicas, reason=reason)


# --- sx.shard / sx.reduce_scatter: a value held 1/N per replica (sx.Optimizer(shard_state=True)) --
# A sharded value is the flattened value, padded with zeros to a multiple of N, cut in N equal
# pieces; replica r holds piece r (`shard_size` elements). `sx.shard` takes this replica's piece
# of its own value (no communication); `sx.reduce_scatter` takes this replica's piece of the
# reduction over replicas, sending 1/N of what an all_reduce sends; `sx.all_gather` (axis 0) of
# the pieces, cut to the size, is the whole value again. shard-optimizer-state rewrites
# `sx.shard(sx.all_reduce(x))` into `sx.reduce_scatter(x)`; `serves` names the variable.
def shard_size(size: int, num_replicas: int) -> int:
    """The elements each replica holds of a value of `size` elements split in `num_replicas`."""
    return -(-int(size) // int(num_replicas))


def _verify_sharded(op: Operation) -> str | None:
    src, dst = op.operands[0].type, op.results[0].type
    size = int(np.prod(src.shape, dtype=np.int64))
    want = (shard_size(size, op.attrs["num_replicas"]),)
    if src.dtype != dst.dtype or tuple(dst.shape) != want:
        return (f"result type {dst} is not 1/{op.attrs['num_replicas']} of the flattened, padded "
                f"operand {src} (want {dtype_name(src.dtype)}{list(want)})")
    return None


_SHARD_ATTRS = {"num_replicas": Int(1), "reason": Str(), "serves": Str(required=False)}
declare(OpDef("sx.shard", "This replica's piece of its value, flattened and padded with zeros to a "
              "multiple of `num_replicas` (no communication).", num_operands=1, num_results=1,
              attrs=_SHARD_ATTRS, locality=per_replica, verify=_verify_sharded))
declare(OpDef("sx.reduce_scatter", "This replica's piece (as `sx.shard` cuts it) of the reduction "
              "(sum or mean) of the value over all replicas.", num_operands=1, num_results=1,
              attrs={**_SHARD_ATTRS, "op": Enum("sum", "mean"),
                     "bytes_per_pack": Int(minimum=0, required=False),
                     "compression": Enum(*COMPRESSIONS, required=False),
                     "carries": Enum(*CARRIES, required=False)},
              locality=per_replica, verify=_verify_sharded, is_collective=True, traffic="scatter"))
shard_p = primitive("sx.shard")
reduce_scatter_p = primitive("sx.reduce_scatter")


def _sharded_abstract(x, *, num_replicas, **params):
    return jax_core.ShapedArray((shard_size(x.size, num_replicas),), x.dtype)


shard_p.def_abstract_eval(_sharded_abstract)
reduce_scatter_p.def_effectful_abstract_eval(lambda x, **params: (_sharded_abstract(x, **params), {COLLECTIVE}))


def padded(x, n: int, xp):
    """`x` flattened and padded with zeros to a multiple of n."""
    flat = xp.reshape(x, (-1,))
    return xp.pad(flat, (0, shard_size(flat.shape[0], n) * n - flat.shape[0]))


def unshard(pieces, shape: tuple, xp=jnp):
    """The whole value of `shape` from all pieces concatenated (the padding cut off)."""
    size = int(np.prod(shape, dtype=np.int64))
    return xp.reshape(pieces[:size], shape)


def _scatter_back(ct, x_aval, n: int):
    """Transpose of taking this replica's piece: the piece in place, zeros elsewhere."""
    k = ct.shape[0]
    whole = lax.dynamic_update_slice_in_dim(jnp.zeros((k * n,), ct.dtype), ct, replica_id() * k, 0)
    return unshard(whole, x_aval.shape)


def _shard_transpose(ct, x, *, num_replicas, reason, **params):
    return [_scatter_back(ct, x.aval, num_replicas)]


def _reduce_scatter_transpose(ct, x, *, op, num_replicas, reason, **params):
    whole = all_gather_p.bind(ct, axis=0, num_replicas=num_replicas, reason=f"gradient of {reason}")
    if op == "mean":
        whole = whole / np.asarray(num_replicas, whole.dtype)
    return [unshard(whole, x.aval.shape)]


def _no_batching(name: str):
    def rule(args, dims, **params):
        raise DistributionValueError(f"{name} inside jax.vmap: a sharded value is one flat piece per replica",
                                     "apply it outside the vmapped function")
    return rule


ad.deflinear2(shard_p, _shard_transpose)
ad.deflinear2(reduce_scatter_p, _reduce_scatter_transpose)
batching.primitive_batchers[shard_p] = _no_batching("sx.shard")
batching.primitive_batchers[reduce_scatter_p] = _no_batching("sx.reduce_scatter")


def _lower_shard(op, args, ctx):
    n = op.attrs["num_replicas"]
    k = op.result.type.shape[0]
    if n == 1:  # the whole value: no replica index (one replica of several logical devices has none)
        return [jnp.reshape(args[0], (-1,))]
    return [lax.dynamic_slice_in_dim(padded(args[0], n, jnp), lax.axis_index(ctx.axis_name) * k, k)]


def _lower_reduce_scatter(op, args, ctx):
    n = op.attrs["num_replicas"]
    if n == 1:  # a reduction over one replica: the flattened value, no collective
        return [jnp.reshape(args[0], (-1,))]
    piece = lax.psum_scatter(padded(args[0], n, jnp), ctx.axis_name, scatter_dimension=0, tiled=True)
    if op.attrs["op"] == "mean":
        piece = piece / n if jnp.issubdtype(piece.dtype, jnp.inexact) else piece // n
    return [piece.astype(op.result.type.dtype)]


def _reference_pieces(op, values: list, ctx) -> list:
    k = op.result.type.shape[0]
    return [np.asarray(v)[r * k:(r + 1) * k] for v, r in zip(values, ctx.replica_ids)]


LOWERINGS["sx.shard"] = _lower_shard
LOWERINGS["sx.reduce_scatter"] = _lower_reduce_scatter
REFERENCE["sx.shard"] = lambda op, args, ctx: [_reference_pieces(
    op, [padded(np.asarray(x), op.attrs["num_replicas"], np) for x in args[0]], ctx)]
REFERENCE["sx.reduce_scatter"] = lambda op, args, ctx: [_reference_pieces(
    op, [padded(reference_reduce(op.attrs["op"], args[0]), op.attrs["num_replicas"], np)] * len(args[0]), ctx)]


def shard(x, num_replicas: int, reason: str, serves: str | None = None):
    """This replica's piece of `x` (traced): flattened, padded to a multiple of `num_replicas`."""
    extra = {} if serves is None else {"serves": serves}
    return shard_p.bind(jnp.asarray(x), num_replicas=int(num_replicas), reason=reason, **extra)


def reduce_scatter(x, op: str, num_replicas: int, reason: str, serves: str | None = None):
    """This replica's piece of the reduction of `x` over replicas (traced)."""
    extra = {} if serves is None else {"serves": serves}
    return reduce_scatter_p.bind(jnp.asarray(x), op=op, num_replicas=int(num_replicas), reason=reason, **extra)
