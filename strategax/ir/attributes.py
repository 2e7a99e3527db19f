"""Attribute values: which Python values an op may carry, and how each prints as text.

Attributes are plain literals (numbers, strings, tuples, dtypes, dense arrays) plus a
whitelist of JAX enums and records. The parser rebuilds them from this whitelist only, so
reading IR text never runs code.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jex_core

from .types import DTYPE_NAMES, TensorType, dtype_name


@dataclass(frozen=True)
class SymbolRef:
    """A reference to a module-level symbol (a variable): `@w1`."""

    name: str


class Splat:
    """`dense<f32[1000000]: splat 0.0>`: a dense literal whose elements all equal one scalar, kept
    as that scalar until lowered (`np.asarray(splat)` or `.materialize()` builds the array), so a
    huge constant costs nothing to parse, print, verify or optimise."""

    __slots__ = ("value", "shape")

    def __init__(self, value: np.generic, shape: tuple[int, ...]):
        self.value = value  # a NumPy scalar of the literal's dtype
        self.shape = tuple(shape)

    @property
    def dtype(self) -> np.dtype:
        return self.value.dtype

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def materialize(self) -> np.ndarray:
        return np.full(self.shape, self.value, dtype=self.dtype)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        array = self.materialize()
        return array if dtype is None else array.astype(dtype)

    def _key(self) -> tuple:  # by bits: splats of 0.0 and -0.0 differ, NaN equals itself
        return (self.shape, self.dtype.str, self.value.tobytes())

    def __eq__(self, other) -> bool:
        return isinstance(other, Splat) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Splat({self.value!r}, {self.shape})"


def dense_array(value: "np.ndarray | Splat") -> np.ndarray:
    """A dense attribute value as an array (a splat materialised)."""
    return value.materialize() if isinstance(value, Splat) else value


# Enums and records an attribute may hold, by the name they print with.
ENUMS: dict[str, type[enum.Enum]] = {
    c.__name__: c
    for c in (lax.Precision, lax.GatherScatterMode, lax.RoundingMethod, lax.FftType,
              lax.DotAlgorithmPreset)
}
RECORDS: dict[str, type] = {
    c.__name__: c
    for c in (lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers, lax.ConvDimensionNumbers)
}


# Primitives an attribute may name (`#primitive<"ge">`, e.g. the `select_prim` of the
# `select_and_scatter_add` that max pooling's gradient makes): JAX's own, found through
# `jax.extend.core.primitives`, and any other one the importer has met in this process.
_PRIMITIVES: dict[str, jex_core.Primitive] = {}
_jax_primitives_loaded = False


def register_primitive(prim: jex_core.Primitive) -> None:
    """Make `prim` findable by name, for `#primitive<"name">` and for `jax.<name>` ops."""
    _PRIMITIVES.setdefault(prim.name, prim)


def find_primitive(name: str) -> jex_core.Primitive | None:
    """The primitive called `name`: one JAX exports or one registered; None if there is none."""
    global _jax_primitives_loaded
    if not _jax_primitives_loaded:
        from jax.extend.core import primitives

        _jax_primitives_loaded = True
        for value in vars(primitives).values():
            if isinstance(value, jex_core.Primitive):
                register_primitive(value)
    return _PRIMITIVES.get(name)


def record_fields(value: Any) -> list[str]:
    """The field names of a whitelisted record, in constructor order."""
    if hasattr(value, "_fields"):
        return list(value._fields)
    return [f.name for f in dataclasses.fields(value)]


def normalize(value: Any, where: str = "attribute") -> Any:
    """Turn a primitive parameter into an attribute value, or raise TypeError if it has none."""
    if value is None or isinstance(value, (bool, str, SymbolRef)):
        return value
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, enum.Enum):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, enum.Enum) and type(value).__name__ in ENUMS:
        return value
    if isinstance(value, jex_core.Primitive):
        register_primitive(value)
        if find_primitive(value.name) is value:
            return value
    if type(value).__name__ in RECORDS and isinstance(value, RECORDS[type(value).__name__]):
        return type(value)(*[normalize(getattr(value, f), where) for f in record_fields(value)])
    if isinstance(value, tuple):
        return tuple(normalize(v, where) for v in value)
    if isinstance(value, list):
        return [normalize(v, where) for v in value]
    if isinstance(value, (np.ndarray, Splat)):
        dtype_name(value.dtype)
        return value
    if isinstance(value, (np.dtype, type)):
        try:
            dtype = np.dtype(value)
        except TypeError:
            dtype = None
        if dtype in DTYPE_NAMES:
            return dtype
    return _unsupported(value, where)


def _unsupported(value: Any, where: str):
    raise TypeError(f"{where}: strategax IR cannot represent {type(value).__name__} value {value!r}")


def format_float(x: float) -> str:
    """Shortest text that reads back to the same float (`1.0`, `1e-05`, `inf`, `nan`)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def _format_scalar(x: Any) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (float, np.floating)):
        return format_float(float(x))
    if isinstance(x, (complex, np.complexfloating)):
        return f"({format_float(x.real)}, {format_float(x.imag)})"
    return str(int(x))


