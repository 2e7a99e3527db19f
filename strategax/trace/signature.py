"""The cache key of a call of a compiled function: its pytree structure, each leaf's kind,
shape and dtype, and its static Python values (keyed by type and value: `-0.0` is not `0.0`,
and every NaN is one key); and the leaves themselves. Also `input_signature` (tf.function's):
the declared specs every call's arguments are checked against."""
from __future__ import annotations

import inspect
import math
import struct
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeGuard

import jax
import jax.numpy as jnp
import numpy as np

from .._markers import is_distributed_dataset, is_distributed_iterator, is_variable
from ..errors import DistributionTypeError, DistributionValueError
from ..ir import Locality, TensorType
from .extents import Extents, differing_axes, padded
from .keys import is_key, physical_aval
from .kinds import Kind
from .distributed_values import (DistributedValues, Form, PerReplica, PerReplicaBatch, check_components,
                                 components_identical, is_distributed, regroup)

STATIC_TYPES = (bool, int, float, complex, str, type(None))
ARRAY_TYPES = (jax.Array, np.ndarray, np.generic)

# The leaf kinds (trace/kinds.py), by their short names: an input leaf is a per-replica value, a
# mirrored one, a plain array (mirrored), a static Python value baked into the program, or a
# Python int, float or complex traced as a weakly typed scalar (reduce_retracing=True, as jax.jit
# traces it: one program for every value).
PER_REPLICA, MIRRORED, ARRAY, STATIC, SCALAR = Kind.PER_REPLICA, Kind.MIRRORED, Kind.ARRAY, Kind.STATIC, Kind.SCALAR
PER_EXAMPLE, KEY = Kind.PER_EXAMPLE, Kind.KEY  # output kinds
SCALAR_TYPES = (int, float, complex)  # exact types: bools and enums stay static (few values,
# and they pick Python branches)
EXTENTS = "X"  # key entry of a distributed value whose components differ in shape (its padded axes)


@dataclass
class Signature:
    key: tuple
    treedef: Any
    kinds: list[Kind]
    leaves: list[Any]
    batch: Any = None  # the padded input batch whose row counts ride along as a hidden input
    inputs: list | None = None  # the batches this call took from its iterator arguments (trace.batches.takes)
    host: Any = None  # trace.streams.Streams: this call's iterators and passes over datasets
    site_elements: list | None = None  # the element each single `next()` of the call took
    extents: tuple[Extents, ...] = ()  # per-replica values padded to one shape, and their real extents


def _needs_regroup(v: DistributedValues) -> bool:
    return v.form.has_components and not isinstance(v.held_components()[0], ARRAY_TYPES + STATIC_TYPES)


def _expand(tree):
    """Split distributed values whose components are pytrees into pytrees of distributed values."""
    return jax.tree_util.tree_map(
        lambda v: regroup(v.values, type(v)) if is_distributed(v) and _needs_regroup(v) else v,
        tree, is_leaf=is_distributed)


def leaf_type(x, kind: Kind) -> TensorType:
    if kind == PER_REPLICA or kind == MIRRORED:
        if x.form.has_global:
            t = x.layout.type
            return t.with_locality(Locality.PER_REPLICA if kind == PER_REPLICA else Locality.MIRRORED)
        first = x.held_components()[0]
        return TensorType(np.shape(first), _dtype_of(first),
                          Locality.PER_REPLICA if kind == PER_REPLICA else Locality.MIRRORED)
    if is_key(x):  # a typed PRNG key: the program takes its key data
        aval = physical_aval(x.aval)
        return TensorType(aval.shape, aval.dtype, Locality.MIRRORED)
    return TensorType(np.shape(x), _dtype_of(x), Locality.MIRRORED)  # an array or a SCALAR


def float_key(x: float):
    """A float as a cache key: `-0.0` differs from `0.0` (1/-0.0 is -inf), and NaNs with the
    same bits are equal (NaN != NaN would miss the cache on every call)."""
    if math.isnan(x):
        return ("nan", struct.pack("<d", x))
    if x == 0.0 and math.copysign(1.0, x) < 0:
        return "-0.0"
    return x


def static_key(x) -> tuple:
    """The cache-key entry of a static Python value: its type and value."""
    if isinstance(x, float):
        return (STATIC, type(x), float_key(x))
    if isinstance(x, complex):
        return (STATIC, type(x), float_key(x.real), float_key(x.imag))
    return (STATIC, type(x), x)


