"""`sx.Checkpoint`: save and restore variables and optimizers, on orbax-checkpoint.

Each variable is stored as its cross-replica value (a sync-on-read variable's aggregate), so a
checkpoint restores under any number of replicas and workers: restoring is a cross-replica
`assign`, which divides a SUM sync-on-read value among the replicas and gives MEAN and
ONLY_FIRST_REPLICA ones the value as is (the seed's rule). Restore reads and checks everything
(names, shapes, dtypes, digests) before it assigns anything, so a failed restore changes
nothing. In a multi-worker job every worker calls `save` and `restore` (as in TensorFlow);
worker 0 numbers and publishes the checkpoint and each worker writes its own part.
"""
from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import weakref
from typing import Callable

import jax
import numpy as np

from ..errors import CheckpointError
from ..variables import Optimizer, ShardedVariable, Variable
from . import digest, names, paths, storage
from .names import Path, shown
from .status import CheckpointLoadStatus, InitializationOnlyStatus

_in_flight: "weakref.WeakSet[Checkpoint]" = weakref.WeakSet()


def _finish_async_saves() -> None:
    """An async save still writing when the program ends is completed, not lost."""
    for ckpt in list(_in_flight):
        try:
            ckpt.sync()
        except Exception as e:  # noqa: BLE001 - report, never hang or mask the exit
            print(f"strategax: an async checkpoint save failed: {e}", file=sys.stderr, flush=True)


@functools.cache
def _register_exit_hook() -> None:
    """Run `_finish_async_saves` at interpreter exit before the thread pools orbax writes with
    stop taking work (concurrent.futures stops them with `threading._register_atexit`, which
    runs before `atexit`; hooks registered later run first) and before JAX's collectives
    finalize."""
    getattr(threading, "_register_atexit", atexit.register)(_finish_async_saves)


class Checkpoint:
    """Save/restore variables and optimizers given as keyword arguments (nested dicts allowed)."""

    def __init__(self, **objects):
        names.collect(objects)  # what cannot be saved fails here, at the user's line
        self._objects = objects
        self._lock = threading.Lock()
        self._writing: threading.Thread | None = None
        self._write_error: BaseException | None = None
        self._before_save: list[Callable[[], None]] = []  # e.g. a preemption handler's run count

    # --- saving ---------------------------------------------------------------------------
    def save(self, file_prefix: str) -> str:
        """Write a new numbered checkpoint and return its path. `save(directory)` (an existing
        directory, or a path ending in a separator) writes `directory/ckpt-N`; `save(prefix)`
        (TensorFlow's spelling, e.g. `dir/ckpt`) writes `prefix-N`. `sx.latest_checkpoint`
        of the directory finds either."""
        paths.check_path(file_prefix, "Checkpoint.save")
        directory, name = paths.resolve(file_prefix)
        return self._save(directory, name)

    def _save(self, directory: str, name: str, number: int | None = None, asynchronous: bool = False,
              published: Callable[[], None] | None = None) -> str:
        """Save as `directory/name-N`; `published` runs (on worker 0) once it is on disk."""
        for hook in self._before_save:
            hook()
        entries = names.stored(names.collect(self._objects))
        if not entries:
            raise CheckpointError("sx.Checkpoint has nothing to save", "give it variables or optimizers")
        for var in entries.values():
            var._check_read("cross_replica")  # a sync-on-read variable without aggregation has no value to save
        self.sync()  # this object's previous async save completes first
        with self._lock:
            return _Save(directory, name, number, entries, asynchronous, published).run(self)

    def sync(self) -> None:
        """Wait until an async save of this checkpoint is on disk (raising its error, if any)."""
        thread = self._writing
        if thread is not None:
            thread.join()
            self._writing = None
            _in_flight.discard(self)
        error, self._write_error = self._write_error, None
        if error is not None:
            raise error

    def _in_background(self, work: Callable[[], None]) -> None:
        def target():
            try:
                work()
            except BaseException as e:  # noqa: BLE001 - handed to the next sync()/save()
                self._write_error = e
        self._writing = threading.Thread(target=target, name="strategax-checkpoint-write", daemon=True)
        _register_exit_hook()
        _in_flight.add(self)
        self._writing.start()

    # --- restoring --------------------------------------------------------------------------
    def restore(self, save_path: str | None) -> CheckpointLoadStatus:
        """Restore every object from `save_path` (checked before anything changes); `None`
        restores nothing (TensorFlow's spelling for "no checkpoint yet")."""
        if save_path is None:
            return InitializationOnlyStatus()
        paths.check_path(save_path, "Checkpoint.restore")
        self.sync()
        path = os.fspath(save_path)
        _check_is_checkpoint(path)
        meta, record = _read_metadata(path)
        objects = names.collect(self._objects)
        plan = _Plan(objects, meta, path)
        values = _read_values(path, meta, record)
        for p, var in plan.assign:
            var.assign(values[p])
        for opt, var, prefix, state_paths in plan.deferred:
            opt.defer_slots(var, {sp: values[prefix + sp] for sp in state_paths})
        return CheckpointLoadStatus(path, len(plan.assign) + len(plan.deferred), plan.unused)


