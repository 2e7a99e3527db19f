"""Value types of the IR: a tensor shape and dtype plus where the value lives."""
from __future__ import annotations

import enum
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .sharding import Sharding

# Short dtype names used in the text format, and their NumPy dtypes (bfloat16, int4 and float8
# from ml_dtypes, the package JAX takes them from).
_DTYPE_NAMES = {
    "bool": "bool", "i4": "int4", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u4": "uint4", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "c64": "complex64", "c128": "complex128",
    "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
}


def _load_dtypes() -> tuple[dict[str, np.dtype], dict[np.dtype, str]]:
    by_name = {}
    for short, long in _DTYPE_NAMES.items():
        dt = getattr(np, long, None) or getattr(ml_dtypes, long, None)
        if dt is not None:
            by_name[short] = np.dtype(dt)
    return by_name, {dt: short for short, dt in by_name.items()}


DTYPES, DTYPE_NAMES = _load_dtypes()


def dtype_name(dtype) -> str:
    """The text-format name of a dtype (`f32`), or TypeError when the IR cannot hold it."""
    try:
        return DTYPE_NAMES[np.dtype(dtype)]
    except (KeyError, TypeError) as e:
        raise TypeError(f"strategax IR has no type for dtype {dtype!r}") from e


class Locality(enum.Enum):
    """Whether a value may differ across replicas (per_replica) or is identical on all (mirrored)."""

    PER_REPLICA = "per_replica"
    MIRRORED = "mirrored"

    def join(self, other: "Locality | None") -> "Locality":
        if other is None:
            return self
        return Locality.PER_REPLICA if Locality.PER_REPLICA in (self, other) else Locality.MIRRORED


@dataclass(frozen=True)
class TensorType:
    """`f32[128,256] per_replica`: shape, dtype and (once known) locality."""

    shape: tuple[int, ...]
    dtype: np.dtype
    locality: Locality | None = None
    sharding: "Sharding | None" = None  # over the replica's logical devices, once known

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def with_locality(self, locality: Locality | None) -> "TensorType":
        return _copy(self, self.shape, self.dtype, locality, self.sharding)

    def with_sharding(self, sharding: "Sharding | None") -> "TensorType":
        return _copy(self, self.shape, self.dtype, self.locality, sharding)

    def same_tensor(self, other: "TensorType") -> bool:
        """Same shape and dtype, ignoring locality."""
        return self.shape == other.shape and self.dtype == other.dtype

    def __str__(self) -> str:
        text = self.__dict__.get("_text")  # remembered: a printed module repeats a few types
        if text is None:
            text = f"{dtype_name(self.dtype)}[{','.join(map(str, self.shape))}]"
            text = f"{text} {self.locality.value}" if self.locality else text
            text = f"{text} {self.sharding}" if self.sharding is not None else text
            object.__setattr__(self, "_text", text)
        return text

    @classmethod
    def of(cls, aval, locality: Locality | None = None) -> "TensorType":
        """From anything with `.shape` and `.dtype` (a JAX aval, an array)."""
        return cls(tuple(aval.shape), aval.dtype, locality)


def _copy(like: TensorType, shape, dtype, locality, sharding) -> TensorType:
    """A TensorType from already-normalised fields (passes make many; skips __post_init__)."""
    t = object.__new__(TensorType)
    d = t.__dict__
    d["shape"], d["dtype"], d["locality"], d["sharding"] = shape, dtype, locality, sharding
    return t