def _dtype_of(x) -> np.dtype:
    """The dtype JAX gives `x` (float64 becomes float32 unless x64 is enabled)."""
    if hasattr(x, "dtype"):
        return np.dtype(jax.dtypes.canonicalize_dtype(x.dtype))
    return np.dtype(jnp.result_type(x))


def _distributed_key(x: DistributedValues, num_replicas: int, num_local: int | None = None) -> tuple:
    if x.form is Form.TRACED:
        raise DistributionTypeError(
            "a traced distributed value was passed into a separately compiled function",
            "call the function's body directly inside the strategy.function")
    kind = PER_REPLICA if isinstance(x, PerReplica) else MIRRORED
    g = x.held_global
    if kind == MIRRORED and g is None and not components_identical(x):
        kind = PER_REPLICA  # TensorFlow gives replica i component i of a Mirrored
    if g is None or g[1].num_replicas != num_replicas:
        check_components(x, num_replicas, num_local)
        t = leaf_type(x, kind)
    else:
        t = g[1].type
    return kind, (kind, t.shape, t.dtype)


def leaf_names(fn: Callable, treedef, count: int) -> list[str]:
    """A readable name for each flattened argument leaf: the parameter and the path inside it."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    tree = jax.tree_util.tree_unflatten(treedef, list(range(treedef.num_leaves)))
    names = [f"leaf {i}" for i in range(count)]
    for path, index in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if len(path) < 2:
            continue
        head, rest = path[1], jax.tree_util.keystr(tuple(path[2:]))
        if path[0].idx == 0:  # positional
            i = head.idx
            names[index] = (params[i].name if i < len(params) else f"args[{i}]") + rest
        else:
            names[index] = str(head.key) + rest
    return names



_INT32 = (-2**31, 2**31 - 1)
_STRING_FIX = ("XLA programs take numbers and booleans only: encode strings as numbers first (e.g. token ids "
               "from a vocabulary), and keep other Python objects outside the function (a Python str, int or "
               "other hashable argument is a constant of the program)")


def is_array_dtype(dtype) -> bool:
    """Whether JAX can hold an array of `dtype` (numbers and booleans; not strings, objects, dates)."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return False
    return dtype == np.bool_ or jnp.issubdtype(dtype, np.number)


def out_of_int32(x) -> TypeGuard[int]:
    """A Python int (not a bool) that int32, JAX's integer without 64-bit mode, cannot hold."""
    return (type(x) is int and jax.dtypes.canonicalize_dtype(np.int64) != np.int64  # 64-bit mode off
            and not _INT32[0] <= x <= _INT32[1])


def int32_error(name: str, value: int, used_at: str = "") -> DistributionValueError:
    return DistributionValueError(
        f"argument `{name}` is the Python int {value}, which int32 cannot hold (JAX computes Python ints "
        f"as int32 unless 64-bit mode is on){used_at}",
        "pass it as a float (float(x)) or split it into int32 parts, or turn on 64-bit mode at start-up: "
        "jax.config.update('jax_enable_x64', True)")


def _bad_value(x) -> str | None:
    """Why `x` (an argument leaf or a distributed value's component) cannot enter a program."""
    if isinstance(x, ARRAY_TYPES) and not isinstance(x, jax.Array) and not is_array_dtype(x.dtype):
        return f"a NumPy array of dtype {x.dtype}"
    components = getattr(x, "_values", None) if isinstance(x, DistributedValues) else None
    for i, c in enumerate(components or ()):
        if isinstance(c, (str, bytes)):
            return f"{_a(type(x).__name__)} whose component {i} is a Python {type(c).__name__} {c!r:.30}"
        if isinstance(c, ARRAY_TYPES) and not is_array_dtype(c.dtype):
            return f"{_a(type(x).__name__)} whose component {i} is of dtype {c.dtype}"
    return None


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def result_array(x, what: str, path: str = "") -> Any:
    """`x`, returned by the user's function, as an array; a string or another Python object
    that no program can return raises, naming `what` returned it and where in the result."""
    try:
        return jnp.asarray(x)
    except TypeError:
        where = f" at `result{path}`" if path else ""
        raise DistributionTypeError(
            f"{what} returned {_a(type(x).__name__)} ({x!r:.40}){where}, which a compiled program cannot return",
            "return arrays and numbers (or pytrees of them); compute strings and other Python objects "
            "outside, from the numbers it returns") from None