class _Save:
    """One save: claim a number (worker 0), write with orbax (every worker), publish."""

    def __init__(self, directory: str, name: str, number: int | None, entries: dict[Path, Variable],
                 asynchronous: bool, published: Callable[[], None] | None):
        self.entries, self.asynchronous, self.published = entries, asynchronous, published
        self.processes = jax.process_count()
        self.chief = jax.process_index() == 0
        self.claim = paths.Claim(directory, name, number) if self.chief else None
        if self.processes > 1:
            number = self._agree(self.claim.number if self.claim else -1)
        else:
            number = self.claim.number
        self.path = os.path.join(directory, f"{name}-{number}")
        self.staging = os.path.join(directory, f"{paths.CLAIM}{number}", f"{name}-{number}")

    def _agree(self, number: int) -> int:
        from jax.experimental import multihost_utils

        return int(self._across_workers(lambda: multihost_utils.broadcast_one_to_all(np.int32(number))))

    def _across_workers(self, fn):
        """Run a step every worker takes together; a lost worker is named (WorkerLostError)."""
        try:
            return fn()
        except Exception as e:
            runtime = next((getattr(v._strategy, "_runtime", None) for v in self.entries.values()
                            if getattr(v._strategy, "_runtime", None) is not None), None)
            lost = runtime.lost_worker_error(f"saving a checkpoint failed ({str(e).splitlines()[0][:200]})") \
                if runtime is not None else None
            if lost is None:
                raise
            raise lost from e

    def run(self, ckpt: Checkpoint) -> str:
        try:
            finish = self._across_workers(self._write)
        except BaseException:
            if self.claim:
                self.claim.abandon()
            raise
        if self.asynchronous:
            ckpt._in_background(lambda: self._complete(finish))
        else:
            self._complete(finish)
            if self.processes > 1:
                from jax.experimental import multihost_utils

                self._across_workers(lambda: multihost_utils.sync_global_devices(f"strategax save {self.path}"))
        return self.path

    def _write(self) -> Callable[[], None]:
        """Hand orbax the arrays (and dispatch their digests); returns what completes the write."""
        unique: dict[int, Variable] = {id(v): v for v in self.entries.values()}
        arrays = {}
        for key, var in unique.items():
            value = var._store.global_value()
            if self.processes > 1 and value.is_fully_addressable:
                value = np.asarray(value)  # a variable outside any strategy: orbax writes it from worker 0
            arrays[key] = value
        finish = storage.write(self.staging, names.nest({p: arrays[id(v)] for p, v in self.entries.items()}),
                               asynchronous=self.asynchronous)
        sums = digest.start(list(arrays.values()))  # queued behind orbax's copies, not before them

        def complete() -> None:
            finish()
            if self.claim:  # worker 0 records the digests; then the checkpoint can be published
                by_var = dict(zip(unique, sums()))
                storage.write_record(self.staging, {"digests": {names.dotted(p): by_var[id(v)]
                                                                for p, v in self.entries.items()}})
        return complete

    def _complete(self, finish: Callable[[], None]) -> None:
        try:
            finish()
            if self.claim:
                self.claim.publish()
        except BaseException:
            if self.claim:
                self.claim.abandon()
            raise
        if self.claim and self.published is not None:
            self.published()


