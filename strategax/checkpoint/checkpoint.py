"""`sx.Checkpoint`: save and restore variables and optimizers, on orbax-checkpoint.

Each variable is stored as its cross-replica value (a sync-on-read variable's aggregate), so a
checkpoint restores under any number of replicas and workers: restoring is a cross-replica
`assign`, which divides a SUM sync-on-read value among the replicas and gives MEAN and
ONLY_FIRST_REPLICA ones the value as is (the seed's rule). Restore reads and checks everything
(names, shapes, dtypes, digests) before it assigns anything, so a failed restore changes
nothing. In a multi-worker job every worker calls `save` and `restore` (as in TensorFlow),
each with the folder it names: one folder for all is written by the chief (worker 0), a folder
of its own by each worker (`_Save`). A relative path is taken from the working directory at
`save` and `restore`.
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

from ..cluster import rendezvous
from ..cluster import runtime as cluster_runtime
from ..cluster.runtime import WorkerRuntime
from ..errors import CheckpointError
from ..variables import Optimizer, ShardedVariable, Variable
from . import digest, names, paths, storage
from .keras_objects import KerasEntry
from .names import Path, Stored, shown
from .status import CheckpointLoadStatus, InitializationOnlyStatus

_in_flight: "weakref.WeakSet[Checkpoint]" = weakref.WeakSet()
SAVE_WAIT_S = 300.0  # how long a save waits for the other workers without CommunicationOptions.timeout_seconds


def _finish_async_saves() -> None:
    """An async save still writing when the program ends is completed, not lost (Python 3.11;
    from 3.12 Python lets no thread start while it shuts down, and orbax's last steps start
    some: the save is then left unpublished, the previous checkpoint stays the latest, and
    this says so)."""
    for ckpt in list(_in_flight):
        try:
            ckpt.sync()
        except Exception as e:  # noqa: BLE001 - report, never hang or mask the exit
            hint = ("; Python 3.12+ starts no thread at exit: call manager.sync() (or checkpoint.sync()) "
                    "before the program ends" if sys.version_info >= (3, 12) else "")
            print(f"strategax: an async checkpoint save failed: {e}{hint}", file=sys.stderr, flush=True)


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
        path = _followed(os.fspath(save_path))
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
    """One save: claim a number, write with orbax, publish.

    In a multi-worker job every worker calls it, each naming its folder. The workers first
    agree (`_agree`: every worker arrives, bounded) and the chief (worker 0) writes the one
    checkpoint into its folder: the values are the same on every worker, and orbax writes host
    values from process 0 only. A worker that names a folder of its own (TensorFlow's tutorial:
    a temporary one it deletes after the save) publishes there a checkpoint that refers to the
    chief's (`storage.write_reference`), which `restore` follows; no worker waits on a folder
    that only another one creates. A synchronous save returns on every worker once the chief's
    checkpoint is on disk, and fails on every worker if the chief's write failed."""

    def __init__(self, directory: str, name: str, number: int | None, entries: dict[Path, Stored],
                 asynchronous: bool, published: Callable[[], None] | None):
        self.entries, self.asynchronous, self.published = entries, asynchronous, published
        self.runtime = _runtime(entries) if jax.process_count() > 1 else None
        self.chief = self.runtime is None or self.runtime.peers.index == 0
        self.claim: paths.Claim | None = None  # this worker's number
        self.chiefs: tuple[str, int] | None = None  # the chief's checkpoint (path, number)
        if self.runtime is None:
            self.claim = paths.Claim(directory, name, number)
        else:
            self._agree(directory, name, number)
        self.path = os.path.join(directory, f"{name}-{self.claim.number if self.claim else self._chiefs()[1]}")

    def _agree(self, directory: str, name: str, number: int | None) -> None:
        """Every worker arrives (bounded: the late are named); the chief, and every worker with
        a folder of its own, claims a number; every worker learns the chief's checkpoint."""
        what = f"saving checkpoint {os.path.join(directory, name)}-N"
        saves, runtime = rendezvous.channel("checkpoint-save"), self._worker_runtime()
        where = saves.all_gather(runtime, f"{os.path.realpath(directory)}{os.sep}{name}", what, self._bound())
        failure, told = None, ""
        if self.chief or where[runtime.peers.index] != where[0]:
            try:
                self.claim = paths.Claim(directory, name, number)
                told = str(self.claim.number)
            except Exception as e:  # noqa: BLE001 - the others must hear of it, not wait for a number
                failure, told = e, f"{type(e).__name__}: {e}"
        told = saves.all_gather(runtime, told, what, self._bound())[0]
        if failure is not None:
            raise failure
        if not told.isdigit():
            if self.claim:
                self.claim.abandon()
            raise CheckpointError(f"the chief (worker 0) could not save checkpoint {where[0]}-N: {told}",
                                  "see worker 0's error")
        self.chiefs = (f"{where[0]}-{told}", int(told))

    def _worker_runtime(self) -> WorkerRuntime:
        """The multi-worker runtime; only a multi-worker save waits for the others."""
        assert self.runtime is not None, "a single-process save waits for no other worker"
        return self.runtime

    def _claimed(self) -> paths.Claim:
        """This worker's number: the chief, and a worker with a folder of its own, hold one."""
        assert self.claim is not None, "only a worker that shares the chief's folder holds no number"
        return self.claim

    def _chiefs(self) -> tuple[str, int]:
        """The chief's checkpoint (path, number), which the workers agreed on (`_agree`)."""
        assert self.chiefs is not None, "a multi-worker save agrees on the chief's checkpoint first"
        return self.chiefs

    def _bound(self) -> float:
        timeout = self._worker_runtime().timeout
        return timeout if timeout is not None else SAVE_WAIT_S

    def run(self, ckpt: Checkpoint) -> str:
        try:
            arrays = self._values()  # every worker: a sync-on-read value is read across the workers
        except BaseException:
            if self.claim:
                self.claim.abandon()
            raise
        finish = self._refer
        if self.chief:
            try:
                finish = self._write(arrays)
            except BaseException as e:
                self._claimed().abandon()
                self._tell_others(e)
                raise
        if self.asynchronous and self.claim:
            ckpt._in_background(lambda: self._complete(finish))
        elif self.claim:
            self._complete(finish)
        elif not self.asynchronous:
            self._wait_for_chief()
        return self.path

    def _values(self) -> dict[int, jax.Array | np.ndarray]:
        """Each variable's cross-replica value; in a multi-worker job, this worker's copy on the
        host (mirrored and aggregated values are the same on every worker)."""
        arrays = {}
        for var in {id(v): v for v in self.entries.values()}.values():
            value = var._store.global_value()
            if self.runtime is not None:
                value = np.asarray(value if value.is_fully_addressable else value.addressable_shards[0].data)
            arrays[id(var)] = value
        return arrays

    def _write(self, arrays: dict) -> Callable[[], None]:
        """Hand orbax the arrays (and dispatch their digests); returns what completes the write."""
        finish = storage.write(self._claimed().staging, names.nest({p: arrays[id(v)] for p, v in self.entries.items()}),
                               asynchronous=self.asynchronous)
        keys = list(arrays)
        sums = digest.start([arrays[k] for k in keys])  # queued behind orbax's copies, not before them

        def complete() -> None:
            finish()
            by_var = dict(zip(keys, sums()))  # the digests are in: the checkpoint can be published
            storage.write_record(self._claimed().staging, {"digests": {names.dotted(p): by_var[id(v)]
                                                                       for p, v in self.entries.items()}})
        return complete

    def _refer(self) -> None:
        """A worker with a folder of its own: once the chief's checkpoint is written (a
        synchronous save), a checkpoint here that refers to it."""
        if not self.asynchronous:
            self._wait_for_chief()
        storage.write_reference(self._claimed().staging, self._chiefs()[0])

    def _complete(self, finish: Callable[[], None]) -> None:
        claim = self._claimed()
        try:
            finish()
            claim.publish()
        except BaseException as e:
            claim.abandon()
            if self.chief:
                self._tell_others(e)
            raise
        if self.chief:
            self._tell_others(None)
        if self.published is not None:
            self.published()

    def _tell_others(self, error: BaseException | None) -> None:
        """The chief of a synchronous multi-worker save: tell the others how its write ended."""
        if self.runtime is not None and not self.asynchronous:
            outcome = "ok" if error is None else f"{type(error).__name__}: {error}"
            rendezvous.channel("checkpoint-saved").all_gather(self.runtime, outcome, "the end of a save",
                                                              self._bound())

    def _wait_for_chief(self) -> None:
        """A worker but the chief: wait until the chief's checkpoint is on disk (while the chief
        lives, up to SAVE_WAIT_S), and fail as the chief's write failed."""
        checkpoint = self._chiefs()[0]
        outcome = rendezvous.channel("checkpoint-saved").all_gather(
            self._worker_runtime(), "", f"waiting for the chief to write checkpoint {checkpoint}",
            max(self._bound(), SAVE_WAIT_S))[0]
        if outcome != "ok":
            raise CheckpointError(f"the chief (worker 0) could not write checkpoint {checkpoint}: {outcome}",
                                  "see worker 0's error")