def format_dense(array: np.ndarray) -> str:
    """`dense<f32[2]: 1.0, 2.0>`; all-equal arrays print as `dense<f32[1000]: splat 0.0>`."""
    ty = TensorType(array.shape, array.dtype)
    flat = array.reshape(-1)
    if flat.size > 1 and (flat == flat[0]).all() and not _has_nan(flat):
        return f"dense<{ty}: splat {_format_element(flat[0])}>"
    kind = dtype_kind(array.dtype)
    if kind == "f":  # NumPy prints the shortest digits that read back to the same value in this dtype
        items = [_format_element(x) for x in flat]
    else:
        convert = {"c": complex, "b": bool}.get(kind, int)
        items = [_format_scalar(convert(x)) for x in flat]
    return f"dense<{ty}: {', '.join(items)}>"


def _format_element(x) -> str:
    """One element of a dense array: floats with the shortest digits exact for their dtype."""
    if dtype_kind(x.dtype) != "f":
        return _format_scalar(x.item() if hasattr(x, "item") else x)
    if x.dtype not in (np.float32, np.float64):  # bf16, f16, f8: exact as float32
        x = np.float32(x)
    return str(x)


def dtype_kind(dtype: np.dtype) -> str:
    """'f' for every floating dtype (bfloat16 and float8 included), else NumPy's kind ('b', 'i',
    'u', 'c'; int4 and uint4 are 'i' and 'u')."""
    if jnp.issubdtype(dtype, jnp.floating):
        return "f"
    if jnp.issubdtype(dtype, jnp.integer):
        return "i" if jnp.issubdtype(dtype, jnp.signedinteger) else "u"
    return dtype.kind


def _has_nan(flat: np.ndarray) -> bool:
    kind = dtype_kind(flat.dtype)
    return kind in "fc" and bool(np.isnan(flat.astype(np.complex128 if kind == "c" else np.float64)).any())


def int_bounds(dtype: np.dtype) -> tuple[int, int] | None:
    """The least and greatest value of an integer dtype (int4 and uint4 included), else None."""
    if dtype_kind(dtype) not in "iu":
        return None
    info = jnp.iinfo(dtype)
    return int(info.min), int(info.max)


def format_attr(value: Any) -> str:
    """The text of one attribute value; `parser.parse_attr` reads it back."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and not isinstance(value, enum.Enum):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, SymbolRef):
        return f"@{value.name}"
    if isinstance(value, np.dtype):
        return dtype_name(value)
    if isinstance(value, enum.Enum):
        return f"#{type(value).__name__}.{value.name}"
    if isinstance(value, jex_core.Primitive):
        return f"#primitive<{format_string(value.name)}>"
    if type(value).__name__ in RECORDS:
        inner = ", ".join(f"{f} = {format_attr(getattr(value, f))}" for f in record_fields(value))
        return f"#{type(value).__name__}{{{inner}}}"
    if isinstance(value, tuple):
        if len(value) == 1:
            return f"({format_attr(value[0])},)"
        return "(" + ", ".join(format_attr(v) for v in value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if isinstance(value, np.ndarray):
        return format_dense(value)
    if isinstance(value, Splat):
        return f"dense<{TensorType(value.shape, value.dtype)}: splat {_format_element(value.value)}>"
    raise TypeError(f"not an attribute value: {value!r}")


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def format_string(s: str) -> str:
    """A double-quoted string; control characters escaped as \\n, \\t, \\r or \\xNN."""
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
