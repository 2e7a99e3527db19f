"""Keras 3 models and optimizers in `sx.Checkpoint(model=..., optimizer=...)` (issue 34): each
Keras variable becomes an entry, named by its position (`model/variables/3`), as Keras' own
weight files name them, so a checkpoint restores into the same architecture built anew (Keras'
variable paths carry layer names that change from one model to the next). Keras is never
imported: its objects are recognised by their module."""
from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np


def is_keras_object(obj: Any) -> bool:
    """A Keras layer/model or optimizer (anything of Keras' with variables)."""
    module = type(obj).__module__ or ""
    return module.split(".")[0] == "keras" and hasattr(obj, "variables")


def _is_optimizer(obj: Any) -> bool:
    return hasattr(obj, "iterations") and hasattr(obj, "build") and hasattr(obj, "apply_gradients")


class _Store:
    def __init__(self, var):
        self._var = var

    def global_value(self):
        return jnp.asarray(self._var.value)


class KerasEntry:
    """One Keras variable as a checkpoint entry (what `sx.Checkpoint` reads and assigns)."""

    _strategy = None  # a Keras variable belongs to no strategax strategy

    def __init__(self, var):
        self._var = var
        self._store = _Store(var)
        self.name = var.path

    shape = property(lambda self: tuple(self._var.shape))
    dtype = property(lambda self: np.dtype(self._var.dtype))

    def _check_read(self, context: str) -> None:
        del context  # a Keras variable always has its one value

    def assign(self, value) -> None:
        self._var.assign(np.asarray(value))


def build_optimizers(objects: list) -> None:
    """Build every unbuilt Keras optimizer that a Keras model in `objects` was compiled with, on
    that model's trainable variables (as Keras does before loading weights), so that its slots
    exist to be saved or restored."""
    models = [o for o in objects if not _is_optimizer(o)]
    for opt in (o for o in objects if _is_optimizer(o)):
        if getattr(opt, "built", True):
            continue
        for model in models:
            if getattr(model, "optimizer", None) is opt:
                opt.build(model.trainable_variables)
                break


def entries(obj: Any) -> list[tuple[str, KerasEntry]]:
    """(name under the object's path, entry) for each of a Keras object's variables, in order."""
    return [(str(i), KerasEntry(v)) for i, v in enumerate(obj.variables)]
