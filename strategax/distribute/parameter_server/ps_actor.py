"""The parameter-server actor: variables as NumPy arrays, updated in place. Every call, from the
coordinator (through Ray) or from a worker (through its direct channel, `cluster/channel.py`), runs under
one lock, so each is atomic: an update is never lost between a read and a write, and `apply`
(all of one step's updates to this server) happens whole.

The class is made by `parameter_server_class()` so that Ray ships it by value: a
parameter-server process imports only NumPy and the standard library, not JAX or strategax."""
from __future__ import annotations

from ...cluster.channel import channel_functions


def parameter_server_class():
    """The actor class (defined here, inside a function, so that it pickles by value)."""
    import os
    import pickle
    import threading

    import numpy as np

    channel = channel_functions()

    class ParameterServer:
        """Holds variables by id; applies updates; remembers which steps it applied."""

        def __init__(self, index: int, authkey: bytes):
            self.index = index
            self.values: dict[int, np.ndarray] = {}
            self.named: dict[tuple, int] = {}  # get-or-create keys (optimizer slots made on workers)
            self.applied: set[int] = set()  # closure ids whose updates are in
            self.lock = threading.Lock()
            self.listener = channel.listen(authkey)
            channel.serve(self.listener, self._answer, f"strategax-ps-{index}")

        def ready(self) -> tuple:
            """(process id, the address workers connect to)."""
            return os.getpid(), self.listener.address

        def _answer(self, payload: bytes) -> bytes:
            """A worker's request (method, args) -> ("ok", result) or ("error", message)."""
            method, args = pickle.loads(payload)
            try:
                if method not in ("create", "read", "apply"):
                    raise ValueError(f"unknown request {method!r}")
                reply = ("ok", getattr(self, method)(*args))
            except Exception as e:  # noqa: BLE001 - the worker raises it in its step
                reply = ("error", f"{type(e).__name__}: {e}")
            return pickle.dumps(reply, protocol=5)

        def create(self, value, key=None):
            """A new variable's id (or, for a `key` seen before, that variable's id and value)."""
            with self.lock:
                if key is not None and key in self.named:
                    var_id = self.named[key]
                    return var_id, self.values[var_id]
                var_id = len(self.values)
                self.values[var_id] = np.array(value, copy=True)
                if key is not None:
                    self.named[key] = var_id
                return var_id, None

        def read(self, ids: list):
            with self.lock:
                return [self.values[i].copy() for i in ids]

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
            with self.lock:
                self._update(var_id, kind, value)
                return self.values[var_id].copy()

        def apply(self, closure_id: int, updates: list) -> bool:
            """A step's updates [(id, kind, value)], once per closure id (a step run again after
            its worker died after sending them adds nothing); False when already applied."""
            with self.lock:
                if closure_id in self.applied:
                    return False
                for var_id, kind, value in updates:
                    self._update(var_id, kind, value)
                self.applied.add(closure_id)
                return True

    return ParameterServer
