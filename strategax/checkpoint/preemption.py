"""`sx.PreemptionCheckpointHandler`: TensorFlow's `tf.distribute.experimental.
PreemptionCheckpointHandler` on `sx.CheckpointManager`.

Created, it restores the latest checkpoint (and with it `total_run_calls`, stored in the
checkpoint as `checkpointed_runs`, TensorFlow's name, and kept current by every save of the
checkpoint, the user's own included). Each `run(train_fn, ...)` first checks
for a preemption notice (SIGTERM): when one has arrived, every worker saves a checkpoint at the
same step boundary and the process exits with TensorFlow's restart code, 42. One process
watches SIGTERM itself; in a multi-worker job JAX's preemption sync manager (started by
`jax.distributed.initialize`) catches it and makes the workers agree on the step, the one
after the furthest any worker has reached (`multihost_utils.reached_preemption_sync_point`).
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
import weakref
from typing import Any, Callable

import jax
import jax.numpy as jnp

from ..cluster import rendezvous
from ..errors import CheckpointError
from ..variables import Variable
from .checkpoint import Checkpoint
from .manager import CheckpointManager

RUNS = "checkpointed_runs"  # TensorFlow's name for the run counter in the checkpoint
RESTART_CODE = 42  # TensorFlow's exit code after a preemption checkpoint (outside Google Cloud)


class PreemptionCheckpointHandler:
    """Save a checkpoint at the next step boundary when the job is told it will be preempted.

    `termination_config`: None, or an object with an `exit_fn` (as TensorFlow's
    `TerminationConfig`) called after the save instead of `sys.exit(42)`; its other fields
    (a custom watcher, a grace period) are not used: the notice is SIGTERM."""

    def __init__(self, cluster_resolver, checkpoint_or_checkpoint_manager, checkpoint_dir: str | None = None,
                 termination_config: Any = None):
        target = checkpoint_or_checkpoint_manager
        if isinstance(target, Checkpoint):
            if not checkpoint_dir:
                raise CheckpointError("When a checkpoint is passed, a checkpoint_dir must be passed as well.",
                                      "pass checkpoint_dir=..., or an sx.CheckpointManager")
            target = CheckpointManager(target, checkpoint_dir, max_to_keep=1)
        elif not isinstance(target, CheckpointManager):
            raise CheckpointError(
                f"PreemptionCheckpointHandler needs an sx.Checkpoint or sx.CheckpointManager, not "
                f"{type(target).__name__}", "pass sx.Checkpoint(...) with checkpoint_dir, or a manager")
        self._cluster_resolver = cluster_resolver
        self._manager = target
        self._exit_fn = getattr(termination_config, "exit_fn", None) or (lambda: sys.exit(RESTART_CODE))
        self._runs = Variable(jnp.int32(0), name=RUNS, trainable=False)
        if RUNS in target.checkpoint._objects:
            raise CheckpointError(f"the checkpoint already holds {RUNS!r} (another PreemptionCheckpointHandler?)",
                                  "use one handler per checkpoint")
        target.checkpoint._objects[RUNS] = self._runs
        # every save of this checkpoint records the runs so far (TensorFlow's handler updates
        # it only when it saves itself, so a regular checkpoint would restore a stale count)
        target.checkpoint._before_save.append(functools.partial(_record_runs, weakref.ref(self)))
        target.restore_or_initialize()
        self._run_counter = int(self._runs.numpy())
        self._multi_process = jax.process_count() > 1
        self._noticed = threading.Event()
        self._save_at: int | None = None
        if not self._multi_process:  # several processes: JAX's preemption sync manager has SIGTERM
            self._previous = _watch_sigterm(weakref.ref(self))

    @property
    def total_run_calls(self) -> int:
        """How many times `run` was called, counting the runs before a restart."""
        return self._run_counter

    def run(self, distributed_train_function: Callable, *args, **kwargs):
        """`distributed_train_function(*args, **kwargs)`, after saving and exiting if a
        preemption notice has arrived (at the step every worker agrees on)."""
        self._check_preemption_and_maybe_checkpoint()
        result = distributed_train_function(*args, **kwargs)
        self._run_counter += 1
        return result

    def save_checkpoint_if_preempted(self) -> None:
        """For loops that do not go through `run`: check, save and exit if preempted; counts a run."""
        self._check_preemption_and_maybe_checkpoint()
        self._run_counter += 1

    @contextlib.contextmanager
    def watch_preemption_scope(self):
        """TensorFlow's scope for TPUStrategy; here `run` already handles the notice, so the
        scope only marks the training loop (errors pass through)."""
        yield

    def _check_preemption_and_maybe_checkpoint(self) -> None:
        if self._multi_process:
            from jax.experimental import multihost_utils

            if not multihost_utils.reached_preemption_sync_point(self._run_counter):
                return
        else:
            if self._save_at is None and self._noticed.is_set():
                self._save_at = self._run_counter + 1  # TensorFlow's choice: one more step first
            if self._save_at != self._run_counter:
                return
            signal.signal(signal.SIGTERM, self._previous)
        with rendezvous.preemption_save():  # the notice asks for this save: it must not stop it
            path = self._manager.save(check_interval=False)
            self._manager.sync()
        print(f"strategax: preemption notice: saved {path} after {self._run_counter} runs; exiting",
              file=sys.stderr, flush=True)
        self._exit_fn()


def _record_runs(handler: "weakref.ref[PreemptionCheckpointHandler]") -> None:
    live = handler()
    if live is not None:
        live._runs.assign(live._run_counter)


def _watch_sigterm(handler: "weakref.ref[PreemptionCheckpointHandler]"):
    """Note SIGTERM for `handler`; once the handler is gone, SIGTERM does what it did before.
    Returns the previous disposition."""
    if threading.current_thread() is not threading.main_thread():
        raise CheckpointError("PreemptionCheckpointHandler must be created in the main thread "
                              "(it installs the SIGTERM handler)", "create it in the main thread")
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame):
        live = handler()
        if live is not None:
            live._noticed.set()
        elif callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
    signal.signal(signal.SIGTERM, on_sigterm)
    return previous if previous is not None else signal.SIG_DFL