def signature(args: tuple, kwargs: dict, num_replicas: int, num_local: int | None = None,
              trace_scalars: bool = False, fn: Callable | None = None) -> Signature:
    """The cache key of a call (structure, per-leaf kind/shape/dtype, static values) and its leaves;
    `num_local` is the replicas this process feeds (fewer than all in a multi-process job);
    `trace_scalars` makes Python ints, floats and complexes traced inputs (reduce_retracing);
    `fn` (the user's function) names the arguments in errors."""
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=is_distributed)
    kinds, key, batch, extents = [], [treedef], None, []
    for index, x in enumerate(leaves):
        bad = None if isinstance(x, jax.Array) else _bad_value(x)
        if bad is not None:
            name = leaf_names(fn, treedef, len(leaves))[index] if fn is not None else f"leaf {index}"
            raise DistributionTypeError(f"argument `{name}` is {bad}, which cannot enter a compiled program",
                                        _STRING_FIX)
        if isinstance(x, jax.Array):  # the hot case first
            kind = ARRAY  # a plain array is mirrored: it shares a cache entry with a Mirrored one
            key.append((MIRRORED, x.shape, x.dtype))
        elif is_variable(x):  # state, passed by reference: part of the key
            kind = STATIC
            key.append((kind, type(x), x))
        elif is_distributed_iterator(x):  # input: keyed by its element spec
            kind = STATIC
            key.append(("I", x._spec_key()))
        elif is_distributed_dataset(x):  # `iter()` inside makes inputs: likewise
            kind = STATIC
            key.append(("D", x._spec_key()))
        elif isinstance(x, DistributedValues):
            if not x.form.has_global and _needs_regroup(x):
                args, kwargs = _expand((args, kwargs))
                return signature(args, kwargs, num_replicas, num_local, trace_scalars, fn)
            axes = differing_axes(x)
            if axes:  # components of different shapes: padded to one, the extents ride along
                x, counts = padded(x, axes, num_replicas if num_local is None else num_local, num_replicas)
                leaves[index] = x
                extents += [(index, axis, c) for axis, c in zip(axes, counts)]
            kind, k = _distributed_key(x, num_replicas, num_local)
            key.append(k + ((EXTENTS, axes),) if axes else k)
            if isinstance(x, PerReplicaBatch):
                if batch is None:
                    batch = x
                elif x.real_counts != batch.real_counts or x.padded_rows != batch.padded_rows:
                    raise DistributionValueError(
                        f"two padded batches with different real row counts ({list(batch.real_counts)} and "
                        f"{list(x.real_counts)}) are passed to one call; the program sees one row count",
                        "pass the leaves of one batch (one dataset element) per call")
        elif isinstance(x, ARRAY_TYPES):
            kind = ARRAY
            key.append((MIRRORED, np.shape(x), jax.dtypes.canonicalize_dtype(x.dtype)))
        elif isinstance(x, STATIC_TYPES):
            if trace_scalars and type(x) in SCALAR_TYPES:
                if out_of_int32(x):  # traced as an int32 value, it would not fit
                    name = leaf_names(fn, treedef, len(leaves))[index] if fn is not None else f"leaf {index}"
                    raise int32_error(name, int(x))
                kind = SCALAR
                key.append((SCALAR, type(x)))
            else:
                kind = STATIC
                key.append(static_key(x))
        else:
            try:
                hash(x)
            except TypeError:
                raise DistributionTypeError(
                    f"cannot pass a {type(x).__name__} to a strategax function",
                    "pass arrays, Python scalars, distributed values or pytrees of them") from None
            kind = STATIC
            key.append((kind, type(x), x))
        kinds.append(kind)
    marks, shared = [], {}
    for index, axis, count in extents:  # hidden inputs: each padded axis's real extents, one per
        # distinct list of extents (values that agree on every replica share it, so the program
        # may combine them entry by entry; which share is part of the key)
        values = tuple(int(c) for c in count.values)
        if values not in shared:
            shared[values] = len(leaves)
            leaves.append(count)
            kinds.append(PER_REPLICA)
        marks.append(Extents(index, axis, shared[values]))
    if marks:
        key.append((EXTENTS, tuple((m.leaf, m.axis, m.count) for m in marks)))
    if batch is not None:  # hidden last input: the per-replica real row counts (input_mask)
        leaves = [*leaves, batch.count_value]
        kinds.append(PER_REPLICA)
        key.append(("rows", batch.padded_rows))
    return Signature(tuple(key), treedef, kinds, leaves, batch, extents=tuple(marks))


