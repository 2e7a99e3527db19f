"""Host arrays onto their shardings, one transfer per array: what `jax.device_put(hosts,
shardings)` does for NumPy arrays, with the per-shape work (the abstract value, the devices,
each device's slice) done once per shape and sharding. `jax.device_put` spends most of a small
batch's placement in that per-call Python (0.15 ms of CPU against 0.04 ms for two leaves of a
(64, 16) batch on 8 simulated devices); the input pipeline places one batch per step.

`host_array` makes the host copies the input pipeline transfers 64-byte aligned: the CPU
runtime then uses each device's rows in place instead of copying them (0.08 ms of CPU against
0.16-0.4 ms to place a (1024, 256) float32 batch on 8 simulated devices). Such a copy belongs
to the placed array from then on: nothing may write to it.

It uses JAX's batched transfer (`xla_client.batched_device_put`, what `jax.device_put` calls);
where that is not there or refuses the call (another JAX version), `jax.device_put` does it.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import numpy as np

try:  # JAX's own batched transfer; absent or different in another version: jax.device_put
    from jax._src import core as _core
    from jax._src.lib import xla_client as _xc  # pyright: ignore[reportPrivateImportUsage]  JAX's own module
    _BATCHED: Any = _xc.batched_device_put
except (ImportError, AttributeError):  # pragma: no cover - depends on the JAX version
    _BATCHED = None


ALIGN = 64  # bytes: what XLA's CPU runtime needs to use a host buffer in place


def host_array(shape: tuple, dtype, fill: np.ndarray | None = None) -> np.ndarray:
    """A new host array of `shape` whose data starts at an ALIGN-byte boundary: zeros, or a copy
    of `fill`."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.zeros(size + ALIGN, np.uint8) if fill is None else np.empty(size + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    out = raw[start:start + size].view(dtype).reshape(shape)
    if fill is not None:
        np.copyto(out, fill)
    return out


@functools.lru_cache(maxsize=512)
def _plan(shape: tuple, dtype: np.dtype, sharding) -> tuple:
    """(abstract value, devices, each device's index into the global array) of one shape."""
    devices = list(sharding._addressable_device_assignment)
    indices = tuple(sharding.addressable_devices_indices_map(shape).values())
    return _core.ShapedArray(shape, dtype), devices, indices


def device_put(hosts: Sequence[np.ndarray], shardings: Sequence) -> list[jax.Array]:
    """`jax.device_put(hosts, shardings)` for NumPy arrays (in JAX's dtypes) on fully addressable
    shardings: one committed global array each."""
    global _BATCHED
    if _BATCHED is not None and all(type(x) is np.ndarray and x.ndim for x in hosts):
        try:
            out = []
            for x, s in zip(hosts, shardings):
                aval, devices, indices = _plan(x.shape, np.dtype(x.dtype), s)
                out.append(_BATCHED(aval, s, [x[i] for i in indices], devices, True))
            return out
        except (TypeError, AttributeError):  # pragma: no cover - another JAX version's signature
            _BATCHED = None
    return jax.device_put(list(hosts), list(shardings))