# --- restoring ------------------------------------------------------------------------------
def _check_is_checkpoint(path: str) -> None:
    if paths.is_checkpoint(path):
        return
    if paths.numbered(path):
        raise CheckpointError(f"{path} is a directory of checkpoints, not one checkpoint",
                              "restore sx.latest_checkpoint(directory)")
    what = "does not exist" if not os.path.exists(path) else "is not a checkpoint (or it is damaged)"
    raise CheckpointError(f"{path} {what}", "pass the path save() returned, or sx.latest_checkpoint(directory)")


def _read_metadata(path: str):
    record = storage.read_record(path)
    if not record or record.get("format") != storage.FORMAT or not isinstance(record.get("digests"), dict):
        raise CheckpointError(f"{path} is not a strategax checkpoint, or its {storage.RECORD} is damaged",
                              "restore a checkpoint written by sx.Checkpoint")
    try:
        meta = storage.read_metadata(path)
    except Exception as e:  # orbax/tensorstore/json errors of a damaged file
        raise CheckpointError(f"checkpoint {path} is damaged: its metadata cannot be read ({_first_line(e)})",
                              "restore an earlier checkpoint") from e
    return meta, record


def _read_values(path: str, meta: dict, record: dict) -> dict[Path, np.ndarray]:
    try:
        values = storage.read(path, list(meta))
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is damaged: reading it failed ({_first_line(e)})",
                              "restore an earlier checkpoint") from e
    expected = record["digests"]
    ordered = sorted(values)
    for p, got in zip(ordered, digest.digests([values[p] for p in ordered])):
        if expected.get(names.dotted(p)) != got:
            raise CheckpointError(f"checkpoint {path} is damaged: {shown(p)} does not read back as it was "
                                  "written (digest mismatch)", "restore an earlier checkpoint")
    return values


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


class _Plan:
    """What restoring `meta` into `objects` assigns, checked entry by entry before any change."""

    def __init__(self, objects: names.Objects, meta: dict, path: str):
        self.path, self.meta = path, meta
        self.assign: list[tuple[Path, Variable]] = []
        self.deferred: list[tuple[Optimizer, Variable, Path, list]] = []
        used: set[Path] = set()
        for p, var in names.stored(objects).items():
            self._check(p, var.shape, var.dtype)
            self.assign.append((p, var))
            used.add(p)
        var_paths = objects.path_of()
        unique = {id(v): v for v in objects.variables.values()}.values()
        for opt_path, opt in objects.optimizers.items():
            for var in unique:
                prefix = names.slot_prefix(opt_path, var_paths[id(var)])
                found = [p[len(prefix):] for p in meta if p[:len(prefix)] == prefix]
                if found and isinstance(var, ShardedVariable):
                    raise CheckpointError(
                        f"checkpoint {path} holds optimizer state for {shown(var_paths[id(var)])!r}, here a "
                        "sharded variable: optimizer state of sharded variables cannot be restored yet",
                        "restore the model without the optimizer, or into an unsharded variable")
                if opt.has_slots(var):
                    want = {sp for v, sp, _ in opt.slot_variables() if v is var}
                else:
                    spec = opt.slot_spec(var)
                    want = set(spec)
                    for sp in found:
                        if sp in spec:
                            self._check(prefix + sp, spec[sp].shape, spec[sp].dtype)
                    if found:
                        self.deferred.append((opt, var, prefix, found))
                if found and set(found) != want:
                    raise CheckpointError(
                        f"checkpoint {path}: the optimizer state of {shown(var_paths[id(var)])!r} holds "
                        f"{sorted('/'.join(s) for s in found)}, this optimizer keeps "
                        f"{sorted('/'.join(s) for s in want)}",
                        "restore with the same optax transformation that saved it")
                used.update(prefix + sp for sp in found)
        self.unused = [shown(p) for p in meta if p not in used]

    def _check(self, p: Path, shape, dtype) -> None:
        if p not in self.meta:
            raise CheckpointError(f"checkpoint {self.path} has no value for {shown(p)}",
                                  "restore a checkpoint saved from the same objects and names")
        got_shape, got_dtype = self.meta[p]
        if tuple(got_shape) != tuple(shape) or np.dtype(got_dtype) != np.dtype(dtype):
            raise CheckpointError(
                f"checkpoint {self.path}: {shown(p)} is {np.dtype(got_dtype).name}{list(got_shape)} in the "
                f"checkpoint but {np.dtype(dtype).name}{list(shape)} here",
                "restore into variables of the shape and dtype that were saved")
