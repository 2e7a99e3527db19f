"""A dataset element split and padded on the host, placed on the devices when it is first used
as a value: an `sx.range` loop that takes `k` batches inside a compiled call stacks the host
copies of all of them and places them with one transfer per leaf (`stacking.py`) instead of
`k` transfers of `k` placed elements.

The input pipeline (`input.dataset`) makes these: its prefetch thread places each one ahead
of use (`place()`) unless the iterator is being read by such loops (`Placement.bulk`), where a
placement ahead would be thrown away.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...ir import Locality, TensorType


@dataclass
class Placement:
    """How an iterator's elements are read, shared by a distributed dataset and its iterators:
    `bulk` once a compiled loop took several at once (placing ahead is then wasted work);
    a single `next()` outside such a loop sets it back."""

    bulk: bool = False
    ahead: int = 0  # the most elements such a loop took at once: how far a new iterator prefetches


class HostElement:
    """One global batch on the host: per leaf, the replicas' pieces padded to `rows` rows and
    concatenated (the global array's host copy), the pytree they form, and every replica's
    real row count. `placer(self)` makes the placed pytree of PerReplicaBatch values."""

    __slots__ = ("hosts", "treedef", "counts", "rows", "_placer", "_value")

    def __init__(self, hosts: list[np.ndarray], treedef: Any, counts: tuple[int, ...], rows: int,
                 placer: Callable[["HostElement"], Any]):
        self.hosts, self.treedef, self.counts, self.rows = hosts, treedef, counts, rows
        self._placer, self._value = placer, None

    def place(self) -> Any:
        """The element placed on the devices (placed once: later calls return the same values)."""
        if self._value is None:
            self._value = self._placer(self)
        return self._value

    @property
    def is_placed(self) -> bool:
        return self._value is not None

    @property
    def types(self) -> tuple[TensorType, ...]:
        """Each leaf's per-replica type: `rows` rows of the leaf's trailing shape."""
        return tuple(TensorType((self.rows, *h.shape[1:]), np.dtype(h.dtype), Locality.PER_REPLICA)
                     for h in self.hosts)

    def count_host(self) -> np.ndarray:
        """The real row counts as the host copy of the program's per-replica int32 input."""
        return np.asarray(self.counts, np.int32)


def placed(element: Any) -> Any:
    """`element` as placed values (a HostElement is placed now if it was not yet)."""
    return element.place() if isinstance(element, HostElement) else element
