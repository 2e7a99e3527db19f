"""Host arrays onto their shardings, one transfer per array: what `jax.device_put(hosts,
shardings)` does for NumPy arrays, with the per-shape work (the abstract value, the devices,
each device's slice) done once per shape and sharding. `jax.device_put` spends most of a small
batch's placement in that per-call Python (0.15 ms of CPU against 0.04 ms for two leaves of a
(64, 16) batch on 8 simulated devices); the input pipeline places one batch per step.

`host_array` makes the host copies the input pipeline transfers 64-byte aligned: the CPU
runtime then uses each device's rows in place instead of copying them (0.08 ms of CPU against
0.16-0.4 ms to place a (1024, 256) float32 batch on 8 simulated devices). Such a copy belongs
to the placed array from then on: nothing may write to it. A `HostPool` hands out such copies
again once nothing refers to them any more (a fresh one costs its pages' first-touch faults,
more than the copy itself: docs/performance.md, issue 36).

It uses JAX's batched transfer (`xla_client.batched_device_put`, what `jax.device_put` calls);
where that is not there or refuses the call (another JAX version), `jax.device_put` does it.
"""
from __future__ import annotations

import functools
import sys
import threading
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
    out = _aligned(raw, size, dtype, shape)
    if fill is not None:
        np.copyto(out, fill)
    return out


def _aligned(raw: np.ndarray, size: int, dtype: np.dtype, shape: tuple) -> np.ndarray:
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + size].view(dtype).reshape(shape)


def _reference_counts(buffers: list) -> list[int]:
    """Each buffer's reference count as seen from here (the list's reference included)."""
    return [sys.getrefcount(raw) for raw in buffers]


# What `_reference_counts` sees for a buffer only its list holds (measured, not assumed: the
# interpreter's own references in this loop differ between Python versions).
_UNUSED = _reference_counts([np.empty(0, np.uint8)])[0]


class HostPool:
    """`host_array`s for one input pipeline, each buffer handed out again only once nothing
    refers to it: every view of a buffer (the array handed out, the per-device pieces a
    transfer reads or the CPU runtime uses in place for as long as the placed array lives)
    holds a reference to it, so a buffer whose reference count is back to the pool's own is
    read by nobody. A new buffer costs the page faults of its first write: on the 2-core CPU
    machine ~0.3-0.5 ms for a 1 MiB batch, more than the copy (docs/performance.md, issue 36).
    At most `limit` buffers of a size are kept: when all are busy (batches held for long, say a
    list of placed elements) a new one takes the place of the oldest."""

    def __init__(self, limit: int = 16):
        self._limit = limit
        self.created = 0  # buffers made so far (the rest of the arrays handed out reused one)
        self._buffers: dict[int, list[np.ndarray]] = {}
        self._lock = threading.Lock()  # two iterators of one dataset: two producer threads

    def array(self, shape: tuple, dtype, fill: np.ndarray | None = None) -> np.ndarray:
        """`host_array(shape, dtype, fill)`, in a buffer of the pool's when one is free."""
        dtype = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        with self._lock:  # claimed (a view made) before another thread looks
            buffers = self._buffers.setdefault(size, [])
            out = None
            for raw, count in zip(buffers, _reference_counts(buffers)):
                if count <= _UNUSED:
                    out = _aligned(raw, size, dtype, shape)
                    break
            if out is None:
                if len(buffers) >= self._limit:  # forget the oldest busy one (its holders free it)
                    del buffers[0]
                raw = np.empty(size + ALIGN, np.uint8)
                buffers.append(raw)
                self.created += 1
                out = _aligned(raw, size, dtype, shape)
        if fill is None:
            out.fill(0)
        else:
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
