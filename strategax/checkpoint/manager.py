"""`sx.CheckpointManager`: TensorFlow's `tf.train.CheckpointManager` on `sx.Checkpoint`.

`save()` writes `directory/<checkpoint_name>-N` and then deletes the oldest of this name beyond
`max_to_keep`; `checkpoints` and `latest_checkpoint` are read from the directory itself (the
complete checkpoints of this name, oldest first), so managers in several processes sharing a
directory agree, and a restarted program sees what the last one left. With
`async_save=True`, `save()` returns once the values are copied off the devices (orbax's async
checkpointing) and the checkpoint appears when written; the next save, `sync()`, a restore and
the end of the program wait for it.
"""
from __future__ import annotations

import os
from typing import Callable

from ..errors import CheckpointError
from ..variables import Variable
from . import paths
from .checkpoint import Checkpoint


class CheckpointManager:
    """Numbered checkpoints of `checkpoint` in `directory`, keeping the newest `max_to_keep`."""

    def __init__(self, checkpoint: Checkpoint, directory: str, max_to_keep: int | None = 5,
                 checkpoint_name: str = "ckpt", step_counter: Variable | None = None,
                 checkpoint_interval: int | None = None, init_fn: Callable[[], None] | None = None,
                 async_save: bool = False):
        if not isinstance(checkpoint, Checkpoint):
            raise CheckpointError(f"CheckpointManager manages an sx.Checkpoint, not {type(checkpoint).__name__}",
                                  "pass sx.Checkpoint(...)")
        if max_to_keep is not None and (not isinstance(max_to_keep, int) or max_to_keep <= 0):
            raise CheckpointError(f"Expected a positive integer or `None` for `max_to_keep`, got {max_to_keep}.",
                                  "keep at least one checkpoint, or None for all")
        if checkpoint_interval is not None and step_counter is None:
            raise CheckpointError("`step_counter` should be passed if `checkpoint_interval` is not None.",
                                  "pass the variable counting training steps as step_counter")
        paths.check_path(directory, "CheckpointManager's directory")
        paths.check_name(checkpoint_name)
        self._checkpoint, self._directory = checkpoint, os.fspath(directory)
        self._max_to_keep, self._name = max_to_keep, checkpoint_name
        self._step_counter, self._interval = step_counter, checkpoint_interval
        self._init_fn, self._async = init_fn, async_save
        self._last_step: int | None = None

    directory = property(lambda self: self._directory)
    checkpoint = property(lambda self: self._checkpoint)
    checkpoint_interval = property(lambda self: self._interval)

    @property
    def checkpoints(self) -> list[str]:
        """The complete checkpoints of this manager's name, oldest first."""
        return [p for _, p in paths.numbered(self._directory)
                if (m := paths.NUMBERED.match(os.path.basename(p))) and m.group("name") == self._name]

    @property
    def latest_checkpoint(self) -> str | None:
        found = self.checkpoints
        return found[-1] if found else None

    def save(self, checkpoint_number: int | None = None, check_interval: bool = True) -> str | None:
        """Write a checkpoint (numbered `checkpoint_number` if given) and delete the oldest
        beyond `max_to_keep`; with `checkpoint_interval`, returns None without saving until
        `step_counter` has advanced that far since the last save."""
        step = None
        if self._step_counter is not None:
            step = int(self._step_counter.numpy())
        if self._interval is not None and check_interval and self._last_step is not None and step is not None \
                and step - self._last_step < self._interval:
            return None
        path = self._checkpoint._save(self._directory, self._name, checkpoint_number,
                                      asynchronous=self._async, published=self._sweep)
        self._last_step = step
        return path

    def _sweep(self) -> None:
        """Once a save is published: delete the oldest beyond `max_to_keep`."""
        if self._max_to_keep is not None:
            for old in self.checkpoints[:-self._max_to_keep]:
                paths.delete(old)

    def sync(self) -> None:
        """Wait for an async save to be on disk."""
        self._checkpoint.sync()

    def restore_or_initialize(self) -> str | None:
        """Restore the latest checkpoint and return its path; with none, call `init_fn` (if
        given) and return None."""
        self._checkpoint.sync()
        latest = self.latest_checkpoint
        if latest is not None:
            self._checkpoint.restore(latest)
            if self._step_counter is not None:
                self._last_step = int(self._step_counter.numpy())
            return latest
        if self._init_fn is not None:
            self._init_fn()
        return None
