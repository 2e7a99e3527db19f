"""TensorFlow's variable partitioners (`tf.distribute.experimental.partitioners`): how many
shards a variable of a given shape and dtype is split into along axis 0. Each returns
TensorFlow's list of partitions per axis (`[k, 1, 1, ...]`); the shard shapes are then
`variables.sharded.shard_rows` (the first `rows % k` shards one row longer)."""
from __future__ import annotations

import math

import numpy as np

from ...errors import check_int


def _shape_and_itemsize(shape, dtype, bytes_per_string: int) -> tuple[list[int], int]:
    dims = [int(d) for d in getattr(shape, "as_list", lambda: shape)()]
    kind = np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).kind
    return dims, (bytes_per_string if kind in "SUO" else np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).itemsize)


class Partitioner:
    """Base class: `partitioner(shape, dtype)` -> partitions per axis (only axis 0 is split)."""

    def __call__(self, shape, dtype, axis: int = 0) -> list[int]:
        raise NotImplementedError


class FixedShardsPartitioner(Partitioner):
    """`num_shards` shards (fewer when axis 0 is shorter)."""

    def __init__(self, num_shards: int):
        check_int(num_shards, "num_shards", minimum=1)
        self._num_shards = num_shards

    def __call__(self, shape, dtype, axis: int = 0) -> list[int]:
        dims, _ = _shape_and_itemsize(shape, dtype, 0)
        return [min(self._num_shards, dims[0])] + [1] * (len(dims) - 1)


class MinSizePartitioner(Partitioner):
    """As many shards as keep each at least `min_shard_bytes`, at most `max_shards` (TensorFlow's
    `min_max_variable_partitioner`)."""

    def __init__(self, min_shard_bytes: int = 256 << 10, max_shards: int = 1, bytes_per_string: int = 16):
        check_int(min_shard_bytes, "min_shard_bytes", minimum=1)
        check_int(max_shards, "max_shards", minimum=1)
        check_int(bytes_per_string, "bytes_per_string", minimum=1)
        self._min, self._max, self._string = min_shard_bytes, max_shards, bytes_per_string

    def __call__(self, shape, dtype, axis: int = 0) -> list[int]:
        dims, itemsize = _shape_and_itemsize(shape, dtype, self._string)
        total = math.prod(dims) * itemsize
        return [max(1, min(dims[0], self._max, math.ceil(total / self._min)))] + [1] * (len(dims) - 1)


class MaxSizePartitioner(Partitioner):
    """As few shards as keep each at most `max_shard_bytes` (one row at least), at most
    `max_shards` if given (TensorFlow's `variable_axis_size_partitioner`)."""

    def __init__(self, max_shard_bytes: int, max_shards: int | None = None, bytes_per_string: int = 16):
        check_int(max_shard_bytes, "max_shard_bytes", minimum=1)
        check_int(max_shards, "max_shards", minimum=1, allow_none=True)
        check_int(bytes_per_string, "bytes_per_string", minimum=1)
        self._max_bytes, self._max, self._string = max_shard_bytes, max_shards, bytes_per_string

    def __call__(self, shape, dtype, axis: int = 0) -> list[int]:
        dims, itemsize = _shape_and_itemsize(shape, dtype, self._string)
        if dims[0] == 0:
            return [1] * len(dims)
        bytes_per_row = math.prod(dims[1:]) * itemsize
        rows_per_shard = max(1, math.floor(self._max_bytes / bytes_per_row)) if bytes_per_row else dims[0]
        shards = math.ceil(dims[0] / rows_per_shard)
        if self._max:
            shards = min(self._max, shards)
        return [shards] + [1] * (len(dims) - 1)
