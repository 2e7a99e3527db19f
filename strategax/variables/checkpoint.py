"""`sx.Checkpoint` and `sx.latest_checkpoint`: save and restore a strategy's variables.

A checkpoint is one `.npz` file holding each variable's cross-replica value (a sync-on-read
variable's aggregate), so it restores under any number of replicas: restoring is a
cross-replica `assign`, which divides a SUM sync-on-read value among the replicas and gives
MEAN/ONLY_FIRST_REPLICA ones the value as is (the seed's rule). Writes are atomic: the file is
written under a temporary name, synced and renamed into place (`os.replace`), then the index
file `checkpoint` naming the latest one is replaced the same way, so a crash mid-save leaves
the previous checkpoint intact. (orbax-checkpoint is not installable here and brings
tensorstore and an async runtime; this is ~100 lines of NumPy.)
"""
from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from ..errors import DistributionValueError
from .variables import Variable

INDEX = "checkpoint"
_NAME = re.compile(r"ckpt-(\d+)\.npz\Z")


def _flatten(prefix: str, obj: Any, out: dict) -> None:
    if isinstance(obj, Variable):
        out[prefix] = obj
    elif hasattr(obj, "variables") and hasattr(obj, "_restore"):  # an sx.Optimizer
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}/{k}" if prefix else str(k), v, out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _flatten(f"{prefix}/{i}" if prefix else str(i), v, out)
    else:
        raise DistributionValueError(f"sx.Checkpoint cannot save {type(obj).__name__} at {prefix!r}",
                                     "pass variables, optimizers, or dicts/lists of them")


def _atomic_write(path: str, write) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def latest_checkpoint(directory: str) -> str | None:
    """The path of the newest complete checkpoint in `directory`, or None."""
    try:
        with open(os.path.join(directory, INDEX)) as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    path = os.path.join(directory, name)
    return path if os.path.exists(path) else None


class Checkpoint:
    """Save/restore variables and optimizers given as keyword arguments (nested dicts allowed)."""

    def __init__(self, **objects):
        self._objects = objects

    def _entries(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _flatten("", self._objects, out)
        return out

    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = {}
        for path, obj in self._entries().items():
            if isinstance(obj, Variable):
                arrays[path] = np.asarray(obj.read_value())
            else:
                arrays.update({f"{path}/{k}": np.asarray(v.read_value()) for k, v in obj.variables().items()})
        return arrays

    def save(self, directory: str) -> str:
        """Write a new checkpoint `directory/ckpt-N.npz` atomically; returns its path."""
        os.makedirs(directory, exist_ok=True)
        numbers = [int(m.group(1)) for m in map(_NAME.match, os.listdir(directory)) if m]
        name = f"ckpt-{max(numbers, default=0) + 1}.npz"
        path = os.path.join(directory, name)
        arrays = self._arrays()
        _atomic_write(path, lambda f: np.savez(f, **arrays))
        _atomic_write(os.path.join(directory, INDEX), lambda f: f.write(name.encode()))
        return path

    def restore(self, path: str) -> "Checkpoint":
        """Assign every saved value to its variable, in cross-replica context."""
        if os.path.isdir(path):
            path = latest_checkpoint(path) or path
        entries = self._entries()
        with np.load(path) as data:
            saved = {k: data[k] for k in data.files}
        for key, value in saved.items():
            obj = entries.get(key)
            if isinstance(obj, Variable):
                obj.assign(value)
                continue
            owner = next((p for p in entries if key.startswith(p + "/") and not isinstance(entries[p], Variable)), None)
            if owner is None:
                raise DistributionValueError(f"checkpoint {path} holds {key!r}, which this Checkpoint does not have",
                                             "build the Checkpoint with the same names used to save it")
            entries[owner]._restore(key[len(owner) + 1:], value)
        missing = [p for p, o in entries.items() if isinstance(o, Variable) and p not in saved]
        if missing:
            raise DistributionValueError(f"checkpoint {path} has no value for {', '.join(missing)}",
                                         "restore a checkpoint saved from the same objects")
        return self
