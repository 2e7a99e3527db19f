"""orbax-checkpoint is the storage engine: a checkpoint is an orbax checkpoint of a nested dict
(`StandardCheckpointHandler`), so orbax alone restores it. Arrays are written from their
devices by orbax, always by one process alone (in a multi-worker job each writer holds a whole
copy of every value), synchronously or with orbax's async checkpointing (the device-to-host copy happens
before `save` returns, the write in the background). strategax's own record (a format tag and
one digest per entry) is a small `strategax.json` beside orbax's files, written once the
digests are in, before the checkpoint is published; orbax ignores it. A worker of a
multi-worker job that saves into a folder of its own publishes there a reference: a folder with
only `strategax.json`, naming the chief's checkpoint (`write_reference`).
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable

import jax
import numpy as np

from .names import Path, nest

FORMAT = "strategax-checkpoint/1"
RECORD = "strategax.json"


def _ocp():
    import orbax.checkpoint as ocp  # imported on first use: `import strategax` stays light
    return ocp


def _alone() -> dict:
    """orbax's options for a checkpoint this process writes or reads by itself (in a multi-worker
    job too: no barrier with the other processes, no folder another process must create)."""
    ocp = _ocp()
    me = jax.process_index()
    return {"multiprocessing_options": ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})}


def write(path: str, tree: dict, asynchronous: bool) -> Callable[[], None]:
    """Start writing `tree` (arrays of this process) to `path` (which must not exist; a relative
    path is taken from the working directory now); returns the function that waits until it is
    complete on disk (at once for a synchronous write)."""
    ocp = _ocp()
    handler = ocp.StandardCheckpointHandler(**_alone())
    checkpointer = (ocp.AsyncCheckpointer(handler, **_alone()) if asynchronous
                    else ocp.Checkpointer(handler, **_alone()))
    checkpointer.save(os.path.abspath(path), args=ocp.args.StandardSave(tree))

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


def write_reference(path: str, target: str) -> None:
    """A checkpoint at `path` that is the one at `target` (written by another worker of the job):
    a folder holding only strategax's record, which names `target`."""
    os.makedirs(path, exist_ok=True)
    write_record(path, {"checkpoint": os.path.abspath(target)})


def reference(path: str) -> str | None:
    """The checkpoint a `write_reference` folder refers to, or None for any other folder."""
    record = read_record(path)
    target = record.get("checkpoint") if record and record.get("format") == FORMAT else None
    return target if isinstance(target, str) else None


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
    with ocp.Checkpointer(ocp.StandardCheckpointHandler(**_alone()), **_alone()) as checkpointer:
        meta = checkpointer.metadata(os.path.abspath(path))
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
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler(**_alone()), **_alone()) as checkpointer:
        tree = checkpointer.restore(os.path.abspath(path), args=ocp.args.PyTreeRestore(restore_args=restore_args))
    return _flat(tree, np.asarray)
