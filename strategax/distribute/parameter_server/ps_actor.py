"""The parameter-server actor: variables as NumPy arrays, updated in place. Ray runs one
method of an actor at a time, so each call is atomic: an update is never lost between a
read and a write, and `apply` (all of one step's updates to this server) happens whole.

The class is made by `parameter_server_class()` so that Ray ships it by value: a
parameter-server process imports only NumPy, not JAX or strategax."""
from __future__ import annotations


def parameter_server_class():
    """The actor class (defined here, inside a function, so that it pickles by value)."""
    import os

    import numpy as np

    class ParameterServer:
        """Holds variables by id; applies updates; remembers which steps it applied."""

        def __init__(self, index: int):
            self.index = index
            self.values: dict[int, np.ndarray] = {}
            self.named: dict[tuple, int] = {}  # get-or-create keys (optimizer slots made on workers)
            self.applied: set[int] = set()  # closure ids whose updates are in

        def ready(self) -> int:
            return os.getpid()

        def create(self, value, key=None):
            """A new variable's id (or, for a `key` seen before, that variable's id and value)."""
            if key is not None and key in self.named:
                var_id = self.named[key]
                return var_id, self.values[var_id]
            var_id = len(self.values)
            self.values[var_id] = np.array(value, copy=True)
            if key is not None:
                self.named[key] = var_id
            return var_id, None

        def read(self, ids: list):
            return [self.values[i] for i in ids]

        def _update(self, var_id: int, kind: str, value) -> None:
            old = self.values[var_id]
            if kind == "assign":
                self.values[var_id] = np.array(value, dtype=old.dtype, copy=True).reshape(old.shape)
            elif kind == "assign_add":
                np.add(old, np.asarray(value, old.dtype), out=old)
            elif kind == "assign_sub":
                np.subtract(old, np.asarray(value, old.dtype), out=old)
            else:
                raise ValueError(f"unknown update {kind!r}")

        def update(self, var_id: int, kind: str, value):
            """One update from the coordinator (cross-replica code); returns the new value."""
            self._update(var_id, kind, value)
            return self.values[var_id]

        def apply(self, closure_id: int, updates: list) -> bool:
            """A step's updates [(id, kind, value)], once per closure id (a step run again after
            its worker died after sending them adds nothing); False when already applied."""
            if closure_id in self.applied:
                return False
            for var_id, kind, value in updates:
                self._update(var_id, kind, value)
            self.applied.add(closure_id)
            return True

    return ParameterServer