def _runtime(entries: dict[Path, Stored]) -> WorkerRuntime:
    """The multi-worker runtime the save waits through (its bound: the strategy's timeout)."""
    for var in entries.values():
        runtime = getattr(var._strategy, "_runtime", None)
        if runtime is not None:
            return runtime
    runtime = cluster_runtime.current()
    if runtime is None:
        raise CheckpointError("this process is one of several JAX processes but no MultiWorkerMirroredStrategy "
                              "joined them", "create the strategy first, as TensorFlow's tutorial does")
    return runtime


# --- restoring ------------------------------------------------------------------------------
def _followed(path: str) -> str:
    """The checkpoint to read for `path`: itself, or the chief's that it refers to."""
    _check_is_checkpoint(path)
    target = storage.reference(path)
    if target is None:
        return path
    if not paths.is_checkpoint(target) or storage.reference(target) is not None:
        raise CheckpointError(f"{path} refers to the chief's checkpoint {target} (a worker with a folder of its own "
                              "saves a reference there), which is not a checkpoint here",
                              "restore the chief's checkpoint folder, from a machine that can read it")
    return target


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
        self.assign: list[tuple[Path, Stored]] = []
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
                if isinstance(var, KerasEntry):
                    continue  # a Keras variable: an sx.Optimizer keeps no state for it
                prefix = names.slot_prefix(opt_path, var_paths[id(var)])
                found = [p[len(prefix):] for p in meta if p[:len(prefix)] == prefix]
                if isinstance(var, ShardedVariable):
                    if found:
                        raise CheckpointError(
                            f"checkpoint {path} holds optimizer state for {shown(var_paths[id(var)])!r}, here a "
                            "sharded variable: optimizer state of sharded variables cannot be restored yet",
                            "restore the model without the optimizer, or into an unsharded variable")
                    continue  # no state of it in the checkpoint: nothing to check or restore
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
