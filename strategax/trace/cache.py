"""Bounds on the program caches: each compiled function keeps at most `cache_size()` programs,
and each strategy at most that many functions for its eager API calls together
(`run`/`reduce`/`gather`/`batch_reduce_to`/`extended.update`); the least
recently used goes first. Set the bound with the environment variable STRATEGAX_CACHE_SIZE
(read when a function or strategy is made; default 64)."""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Callable

from ..errors import DistributionValueError

ENV = "STRATEGAX_CACHE_SIZE"
DEFAULT_SIZE = 64


def cache_size() -> int:
    """The most entries a program cache keeps (STRATEGAX_CACHE_SIZE, default 64)."""
    text = os.environ.get(ENV)
    if text is None or text.strip() == "":
        return DEFAULT_SIZE
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size < 1:
        raise DistributionValueError(f"{ENV}={text!r} is not a positive whole number",
                                     f"set {ENV} to the most programs a cache keeps, e.g. {DEFAULT_SIZE}")
    return size


class LRU:
    """A mapping that keeps the `size` most recently used entries."""

    def __init__(self, size: int | None = None):
        self.size = cache_size() if size is None else size
        self._entries: OrderedDict = OrderedDict()

    def get(self, key) -> Any:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def get_or_make(self, key, make: Callable[[], Any]) -> Any:
        value = self.get(key)
        if value is None:
            value = self._entries[key] = make()
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def values(self):
        return self._entries.values()
