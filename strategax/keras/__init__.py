"""Keras 3 on strategax (`pip install "strategax[keras]"`, `KERAS_BACKEND=jax`): a model compiled
inside `strategy.scope()` runs `fit`, `evaluate` and `predict` as strategax programs.

Importing strategax never imports Keras: entering a strategy's scope installs the adapter
(`_keras3.py`, the one module that touches Keras' internals) once Keras has been imported.
"""
from __future__ import annotations

import sys
from typing import Any

from .. import _context


def _on_scope(strategy) -> None:
    """A scope was entered: wrap Keras' methods if the program uses Keras."""
    if "keras" in sys.modules:
        from . import _keras3
        _keras3.install()


_context.add_scope_hook(_on_scope)


def _runner(model, what: str):
    from . import _keras3
    from .errors import KerasAdapterError
    _keras3.install()
    runner = _keras3.runner_of(model)
    if runner is None:
        raise KerasAdapterError(
            f"{what}: the model {getattr(model, 'name', model)!r} was not compiled inside a strategax "
            "strategy's scope, so Keras runs it on its own",
            "compile it inside `with strategy.scope():`")
    return runner


def train_function(model) -> Any:
    """The `strategy.function` that runs `model`'s train steps (a model compiled inside a
    strategax scope): one step, or with `steps_per_execution=N > 1` one on-device loop of N;
    call `.ir(...)`, `.stats(...)`, `.report(...)` on it with the arguments `fit` passes
    (`step_arguments(model, x, y)`), or set STRATEGAX_DUMP_TO before `fit`."""
    return _runner(model, "sx.keras.train_function").function("train")


def test_function(model) -> Any:
    """The `strategy.function` of `model`'s evaluate steps (see `train_function`)."""
    return _runner(model, "sx.keras.test_function").function("test")


def predict_function(model) -> Any:
    """The `strategy.function` of one predict step of `model` (see `train_function`)."""
    return _runner(model, "sx.keras.predict_function").function("predict")


def step_arguments(model, x, y=None, sample_weight=None, kind: str = "train") -> tuple:
    """The arguments `fit` (kind "train"), `evaluate` ("test") or `predict` ("predict") passes
    one step of `model`'s strategax function for the global batch `(x, y, sample_weight)`:
    `f = sx.keras.train_function(model); f.ir(*sx.keras.step_arguments(model, x, y))`."""
    from . import _keras3
    from .errors import KerasAdapterError
    if kind not in ("train", "test", "predict"):
        raise KerasAdapterError(f"kind must be 'train', 'test' or 'predict', not {kind!r}",
                                "pass kind='train' (fit), 'test' (evaluate) or 'predict'")
    _runner(model, "sx.keras.step_arguments")
    return _keras3.step_arguments(model, kind, x, y, sample_weight)


def set_loss_reduction(model, reduction: str) -> None:
    """Say how a custom train_step's (or compute_loss's) loss combines the batch's rows: 'mean'
    (a mean over them, as Keras' losses) or 'sum', so that strategax can combine the replicas'
    gradients into the batch's."""
    from .errors import KerasAdapterError
    if reduction not in ("mean", "sum"):
        raise KerasAdapterError(f"the loss reduction must be 'mean' or 'sum', not {reduction!r}",
                                "pass 'mean' (a mean over the batch's rows) or 'sum'")
    object.__setattr__(model, "_sx_loss_reduction", reduction)


__all__ = ["predict_function", "set_loss_reduction", "step_arguments", "test_function", "train_function"]
