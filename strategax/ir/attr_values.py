"""The values attributes hold that are not Python's own: a symbol, an enum member, a record, a
primitive by name, a held object, a sub-program and a splat; and the dtype facts dense literals
need. Plain data that knows no JAX; their text forms are in `attributes.py`."""
from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

import ml_dtypes
import numpy as np

from .types import DTYPE_NAMES

if TYPE_CHECKING:  # annotations only
    from .ops import Block


@dataclass(frozen=True)
class SymbolRef:
    """A reference to a module-level symbol (a variable): `@w1`."""

    name: str


@dataclass(frozen=True)
class EnumAttr:
    """A member of a named enumeration: `#Precision.HIGHEST`."""

    type_name: str
    member: str


@dataclass(frozen=True)
class PrimitiveRef:
    """A primitive named by an op's parameter (the `select_prim` of the `select_and_scatter_add`
    that max pooling's gradient makes): `#primitive<"ge">`."""

    name: str


class Record:
    """A record as plain data, its type's name and its fields in order:
    `#NamedSharding{mesh = #AbstractMesh{...}, spec = #PartitionSpec{...}}`. It reads like the
    object it stands for (`r.offset_dims`) and unpacks like a named tuple (`a, b, c = r`)."""

    __slots__ = ("type_name", "fields")

    def __init__(self, type_name: str, fields: Iterable[tuple[str, Any]] = ()):
        object.__setattr__(self, "type_name", type_name)
        object.__setattr__(self, "fields", tuple((str(k), v) for k, v in fields))

    def __getattr__(self, name: str) -> Any:
        if name not in Record.__slots__:
            for key, value in self.fields:
                if key == name:
                    return value
        raise AttributeError(f"record #{self.type_name if name != 'type_name' else '?'} has no field {name!r}")

    def __setattr__(self, name, value):
        raise AttributeError("a Record is immutable")

    def get(self, name: str, default: Any = None) -> Any:
        return next((v for k, v in self.fields if k == name), default)

    def __iter__(self):
        return (v for _, v in self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __getitem__(self, index):
        return tuple(self)[index]

    def _key(self) -> tuple:
        return (self.type_name, _data_key(self.fields))

    def __eq__(self, other) -> bool:
        return isinstance(other, Record) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self):
        return Record, (self.type_name, self.fields)

    def __repr__(self) -> str:
        return f"Record({self.type_name!r}, {self.fields!r})"


def _data_key(value: Any) -> Any:
    """`value` with its arrays as (dtype, shape, bytes): comparable and hashable by content."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_data_key(v) for v in value))
    if isinstance(value, np.ndarray):
        return ("dense", value.dtype.str, value.shape, value.tobytes())
    return value


class Held:
    """An object with no text form (a Python callback), held by reference: `#held<"name">`.
    Two are equal when they hold the same object. The name finds it again while it is held."""

    __slots__ = ("name", "value", "__weakref__")
    _by_name: "weakref.WeakValueDictionary[str, Held]" = weakref.WeakValueDictionary()
    _by_id: "weakref.WeakValueDictionary[int, Held]" = weakref.WeakValueDictionary()
    _count = itertools.count(1)

    def __new__(cls, value: Any, what: str = "object") -> "Held":
        """The holder of `value` (the same one while it lives); `what` names it in the text."""
        held = cls._by_id.get(id(value))
        if held is not None and held.value is value:
            return held
        held = object.__new__(cls)
        held.value = value
        held.name = f"{what}#{next(cls._count)}"
        cls._by_id[id(value)] = cls._by_name[held.name] = held
        return held

    @classmethod
    def find(cls, name: str) -> "Held | None":
        """The holder printed as `name`, if this process still holds it."""
        return cls._by_name.get(name)

    def __eq__(self, other) -> bool:
        return isinstance(other, Held) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)

    def __repr__(self) -> str:
        return f"Held({self.name!r})"


class Subprogram:
    """A program a parameter holds (a jaxpr that is neither a call nor a region of its op: the
    matvec of `custom_linear_solve`): a closed block of ops, `#jaxpr<{^(%a: f32[3]): ... yield
    %b}>`. Passes do not look inside; two are equal when they are the same object."""

    __slots__ = ("block", "__weakref__")

    def __init__(self, block: "Block"):
        self.block = block

    def __repr__(self) -> str:
        return f"Subprogram({len(self.block.args)} args, {len(self.block.ops)} ops)"


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


# --- dtype facts the dense kind needs ---------------------------------------------------------
_KIND_OF_NAME = {"b": "b", "i": "i", "u": "u", "f": "f", "c": "c"}


def dtype_kind(dtype: np.dtype) -> str:
    """'f' for every floating dtype (bfloat16 and float8 included), else NumPy's kind ('b', 'i',
    'u', 'c'; int4 and uint4 are 'i' and 'u')."""
    name = DTYPE_NAMES.get(np.dtype(dtype))
    if name is None:
        return np.dtype(dtype).kind
    return "f" if name == "bf16" else _KIND_OF_NAME[name[0]]


def int_bounds(dtype: np.dtype) -> tuple[int, int] | None:
    """The least and greatest value of an integer dtype (int4 and uint4 included), else None."""
    if dtype_kind(dtype) not in "iu":
        return None
    info = ml_dtypes.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)
