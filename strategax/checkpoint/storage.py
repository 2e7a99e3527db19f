"""orbax-checkpoint is the storage engine: a checkpoint is an orbax checkpoint of a nested dict
(`StandardCheckpointHandler`), so orbax alone restores it. Arrays are written from their
devices by orbax (in a multi-worker job each process writes its own shards; replicated arrays
once), synchronously or with orbax's async checkpointing (the device-to-host copy happens
before `save` returns, the write in the background). strategax's own record (a format tag and
one digest per entry) is a small `strategax.json` beside orbax's files, written once the
digests are in, before the checkpoint is published; orbax ignores it.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable

import numpy as np

from .names import Path, nest

FORMAT = "strategax-checkpoint/1"
RECORD = "strategax.json"


def _ocp():
    import orbax.checkpoint as ocp  # imported on first use: `import strategax` stays light
    return ocp


def write(path: str, tree: dict, asynchronous: bool) -> Callable[[], None]:
    """Start writing `tree` to `path` (which must not exist); returns the function that waits
    until it is complete on disk (at once for a synchronous write)."""
    ocp = _ocp()
    handler = ocp.StandardCheckpointHandler()
    checkpointer = ocp.AsyncCheckpointer(handler) if asynchronous else ocp.Checkpointer(handler)
    checkpointer.save(path, args=ocp.args.StandardSave(tree))

    def finish() -> None:
        try:
            if isinstance(checkpointer, ocp.AsyncCheckpointer):
                checkpointer.wait_until_finished()
        finally:
            checkpointer.close()
    return finish


def write_record(path: str, record: dict) -> None:
    """strategax's record of a written checkpoint (a temporary name, then a rename)."""
    tmp = os.path.join(path, f".{RECORD}.tmp")
    with open(tmp, "w") as f:
        json.dump({"format": FORMAT, **record}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(path, RECORD))


def read_record(path: str) -> dict | None:
    """strategax's record, or None when it is missing or unreadable."""
    try:
        with open(os.path.join(path, RECORD)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def read_metadata(path: str) -> dict[Path, tuple[tuple, np.dtype]]:
    """The shape and dtype of every entry by path, without reading the arrays."""
    ocp = _ocp()
    with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as checkpointer:
        meta = checkpointer.metadata(path)
    tree = meta.item_metadata.tree if hasattr(meta.item_metadata, "tree") else meta.item_metadata
    return _flat(tree, lambda leaf: (tuple(leaf.shape), np.dtype(leaf.dtype)))


def _flat(tree: Any, leaf_fn: Callable, path: Path = (), out: dict | None = None) -> dict:
    """{path: leaf_fn(leaf)} of a nested dict (lists keyed by index)."""
    out = {} if out is None else out
    if isinstance(tree, (dict, list, tuple)):
        items = tree.items() if isinstance(tree, dict) else enumerate(tree)
        for key, value in items:
            _flat(value, leaf_fn, path + (str(key),), out)
    else:
        out[path] = leaf_fn(tree)
    return out


def read(path: str, tree_paths: list[Path]) -> dict[Path, np.ndarray]:
    """Every entry of the checkpoint as a host array (any number of devices and processes)."""
    ocp = _ocp()
    restore_args = nest({p: ocp.RestoreArgs(restore_type=np.ndarray) for p in tree_paths})
    with ocp.PyTreeCheckpointer() as checkpointer:
        tree = checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=restore_args))
    return _flat(tree, np.asarray)
