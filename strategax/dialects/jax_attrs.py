"""JAX parameters as IR attributes, and back: every parameter JAX puts in a jaxpr has one.

`to_attr` (the importer's) turns a parameter into plain IR data: enums into `EnumAttr`, JAX's
records (dimension numbers, shardings, meshes, partition specs, devices) and any dataclass or
named tuple into `Record`, primitives into `PrimitiveRef`, jaxprs into `Subprogram` (the
importer imports them), and whatever has no text form (a callback, an object of a class nobody
can rebuild from fields) into `Held`; it never fails.
`from_attr` (what lowering and abstract evaluation bind with) rebuilds the JAX object. Each
JAX class that needs more than "its fields by name" has its two directions side by side below.

A class met while importing is known from then on in this process, so a dataclass parameter of
a primitive from a newer JAX round-trips through text; another process knows the classes listed
here, and reading text naming any other is an `AttrError` at that attribute.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from jax import lax
from jax.extend import core as jex_core
from jax import Device
from jax.sharding import (AbstractDevice, AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec,
                          SingleDeviceSharding)

from ..ir import EnumAttr, Held, PrimitiveRef, Record, Splat, Subprogram, SymbolRef
from ..ir.types import DTYPE_NAMES
from .primitives import find_primitive, register_primitive


class AttrError(ValueError):
    """An attribute names a JAX enum, record or primitive that this process does not know."""


@dataclass(frozen=True)
class RecordType:
    """How one JAX class is a record: its fields as (name, value) pairs, and the object again
    from those fields (values already JAX objects)."""

    name: str
    cls: type
    fields: Callable[[Any], list[tuple[str, Any]]]
    build: Callable[[dict[str, Any]], Any]


_RECORDS: dict[str, RecordType] = {}  # by the name it prints with
_RECORD_OF: dict[type, RecordType] = {}
_ENUMS: dict[str, type[enum.Enum]] = {}
_ENUM_OF: dict[type, str] = {}
_CONSTANTS: dict[tuple[str, str], Any] = {}  # named singletons: (type name, member) -> the object
_CONSTANT_OF: dict[int, EnumAttr] = {}


def _free_name(cls: type) -> str:
    """`cls`'s short name, or its qualified one when another class holds the short one."""
    short = cls.__name__
    taken = _RECORDS.get(short)
    if (taken is None or taken.cls is cls) and _ENUMS.get(short, cls) is cls:
        return short
    return f"{cls.__module__}.{cls.__qualname__}"


def record_type(cls: type, fields: Callable[[Any], list[tuple[str, Any]]] | None = None,
                build: Callable[[dict[str, Any]], Any] | None = None, name: str | None = None) -> RecordType:
    """Make `cls` a record kind (by default: a named tuple's or a dataclass's fields by name),
    printed as `#name{...}` (by default the class's name)."""
    known = _RECORD_OF.get(cls)
    if known is not None:
        return known
    if fields is None:
        names = (list(cls._fields) if hasattr(cls, "_fields")
                 else [f.name for f in dataclasses.fields(cls) if f.init])
        fields = lambda obj, names=names: [(n, getattr(obj, n)) for n in names]  # noqa: E731
    rt = RecordType(name or _free_name(cls), cls, fields, build or (lambda d: cls(**d)))
    _RECORDS[rt.name] = _RECORD_OF[cls] = rt
    return rt


def enum_type(cls: type[enum.Enum]) -> str:
    """Make the enum `cls` known by name; the name it prints with."""
    name = _ENUM_OF.get(cls)
    if name is None:
        name = _free_name(cls)
        _ENUMS[name] = cls
        _ENUM_OF[cls] = name
    return name


def constant(type_name: str, member: str, value: Any) -> None:
    """A named singleton (`PartitionSpec.UNCONSTRAINED`) printed like an enum member."""
    _CONSTANTS[(type_name, member)] = value
    _CONSTANT_OF[id(value)] = EnumAttr(type_name, member)


# --- JAX parameter -> attribute -------------------------------------------------------------
_PLAIN = (type(None), bool, int, float, str)
# already attributes (strategax's own params)
_IR_DATA = (SymbolRef, EnumAttr, PrimitiveRef, Record, Held, Splat, Subprogram)


