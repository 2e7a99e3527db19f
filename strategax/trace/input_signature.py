"""`strategy.function(fn, input_signature=[...])` (tf.function's `input_signature`): every call's
arguments are checked against the declared specs (structure, shape with None for any size,
dtype), and Python numbers where a spec stands become arrays of its dtype, so they do not
retrace. The program is still specialised to each concrete shape (XLA compiles static shapes)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import DistributionTypeError, DistributionValueError
from .distributed_values import DistributedValues, is_distributed


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
        first = x._global[1].type if x._global is not None else None
        if first is not None:
            return tuple(first.shape), np.dtype(first.dtype)
        component = x.values[0]
        return tuple(np.shape(component)), np.dtype(jnp.result_type(component))
    if getattr(x, "_is_variable", False):
        return tuple(x.shape), np.dtype(x.dtype)
    return tuple(np.shape(x)), np.dtype(jax.dtypes.canonicalize_dtype(jnp.result_type(x)))


def _describe(shape, dtype) -> str:
    return f"{np.dtype(dtype).name}[{', '.join('None' if d is None else str(d) for d in shape)}]"


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
