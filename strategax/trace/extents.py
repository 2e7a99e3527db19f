"""Per-replica values whose shapes differ across replicas (TensorFlow runs each replica on its
own shape) as compiled-program inputs: one array padded to the largest extent along each
differing axis, and that axis's real extent per replica as a hidden per-replica input. The
trace marks each padded axis (`sx.rows ... {axis = k, extent}`), mask-padding keeps the padded
entries out of whatever combines along it, and the call trims the outputs to the real
extents (`trimmed`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ..errors import DistributionValueError
from .distributed_values import DistributedValues, Form, PerReplica


@dataclass(frozen=True)
class Extents:
    """Argument leaf `leaf` is padded along `axis`; leaf `count` holds the real extents (shared
    by the padded axes whose extents agree on every replica)."""

    leaf: int
    axis: int
    count: int


def differing_axes(x: Any) -> tuple[int, ...]:
    """The axes along which the array components of PerReplica `x` differ in size (none when
    they have one shape, or are not all arrays of one rank and dtype: checked elsewhere)."""
    if not isinstance(x, PerReplica) or x.form is Form.TRACED or x.form.has_global or not x.form.has_components:
        return ()  # one global array has one shape
    comps = x.held_components()
    if not all(hasattr(c, "shape") and hasattr(c, "dtype") for c in comps):
        return ()
    if len({np.ndim(c) for c in comps}) > 1 or len({np.dtype(c.dtype) for c in comps}) > 1:
        return ()
    return tuple(k for k in range(np.ndim(comps[0])) if len({c.shape[k] for c in comps}) > 1)


def padded(x: DistributedValues, axes: tuple[int, ...], num_local: int, num_replicas: int
           ) -> tuple[PerReplica, list[PerReplica]]:
    """`x`'s components padded with zeros to the largest extent along `axes`, and per axis the
    real extents as a per-replica int32 scalar."""
    if num_local != num_replicas:
        raise DistributionValueError(
            "a PerReplica whose components differ in shape, in a multi-worker job (each worker would pad "
            "them to its own largest extent)", "give every replica values of one shape (jnp.pad), and pass "
            "the real extents as another per-replica argument")
    comps = [np.asarray(jax.device_get(c)) for c in x.held_components()]
    big = [max(c.shape[k] for c in comps) for k in range(comps[0].ndim)]
    out = PerReplica([np.pad(c, [(0, b - d) for b, d in zip(big, c.shape)]) for c in comps])
    return out, [PerReplica([np.int32(c.shape[k]) for c in comps]) for k in axes]


def trim(array: Any, cuts: dict[int, int]) -> Any:
    """`array` cut to its first `n` entries along each axis `k` of `cuts` (k -> n)."""
    index = tuple(slice(0, cuts[k]) if k in cuts else slice(None) for k in range(np.ndim(array)))
    return array[index]