# --- input_signature: tf.function's, checked on every call ------------------------------
@dataclass(frozen=True)
class TensorSpec:
    """Shape (None for an axis of any size) and dtype of one value: TensorFlow's `tf.TensorSpec`.
    Of a distributed value it describes one replica's component."""

    shape: tuple
    dtype: Any = np.float32
    name: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(None if d is None else int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    def is_compatible_with(self, shape: Sequence[int], dtype: Any) -> bool:
        return (len(shape) == len(self.shape) and np.dtype(dtype) == self.dtype
                and all(w is None or w == d for w, d in zip(self.shape, shape)))


def _is_spec(x: Any) -> bool:
    return isinstance(x, (TensorSpec, jax.ShapeDtypeStruct))


def _as_spec(x: Any) -> TensorSpec:
    return x if isinstance(x, TensorSpec) else TensorSpec(x.shape, x.dtype)


def _shape_dtype(x: Any) -> tuple[tuple, np.dtype]:
    if isinstance(x, DistributedValues):
        first = x.layout.type if x.form.has_global else None
        if first is not None:
            return tuple(first.shape), np.dtype(first.dtype)
        component = x.values[0]
        return tuple(np.shape(component)), np.dtype(jnp.result_type(component))
    if is_variable(x):
        return tuple(x.shape), np.dtype(x.dtype)
    return tuple(np.shape(x)), np.dtype(jax.dtypes.canonicalize_dtype(jnp.result_type(x)))


def _describe(shape, dtype) -> str:
    return f"{np.dtype(dtype).name}[{', '.join('None' if d is None else str(d) for d in shape)}]"


def check_input_signature(specs: Any) -> None:
    """`specs` is None or a list/tuple of pytrees of TensorSpec / jax.ShapeDtypeStruct."""
    fix = "pass a list of sx.TensorSpec (or pytrees of them, e.g. [iterator.element_spec]), one per argument"
    if specs is None:
        return
    if not isinstance(specs, (list, tuple)):
        raise DistributionTypeError(f"input_signature must be a list or tuple, not {type(specs).__name__}", fix)
    for leaf in jax.tree_util.tree_leaves(list(specs), is_leaf=_is_spec):
        if not _is_spec(leaf):
            raise DistributionTypeError(f"input_signature holds a {type(leaf).__name__}, not a TensorSpec", fix)


def check_arguments(specs: Sequence[Any], args: tuple, kwargs: dict) -> tuple:
    """`args` checked against `specs`; Python numbers become arrays of their spec's dtype."""
    if kwargs:
        raise DistributionTypeError(
            f"keyword arguments ({', '.join(kwargs)}) to a function with an input_signature",
            "pass the arguments positionally, one per spec of the input_signature")
    specs = list(specs)
    if len(args) != len(specs):
        raise DistributionTypeError(
            f"the function's input_signature has {len(specs)} spec(s) but it was called with "
            f"{len(args)} argument(s)", "call it with one argument per spec")
    out = []
    for k, (spec, arg) in enumerate(zip(specs, args)):
        spec_leaves, spec_tree = jax.tree_util.tree_flatten(spec, is_leaf=_is_spec)
        arg_leaves, arg_tree = jax.tree_util.tree_flatten(arg, is_leaf=is_distributed)
        if spec_tree != arg_tree:
            raise DistributionTypeError(
                f"argument {k} has structure {arg_tree}, but the input_signature says {spec_tree}",
                "pass a value of the declared structure (or fix the input_signature)")
        converted = []
        for leaf, s in zip(arg_leaves, spec_leaves):
            s = _as_spec(s)
            if isinstance(leaf, (bool, int, float, complex, np.generic)) and not s.shape:
                leaf = jnp.asarray(leaf, s.dtype)
            shape, dtype = _shape_dtype(leaf)
            if not s.is_compatible_with(shape, dtype):
                raise DistributionValueError(
                    f"argument {k} is {_describe(shape, dtype)}, which the input_signature's "
                    f"{_describe(s.shape, s.dtype)} does not allow",
                    "pass a value of the declared shape and dtype (None in a spec's shape allows "
                    "any size), or widen the input_signature")
            converted.append(leaf)
        out.append(jax.tree_util.tree_unflatten(arg_tree, converted))
    return tuple(out)
