"""Where `sx.data.Dataset.cache` keeps the elements of its first complete pass: in memory, or in a
file that later runs (and other datasets naming the same file, as in TensorFlow) read back."""
from __future__ import annotations

import os
import pickle
import tempfile
import threading
from typing import Any

SUFFIX = ".strategax-cache"  # not TensorFlow's file format: its .index/.data files are never read


class CacheStore:
    """The cached elements, once a pass has completed (`filename` "" keeps them in memory)."""

    def __init__(self, filename: str):
        self._path = filename + SUFFIX if filename else None
        self._elements: list | None = None
        self._lock = threading.Lock()

    def read(self) -> list[Any] | None:
        """The kept elements, or None while no pass has completed."""
        with self._lock:
            if self._elements is None and self._path is not None and os.path.exists(self._path):
                with open(self._path, "rb") as f:
                    self._elements = pickle.load(f)  # the user's own cache file, written by write()
            return self._elements

    def write(self, elements: list[Any]) -> None:
        """Keep a complete pass's elements (the first complete pass wins)."""
        with self._lock:
            if self._elements is not None:
                return
            self._elements = elements
            if self._path is not None:
                folder = os.path.dirname(os.path.abspath(self._path))
                with tempfile.NamedTemporaryFile("wb", dir=folder, delete=False) as f:
                    pickle.dump(elements, f)
                os.replace(f.name, self._path)
