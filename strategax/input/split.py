"""TensorFlow's split of a global batch: B elements become per-replica batches of ceil(B / N)
elements, the last replicas getting fewer (or none) for a partial batch."""
from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from ..errors import DistributionTypeError, DistributionValueError
from ..trace.signature import is_array_dtype


class BatchError(Exception):
    """A malformed batch found while producing input; re-raised as `cls(message, fix)` in the
    consumer's thread so the error names the user's loop line."""

    def __init__(self, cls: type, message: str, fix: str):
        super().__init__(message)
        self.cls, self.message, self.fix = cls, message, fix

    def user_error(self) -> Exception:
        return self.cls(self.message, self.fix)


def split_sizes(batch_size: int, num_replicas: int) -> list[int]:
    """Rows per replica: ceil(B / N) each, the last replicas fewer or none."""
    per = math.ceil(batch_size / num_replicas) if batch_size else 0
    return [max(0, min(per, batch_size - i * per)) for i in range(num_replicas)]


def check_dtypes(batch: Any, leaves: list[np.ndarray]) -> None:
    """Every leaf is numeric or boolean (XLA has no strings or Python objects); BatchError if not."""
    bad = [i for i, x in enumerate(leaves) if not is_array_dtype(x.dtype)]
    if bad:
        paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(batch)[0]]
        where = f" at `{paths[bad[0]]}`" if bad[0] < len(paths) and paths[bad[0]] else ""
        raise BatchError(DistributionTypeError,
                         f"a batch of the dataset holds an array of dtype {leaves[bad[0]].dtype}{where}, "
                         "which cannot enter a compiled program (XLA takes numbers and booleans only)",
                         "encode strings as numbers in the input pipeline (e.g. token ids from a "
                         "vocabulary) and drop other Python objects before distributing the dataset")


def batch_leaves(batch: Any, treedef=None) -> tuple[list[np.ndarray], Any, int]:
    """Host leaves, structure and batch size of one global batch; BatchError when malformed."""
    leaves, tree = jax.tree_util.tree_flatten(batch)
    if treedef is not None and tree != treedef:
        raise BatchError(DistributionTypeError,
                         f"the structure of the batches changed: the first batch is {treedef} "
                         f"but this one is {tree}",
                         "yield batches of one structure (same keys, same nesting) every step")
    if not leaves:
        raise BatchError(DistributionValueError, "a batch holds no arrays",
                         "yield arrays or pytrees of arrays")
    leaves = [np.asarray(x) for x in leaves]
    if any(x.ndim == 0 for x in leaves):
        raise BatchError(DistributionValueError,
                         "a batch holds a scalar; every leaf needs a leading batch axis",
                         "batch your data (shape [batch, ...])")
    sizes = [x.shape[0] for x in leaves]
    if len(set(sizes)) > 1:
        paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(batch)[0]]
        desc = ", ".join(f"{p or 'leaf'}: {s}" for p, s in zip(paths, sizes))
        raise BatchError(DistributionValueError,
                         f"the leaves of a batch disagree on the batch size ({desc})",
                         "give every array of a batch the same leading (batch) dimension")
    check_dtypes(batch, leaves)
    return leaves, tree, sizes[0]