def to_attr(value: Any, jaxpr: Callable[[Any], Any] | None = None) -> Any:
    """The IR attribute for a JAX parameter value; never raises (no text form: `Held`).
    `jaxpr` turns a ClosedJaxpr into an attribute (the importer's `Subprogram`); without it,
    a jaxpr is held."""
    t = type(value)
    if t in _PLAIN or t in _IR_DATA:
        return value
    if t is tuple:
        return tuple(to_attr(v, jaxpr) for v in value)
    if t is list:
        return [to_attr(v, jaxpr) for v in value]
    if jaxpr is not None and isinstance(value, jex_core.ClosedJaxpr):
        return jaxpr(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    named = _CONSTANT_OF.get(id(value))
    if named is not None and _CONSTANTS[(named.type_name, named.member)] is value:
        return named
    if isinstance(value, enum.Enum):
        return EnumAttr(enum_type(t), value.name)
    if isinstance(value, jex_core.Primitive):
        register_primitive(value)
        if find_primitive(value.name) is value:
            return PrimitiveRef(value.name)
        return Held(value, f"primitive {value.name}")
    rt = _RECORD_OF.get(t)
    if rt is None:
        if isinstance(value, Device):  # each platform's devices are of a subclass
            rt = _RECORD_OF[Device]
        elif (issubclass(t, tuple) and hasattr(t, "_fields") or
              dataclasses.is_dataclass(t) and all(f.init for f in dataclasses.fields(t))):
            rt = record_type(t)  # rebuilt by calling the class with its fields by name
    if rt is not None:
        return Record(rt.name, [(k, to_attr(v, jaxpr)) for k, v in rt.fields(value)])
    if isinstance(value, (np.ndarray, Splat)) and value.dtype in DTYPE_NAMES:
        return value
    dtype = _dtype_of(value)
    if dtype is not None:
        return dtype
    return Held(value, _describe(value))


def _dtype_of(value: Any) -> np.dtype | None:
    if not isinstance(value, (np.dtype, type)):
        return None
    try:
        dtype = np.dtype(value)
    except TypeError:
        return None
    return dtype if dtype in DTYPE_NAMES else None


def _describe(value: Any) -> str:
    """A name for a held object: a jaxpr's text on one line, a function's qualified name, else
    its type's."""
    if isinstance(value, (jex_core.ClosedJaxpr, jex_core.Jaxpr)):
        name = " ".join(str(value).split())
    else:
        name = getattr(value, "__qualname__", None)
        if not isinstance(name, str):
            name = type(value).__qualname__
    return "".join(ch if ch.isprintable() else "?" for ch in name)


# --- attribute -> JAX parameter -------------------------------------------------------------
def from_attr(value: Any, jaxpr: Callable[[Subprogram], Any] | None = None) -> Any:
    """The JAX parameter an attribute stands for; AttrError for a name this process lacks.
    `jaxpr` turns a `Subprogram` back into a ClosedJaxpr (`jax_ops.subprogram_jaxpr`)."""
    t = type(value)
    if t in _PLAIN or t is np.ndarray or isinstance(value, np.dtype):
        return value
    if t is tuple:
        return tuple(from_attr(v, jaxpr) for v in value)
    if t is list:
        return [from_attr(v, jaxpr) for v in value]
    if t is Subprogram:
        if jaxpr is None:
            raise AttrError("a sub-program is rebuilt only when its op is bound")
        return jaxpr(value)
    if t is Record:
        rt = _RECORDS.get(value.type_name)
        if rt is None:
            raise AttrError(f"#{value.type_name}{{...}} names a record type this process does not know "
                            f"(known: {', '.join(sorted(_RECORDS))})")
        fields = {k: from_attr(v, jaxpr) for k, v in value.fields}
        try:
            return rt.build(fields)
        except Exception as e:  # noqa: BLE001 - the fields come from text: whatever the class says of them
            raise AttrError(f"cannot build #{value.type_name} from its fields: {type(e).__name__}: {e}") from None
    if t is EnumAttr:
        key = (value.type_name, value.member)
        if key in _CONSTANTS:
            return _CONSTANTS[key]
        cls = _ENUMS.get(value.type_name)
        if cls is None or value.member not in cls.__members__:
            raise AttrError(f"unknown enum value #{value.type_name}.{value.member}")
        return cls[value.member]
    if t is PrimitiveRef:
        prim = find_primitive(value.name)
        if prim is None:
            raise AttrError(f"unknown primitive {value.name!r}")
        return prim
    if t is Held:
        return value.value
    if t is Splat:
        return value.materialize()
    return value


# --- JAX's records that are more than their fields ----------------------------------------
def _devices(platform: str) -> dict[int, Any]:
    import jax

    return {d.id: d for d in jax.devices(platform)}


def _device_fields(d) -> list[tuple[str, Any]]:
    return [("platform", d.platform), ("id", d.id)]


def _device_build(f: dict) -> Any:
    try:
        return _devices(f["platform"])[f["id"]]
    except (KeyError, RuntimeError) as e:
        raise ValueError(f"no {f.get('platform')} device {f.get('id')} here") from e


def _named_sharding_fields(s: NamedSharding) -> list[tuple[str, Any]]:
    out = [("mesh", s.mesh), ("spec", s.spec)]
    if s.memory_kind is not None:
        out.append(("memory_kind", s.memory_kind))
    if s._logical_device_ids is not None:
        out.append(("logical_device_ids", tuple(s._logical_device_ids)))
    return out


def _named_sharding_build(f: dict) -> NamedSharding:
    return NamedSharding(f["mesh"], f["spec"], memory_kind=f.get("memory_kind"),
                         _logical_device_ids=f.get("logical_device_ids"))


def _abstract_mesh_fields(m: AbstractMesh) -> list[tuple[str, Any]]:
    out = [("axis_sizes", tuple(m.axis_sizes)), ("axis_names", tuple(m.axis_names)),
           ("axis_types", tuple(m.axis_types))]
    if m.abstract_device is not None:
        out.append(("abstract_device", m.abstract_device))
    return out


def _abstract_mesh_build(f: dict) -> AbstractMesh:
    return AbstractMesh(f["axis_sizes"], f["axis_names"], axis_types=f["axis_types"],
                        abstract_device=f.get("abstract_device"))


def _mesh_fields(m: Mesh) -> list[tuple[str, Any]]:
    ids = np.vectorize(lambda d: d.id, otypes=[np.int64])(m.devices)
    return [("device_ids", _nested(ids.tolist())), ("axis_names", tuple(m.axis_names)),
            ("axis_types", tuple(m.axis_types)), ("platform", m.devices.flat[0].platform)]


def _mesh_build(f: dict) -> Mesh:
    ids = np.array(f["device_ids"], dtype=np.int64)
    devices = _devices(f["platform"])
    try:
        grid = np.vectorize(lambda i: devices[int(i)], otypes=[object])(ids)
    except KeyError as e:
        raise ValueError(f"no {f['platform']} device {e} here") from None
    return Mesh(grid, f["axis_names"], axis_types=f["axis_types"])


def _nested(x):
    return tuple(_nested(v) for v in x) if isinstance(x, list) else x


def _spec_fields(p: PartitionSpec) -> list[tuple[str, Any]]:
    out = [("partitions", tuple(p._partitions))]
    for name in ("unreduced", "reduced"):
        if getattr(p, name, None):
            out.append((name, tuple(sorted(getattr(p, name)))))
    return out


def _spec_build(f: dict) -> PartitionSpec:
    extra = {k: frozenset(f[k]) for k in ("unreduced", "reduced") if k in f}
    return PartitionSpec(*f["partitions"], **extra)


def _single_device_fields(s: SingleDeviceSharding) -> list[tuple[str, Any]]:
    (device,) = s.device_set
    return [("device", device)] + ([("memory_kind", s.memory_kind)] if s.memory_kind is not None else [])


def _single_device_build(f: dict) -> SingleDeviceSharding:
    return SingleDeviceSharding(f["device"], memory_kind=f.get("memory_kind"))


def _flat_trees() -> None:
    """JAX 0.11's flat trees (scan's `ft_in` and `ft_out`: its operands' and results' layout),
    where this JAX has them: each case is a record of its constructor's arguments."""
    try:
        from jax._src import flattree as ft  # pyright: ignore[reportAttributeAccessIssue]  JAX 0.11 only
        from jax._src.util import Either  # pyright: ignore[reportAttributeAccessIssue]  JAX 0.11 only
    except ImportError:  # JAX 0.10: scan says num_consts and num_carry instead
        return
    record_type(ft.FTTuple, lambda t: [("elts", tuple(t.elts))], lambda f: ft.FTTuple(*f["elts"]))
    record_type(ft.FTDict, lambda t: [("keys", tuple(t.keys)), ("vals", tuple(t._vals))],
                lambda f: ft.FTDict(f["keys"], f["vals"]))
    record_type(ft.FTPyTree, lambda t: [("xs", tuple(t.xs)), ("tree", t.tree)],
                lambda f: ft.FTPyTree(f["xs"], f["tree"]))
    for case in (ft.FTSingleton, ft.FTStatic, ft.FTFiltered):
        record_type(case, lambda t: [("val", t.val)], lambda f, case=case: case(f["val"]))
    record_type(Either)


def _private_records() -> None:
    """Records JAX builds from private named tuples (custom_linear_solve's four jaxprs)."""
    try:
        from jax._src.lax.control_flow.solves import _LinearSolveTuple
    except ImportError:
        return
    record_type(_LinearSolveTuple)


def _known() -> None:
    """The classes every process knows: JAX's enums and records that jaxprs carry."""
    for cls in (lax.Precision, lax.GatherScatterMode, lax.RoundingMethod, lax.FftType,
                lax.DotAlgorithmPreset, lax.AccuracyMode, lax.RandomAlgorithm, AxisType):
        enum_type(cls)
    for cls in (lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers, lax.ConvDimensionNumbers,
                lax.RaggedDotDimensionNumbers, lax.DotAlgorithm):
        record_type(cls)
    record_type(NamedSharding, _named_sharding_fields, _named_sharding_build)
    record_type(AbstractMesh, _abstract_mesh_fields, _abstract_mesh_build)
    record_type(Mesh, _mesh_fields, _mesh_build)
    record_type(PartitionSpec, _spec_fields, _spec_build, name="PartitionSpec")  # `P` in JAX 0.10
    record_type(SingleDeviceSharding, _single_device_fields, _single_device_build)
    record_type(AbstractDevice)
    record_type(Device, _device_fields, _device_build)
    constant("PartitionSpec", "UNCONSTRAINED", PartitionSpec.UNCONSTRAINED)
    _flat_trees()
    _private_records()


_known()
