"""compress-collectives: send gradient all_reduces in a narrower float type (bf16 or f16).

An `sx.all_reduce` SUM or MEAN of float32/float64 values that asks for it (its `compression`
attribute, set from `CommunicationOptions(compression=...)` on `all_reduce`/`batch_reduce_to`
or the strategy's `communication_options`) becomes: `sx.convert` to the narrow type, the
all_reduce in that type (summed in it, as PyTorch DDP's bf16/fp16 compression hooks do), and
`sx.convert` back to the original type; each convert's `reason` says why, and the all_reduce's
reason notes the type on the wire, so bytes moved (`f.stats()`) are halved from float32. The
pass option `dtype` also compresses the reductions that carry gradients without asking: those
of `ReplicaContext.all_reduce`, `batch_reduce_to` and the gradients of all_reduces (the op's
`carries` attribute says which: never its reason text). Variable
aggregation (an update's SUM/MEAN of a mirrored variable, a sync-on-read variable's read) is
never compressed: a request on one is an error. Idempotent: a compressed all_reduce carries
the narrow type and no request. Runs before `fuse-collectives`, which buckets by dtype.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..dialects.collectives import COMPRESSIONS, compressible
from ..errors import DistributionValueError
from ..ir import DTYPES, Module, Operation, TensorType, Value, dtype_name
from .manager import PassOptionError
from .rewrite import BlockRewriter, rewrite_blocks


def is_aggregation(op: Operation) -> bool:
    """An all_reduce that insert-collectives made for a variable's aggregation."""
    return op.attrs.get("carries") == "variable"


def carries_gradients(op: Operation) -> bool:
    """A reduction of gradients (the `dtype` option's reach): see collectives.CARRIES."""
    return op.attrs.get("carries") == "gradient"


def _target(op: Operation, default: str | None) -> str | None:
    """The type `op` is to be sent in, or None."""
    if op.name not in ("sx.all_reduce", "sx.reduce_scatter"):
        return None
    asked = op.attrs.get("compression")
    if asked is not None and is_aggregation(op):
        raise DistributionValueError(
            f"compression={asked!r} on a variable's aggregation ({op.attrs['reason']}): variable "
            "aggregation is never compressed", "remove the compression attribute from this all_reduce",
            op=op)
    if asked is None and (default is None or is_aggregation(op) or not carries_gradients(op)):
        return None
    if not compressible(op.attrs["op"], op.operands[0].type.dtype):
        return None
    return asked or default


def _in(t: TensorType, dtype: np.dtype) -> TensorType:
    return TensorType(t.shape, dtype, t.locality, t.sharding)


def compress(op: Operation, dtype: str, why: str) -> tuple[Operation, Operation, Operation]:
    """The convert in, the all_reduce in `dtype` (op's result now comes from the convert out)
    and the convert out that replace `op`."""
    x, wide = op.operands[0], op.result.type
    narrow = DTYPES[dtype]
    reason = op.attrs["reason"]
    send = Value(_in(x.type, narrow))
    into = Operation("sx.convert", [x], [send],
                     {"reason": f"compress-collectives: {reason} sent as {dtype} ({why})"}, loc=op.loc)
    attrs = {k: v for k, v in op.attrs.items() if k != "compression"}
    attrs["reason"] = f"{reason} ({dtype} on the wire)"
    summed = Value(_in(wide, narrow))
    reduce = Operation(op.name, [send], [summed], attrs, loc=op.loc)
    back = Operation("sx.convert", [summed], [Value(wide, op.result.name)],
                     {"reason": f"compress-collectives: {reason} back to {dtype_name(wide.dtype)}"}, loc=op.loc)
    return into, reduce, back


def compress_block(rw: BlockRewriter, default: str | None) -> None:
    """Compress the all_reduces of `rw`'s block that ask for it (or, with `default`, carry gradients)."""
    for op in rw.ops():
        dtype = _target(op, default)
        if dtype is None:
            continue
        why = (f"CommunicationOptions(compression={dtype!r})" if "compression" in op.attrs
               else f"compress-collectives{{dtype={dtype}}}")
        casts = compress(op, dtype, why)
        rw.insert_before(op, list(casts))
        rw.replace(op, [casts[-1].result])


@dataclass(frozen=True)
class CompressCollectives:
    """Send the all_reduces that ask for it (or, with `dtype`, every gradient reduction) in bf16 or f16."""

    name: ClassVar[str] = "compress-collectives"
    requires: ClassVar[tuple[str, ...]] = ()
    dtype: str = ""  # "bf16" or "f16": also the gradient reductions that do not ask

    def __post_init__(self):
        if self.dtype not in ("",) + COMPRESSIONS:
            raise PassOptionError(f"pass 'compress-collectives': option 'dtype' takes "
                                  f"{' or '.join(COMPRESSIONS)}, not {self.dtype!r}")

    def apply(self, module: Module) -> bool:
        return rewrite_blocks(module, lambda rw: compress_block(rw, self.dtype or None))
