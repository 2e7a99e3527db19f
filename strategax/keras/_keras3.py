"""The one module that touches Keras' internals (Keras 3.15 on JAX; `SUPPORTED` names the
versions it was checked against, and any other version is refused with the fix).

Keras has no public hook for "run this model's steps through a distribution strategy" on its
JAX backend, so `install()` wraps, once, a few methods of Keras' classes; each wrapper does what
Keras does unless the model was compiled inside a strategax scope (or, for the step hooks, a
strategax replica step of that model is being traced):
- `Trainer.compile`: records the strategy (TensorFlow's Keras remembers it the same way) and
  refuses another backend than JAX inside a strategax scope;
- `JAXTrainer.make_train_function` / `make_test_function` / `make_predict_function`: Keras'
  public contract for what `fit`/`evaluate`/`predict` call; strategax's (`functions.Runner`);
- `BaseOptimizer.stateless_apply` and `LossScaleOptimizer.stateless_apply`: the replicas'
  gradients combined before the update (`steps.StepContext.combine_grads`);
- `Trainer.compute_loss`: records how the compiled losses combine rows (a mean or a sum);
- `JAXTrainer._update_metrics_variables`: metrics of the whole batch (`update_metrics`);
- `BackupAndRestore` and `ModelCheckpoint`'s writes: on a multi-worker job only the chief writes
  the user's path; the other workers write the same files to a folder of their own, deleted
  after each save (`_write_as_chief`, as TensorFlow's Keras did): every worker still does
  what a save reads (the same collectives), and no two processes write one file (HDF5 refuses
  a file another process holds open).
"""
from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import tempfile
from typing import Any, Iterator

import jax.numpy as jnp

from .. import _context
from ..input.padding import batch_mask
from . import batch_norm, custom_loops, steps
from .errors import KerasAdapterError, KerasBackendError
from .functions import Runner

SUPPORTED = ("3.15",)  # Keras major.minor versions this adapter was checked against

_installed = False


def check_version(version: str) -> None:
    """Refuse a Keras this adapter does not know (its internals may differ)."""
    if not any(version == v or version.startswith(v + ".") for v in SUPPORTED):
        raise KerasBackendError(
            f"strategax's Keras adapter supports Keras {', '.join(SUPPORTED)}, not Keras {version}",
            f"install a supported Keras: pip install \"keras>={SUPPORTED[0]},<{_next(SUPPORTED[-1])}\"")


def _next(version: str) -> str:
    major, minor = version.split(".")
    return f"{major}.{int(minor) + 1}"


def install() -> None:
    """Wrap Keras' methods (once per process)."""
    global _installed
    if _installed:
        return
    import keras
    from keras.src.trainers import trainer as trainer_module

    _installed = True
    from . import datasets
    datasets.install()  # fit(sx.data.Dataset) and fit(distributed dataset)
    _wrap_compile(trainer_module.Trainer, keras)
    if keras.backend.backend() != "jax":
        return  # compile inside a strategax scope raises; nothing else to wrap
    check_version(keras.__version__)
    from keras.src.backend.jax import trainer as jax_trainer
    from keras.src.metrics import reduction_metrics
    from keras.src.optimizers import base_optimizer, loss_scale_optimizer

    jt = jax_trainer.JAXTrainer
    for kind in ("train", "test", "predict"):
        _wrap_make_function(jt, kind)
    _wrap_compute_loss(trainer_module.Trainer)
    _wrap_update_metrics(jt)
    _wrap_mean_update(reduction_metrics.Mean)
    _wrap_stateless_apply(base_optimizer.BaseOptimizer)
    _wrap_stateless_apply(loss_scale_optimizer.LossScaleOptimizer)
    _wrap_scale_loss(loss_scale_optimizer.LossScaleOptimizer)
    _wrap_scale_loss(base_optimizer.BaseOptimizer, only_global_statistics=True)
    from keras.src.backend.jax import core as jax_core
    custom_loops.wrap_variable(jax_core.JaxVariable)
    custom_loops.wrap_apply(base_optimizer.BaseOptimizer)
    from keras.src.callbacks import backup_and_restore, model_checkpoint
    from keras.src.layers.normalization import batch_normalization
    _wrap_batch_normalization(batch_normalization.BatchNormalization)
    _wrap_backup_and_restore(backup_and_restore.BackupAndRestore)
    _wrap_model_checkpoint(model_checkpoint.ModelCheckpoint)


# --- which models -------------------------------------------------------------------------
def runner_of(model) -> Runner | None:
    """The strategax runner of a model compiled inside a strategax scope, else None."""
    return model.__dict__.get("_sx_runner")


def _wrap_compile(cls, keras) -> None:
    original = cls.compile

    def compile(self, *args, **kwargs):  # noqa: A001 - Keras' name
        strategy = _context.strategy() if _context.has_strategy() else None
        if strategy is not None and keras.backend.backend() != "jax":
            raise KerasBackendError(
                f"Keras runs on the {keras.backend.backend()!r} backend, and strategax compiles JAX "
                "programs: a Keras model inside a strategax scope needs Keras' JAX backend",
                "set KERAS_BACKEND=jax before Keras is imported (os.environ['KERAS_BACKEND'] = 'jax' "
                "at the top of the program, or in the shell)")
        original(self, *args, **kwargs)
        if strategy is not None:
            object.__setattr__(self, "_sx_runner", Runner(self, strategy, REPLICA_STEPS))
            for name in ("train_function", "test_function", "predict_function"):
                object.__setattr__(self, name, None)

    compile.__wrapped__ = original  # type: ignore[attr-defined]
    cls.compile = compile


def _wrap_make_function(cls, kind: str) -> None:
    name = f"make_{kind}_function"
    original = getattr(cls, name)
    attr = f"{kind}_function"

    def make_function(self, force=False):
        runner = runner_of(self)
        if runner is None:
            return original(self, force)
        if getattr(self, attr, None) is not None and not force:
            return getattr(self, attr)
        function = runner.make(kind)
        object.__setattr__(self, attr, function)
        return function

    make_function.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(cls, name, make_function)


def step_arguments(model, kind: str, x, y=None, sample_weight=None) -> tuple:
    """(state, batch) as `fit`/`evaluate`/`predict` hand one step of `kind` to its strategax
    function: the model's state tuple (Keras' `_get_jax_state`) and the batch split across the
    replicas (with `steps_per_execution` > 1, a distributed iterator of that one batch). Builds
    the model, its metrics and its optimizer first, as `fit` does."""
    from keras.src.trainers.data_adapters import data_adapter_utils

    runner = runner_of(model)
    assert runner is not None, "sx.keras checks the model was compiled in a scope"
    data = data_adapter_utils.pack_x_y_sample_weight(x, y, sample_weight)
    model._symbolic_build(data_batch=data)
    if kind == "train" and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    parts = {"train": dict(trainable_variables=True, non_trainable_variables=True, optimizer_variables=True,
                           metrics_variables=True),
             "test": dict(trainable_variables=True, non_trainable_variables=True, metrics_variables=True),
             "predict": dict(trainable_variables=True, non_trainable_variables=True)}[kind]
    state = model._get_jax_state(**parts)
    if runner.steps(kind) > 1:  # the loop's function takes an iterator (here: of this one batch)
        return state, runner.batches(iter([data]))
    batch = runner.next_batch(iter([data]))
    return state, batch


# --- BatchNormalization(synchronized=True) ---------------------------------------------------
def _wrap_batch_normalization(cls) -> None:
    """Keras refuses `synchronized=True` off TensorFlow (its constructor) and its JAX `moments`
    raises for it; inside a strategax scope the layer is made, and in a strategax replica step
    its batch statistics are the global batch's (`batch_norm.global_moments`). Outside every
    strategax scope Keras answers as it does alone."""
    original_init, original_moments = cls.__init__, cls._moments

    def __init__(self, *args, synchronized=False, **kwargs):
        if not (synchronized and _context.has_strategy()):
            return original_init(self, *args, synchronized=synchronized, **kwargs)
        original_init(self, *args, synchronized=False, **kwargs)
        self.synchronized = True

    def _moments(self, inputs, mask):
        if not self.synchronized:
            return original_moments(self, inputs, mask)
        replica = batch_norm.replica_context()
        if replica is None:  # the whole batch is here: the layer's own statistics are the batch's
            self.synchronized = False
            try:
                return original_moments(self, inputs, mask)
            finally:
                self.synchronized = True
        from keras.src import backend
        ctx = steps.active()
        if ctx is not None:  # the loss is weighted before the backward (`_wrap_scale_loss`)
            ctx.global_statistics = True
        return batch_norm.global_moments(replica, self.name, inputs, mask, list(self._reduction_axes),
                                         float(backend.epsilon()))

    __init__.__wrapped__ = original_init  # type: ignore[attr-defined]
    __init__.__signature__ = inspect.signature(original_init)  # type: ignore[attr-defined]  # Keras' auto-config reads it
    _moments.__wrapped__ = original_moments  # type: ignore[attr-defined]
    cls.__init__, cls._moments = __init__, _moments


# --- callbacks that write files -------------------------------------------------------------
def _worker_of(model) -> int | None:
    """This process's worker index when `model` trains on a multi-worker job and this worker is
    not the chief (worker 0), else None (it writes the user's paths, as Keras alone does)."""
    runner = runner_of(model) if model is not None else None
    if runner is None or runner.strategy.extended.should_checkpoint:
        return None
    return int(getattr(runner.strategy, "_worker_index", 1))


@contextlib.contextmanager
def _write_as_chief(callback, attrs: tuple[str, ...], root: str) -> Iterator[None]:
    """On a worker other than the chief: `callback`'s path attributes (under the folder `root`)
    point into a folder of this worker's own while the block runs, and that folder is deleted
    after (TensorFlow's Keras wrote a non-chief's checkpoints to a temporary folder and deleted
    it the same way)."""
    worker = _worker_of(getattr(callback, "model", None))
    if worker is None:
        yield
        return
    folder = tempfile.mkdtemp(prefix=f"strategax-workertemp_{worker}-")
    saved = {a: getattr(callback, a) for a in attrs}
    try:
        for a, path in saved.items():
            mine = os.path.join(folder, "files", os.path.relpath(str(path), root))
            object.__setattr__(callback, a, os.path.normpath(mine))
        yield
    finally:
        for a, path in saved.items():
            object.__setattr__(callback, a, path)
        shutil.rmtree(folder, ignore_errors=True)


_BACKUP_PATHS = ("backup_dir", "_weights_path", "_training_metadata_path", "_prev_weights_path",
                 "_prev_training_metadata_path")


def _wrap_backup_and_restore(cls) -> None:
    """The chief writes the backup (every worker restores from it); only the chief deletes it
    when `fit` ends."""
    original_save, original_end = cls._save_model, cls.on_train_end

    def _save_model(self):
        with _write_as_chief(self, _BACKUP_PATHS, str(self.backup_dir)):
            return original_save(self)

    def on_train_end(self, logs=None):
        if _worker_of(self.model) is None:
            return original_end(self, logs)

    _save_model.__wrapped__ = original_save  # type: ignore[attr-defined]
    on_train_end.__wrapped__ = original_end  # type: ignore[attr-defined]
    cls._save_model, cls.on_train_end = _save_model, on_train_end


def _wrap_model_checkpoint(cls) -> None:
    """The chief writes the user's file; another worker the same file in its own folder."""
    original = cls._save_model

    def _save_model(self, epoch, batch, logs):
        with _write_as_chief(self, ("filepath",), os.path.dirname(str(self.filepath)) or "."):
            return original(self, epoch, batch, logs)

    _save_model.__wrapped__ = original  # type: ignore[attr-defined]
    cls._save_model = _save_model


# --- inside a replica step ----------------------------------------------------------------
def _wrap_compute_loss(cls) -> None:
    original = cls.compute_loss

    def compute_loss(self, *args, **kwargs):
        loss = original(self, *args, **kwargs)
        ctx = steps.active()
        if ctx is not None and ctx.model is self:
            ctx.loss_reduction = loss_reduction(self)
        return loss

    compute_loss.__wrapped__ = original  # type: ignore[attr-defined]
    cls.compute_loss = compute_loss


def loss_reduction(model) -> str:
    """'mean' when every compiled loss is a mean over the batch's elements (Keras' default),
    'sum' when every one is a sum and nothing else is added; anything else raises."""
    for layer in model._flatten_layers(include_self=True):
        if getattr(layer, "activity_regularizer", None) is not None:
            raise KerasAdapterError(
                f"the layer {layer.name!r} has an activity regularizer, which Keras divides by the "
                "batch's static row count: on a partial batch split across replicas that count "
                "includes padded rows, so strategax cannot give one device's loss",
                "add the penalty in the model's call as a mean over the batch "
                "(self.add_loss(ops.mean(...))), or drop the activity regularizer")
    compile_loss = getattr(model, "_compile_loss", None)
    flat = getattr(compile_loss, "_flat_losses", None) or []
    reductions = {getattr(fn, "reduction", None) for _, fn, _, _ in flat}
    if reductions and reductions <= set(steps.MEAN_REDUCTIONS):
        return "mean"
    if reductions == {"sum"} and not model.losses:
        return "sum"
    if not reductions:
        return "mean"  # only added losses (regularization): they do not depend on the rows
    raise KerasAdapterError(
        f"the compiled losses reduce the batch as {sorted(map(str, reductions))}: strategax combines "
        "the replicas' losses exactly when every loss is a mean over the batch "
        "('sum_over_batch_size', Keras' default) or every loss is a sum",
        "compile with losses of one kind of reduction (the default, 'sum_over_batch_size', is exact)")


def _wrap_stateless_apply(cls) -> None:
    original = cls.stateless_apply

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        ctx = steps.active()
        if ctx is None or ctx.kind != "train" or ctx.apply_depth:
            return original(self, optimizer_variables, grads, trainable_variables)
        if self is not ctx.model.optimizer:
            raise KerasAdapterError(
                "a Keras train_step applied an optimizer other than the model's compiled one",
                "apply gradients with self.optimizer.stateless_apply(...)")
        ctx.apply_depth += 1
        try:
            grads = ctx.combine_grads(list(grads), ctx.data_rows)
            return original(self, optimizer_variables, grads, trainable_variables)
        finally:
            ctx.apply_depth -= 1

    stateless_apply.__wrapped__ = original  # type: ignore[attr-defined]
    cls.stateless_apply = stateless_apply


def _wrap_scale_loss(cls, only_global_statistics: bool = False) -> None:
    """A LossScaleOptimizer's scaled loss in a replica step is also weighted by the replica's
    share of the batch (TensorFlow scales each replica's loss by 1/replicas): the float16
    backward overflows where one device's does; `combine_grads` then sums the gradients.
    Any optimizer's (`only_global_statistics`) when the forward all-reduced batch statistics
    (a synchronized BatchNormalization): the backward of that all-reduce sums every replica's
    cotangents, so each replica's loss must carry its weight n_i / N before the gradient, not after."""
    original = cls.scale_loss

    def scale_loss(self, loss):
        scaled = original(self, loss)
        ctx = steps.active()
        if ctx is None or ctx.kind != "train" or self is not ctx.model.optimizer:
            return scaled
        if only_global_statistics and not ctx.global_statistics:
            return scaled
        share = ctx.loss_share()
        return scaled if share is None else scaled * share.astype(scaled.dtype)

    scale_loss.__wrapped__ = original  # type: ignore[attr-defined]
    cls.scale_loss = scale_loss


def _wrap_update_metrics(cls) -> None:
    original = cls._update_metrics_variables

    def _update_metrics_variables(self, metrics_variables, unscaled_loss, x, y, y_pred, sample_weight):
        ctx = steps.active()
        if ctx is None or ctx.model is not self:
            return original(self, metrics_variables, unscaled_loss, x, y, y_pred, sample_weight)
        return update_metrics(ctx, self, metrics_variables, unscaled_loss, x, y, y_pred, sample_weight)

    _update_metrics_variables.__wrapped__ = original  # type: ignore[attr-defined]
    cls._update_metrics_variables = _update_metrics_variables


def update_metrics(ctx: steps.StepContext, model, metrics_variables, unscaled_loss, x, y, y_pred,
                   sample_weight):
    """Keras' metric update for the whole batch: each replica's increment from zero (padded rows
    weighted 0, the loss weighted by the real rows), summed across replicas, added to the state."""
    from keras.src import backend

    if model._compile_loss is not None and model._compile_loss.metrics:
        raise KerasAdapterError(
            "a model with several outputs tracks a loss per output, weighted by the batch's static "
            "row count; strategax does not combine those across replicas exactly yet",
            "train a model with one output (or one compiled loss) under strategax for now")
    for metric in model.metrics:
        if type(metric).__name__ == "R2Score":
            raise KerasAdapterError(
                f"the metric {metric.name!r} (R2Score) counts samples by the batch's static size, "
                "which on a partial batch split across replicas includes padded rows",
                "compute R2 after training from model.predict's rows, or use metrics built on "
                "keras.metrics.Mean (MeanSquaredError, ...)")
    n = ctx.real_rows(ctx.data_rows)
    refs = list(model.metrics_variables)
    zeros = [jnp.zeros_like(v) for v in metrics_variables]
    with backend.StatelessScope(state_mapping=list(zip(refs, zeros))) as scope:
        loss = None if unscaled_loss is None else jnp.where(n > 0, unscaled_loss, jnp.zeros((), unscaled_loss.dtype))
        if loss is not None:
            model._loss_tracker.update_state(loss, sample_weight=n.astype(loss.dtype))
        model.compute_metrics(x, y, y_pred, sample_weight)
    increments = []
    for ref, zero in zip(refs, zeros):
        value = scope.get_current_value(ref)
        increments.append(zero if value is None else value)
    summed = steps.sum_metric_increments(ctx, refs, increments)
    new = [old + inc.astype(old.dtype) for old, inc in zip(metrics_variables, summed)]
    with backend.StatelessScope(state_mapping=list(zip(refs, new))):
        logs = model.get_metrics_result()
    ctx.metrics_out = new
    return logs, new


def _wrap_mean_update(cls) -> None:
    """`keras.metrics.Mean` (and every MeanMetricWrapper: accuracy, MSE, ...) counts an
    unweighted batch by its static row count; traced by strategax it counts the real rows
    (weights from `sx.nn.batch_mask`: 1 for real rows, 0 for padded ones)."""
    original = cls.update_state

    def update_state(self, values, sample_weight=None):
        if _context.is_tracing() and sample_weight is None and jnp.ndim(values) >= 1:
            sample_weight = batch_mask(values).astype(jnp.float32)
        return original(self, values, sample_weight=sample_weight)

    update_state.__wrapped__ = original  # type: ignore[attr-defined]
    cls.update_state = update_state


# --- the replica steps ----------------------------------------------------------------------
def replica_train(model, state, data):
    """One replica's `model.train_step(state, data)` with the batch's numbers (see steps.py)."""
    with steps.StepContext(model, "train") as ctx:
        ctx.data_rows = steps.leading_rows(data)
        logs, new_state = model.train_step(state, data)
    if not ctx.grads_combined:
        raise KerasAdapterError(
            "the Keras train_step did not apply its optimizer through self.optimizer.stateless_apply, "
            "so strategax could not combine the replicas' gradients before the update",
            "apply gradients with `self.optimizer.stateless_apply(optimizer_variables, grads, "
            "trainable_variables)` in train_step (Keras' JAX contract)")
    trainable, non_trainable, optimizer_vars, metrics = new_state
    non_trainable = steps.combine_non_trainable(ctx, model.non_trainable_variables, state[1], non_trainable)
    return logs, (trainable, non_trainable, optimizer_vars, metrics)


def replica_test(model, state, data):
    with steps.StepContext(model, "test") as ctx:
        ctx.data_rows = steps.leading_rows(data)
        logs, new_state = model.test_step(state, data)
    trainable, non_trainable, metrics = new_state
    non_trainable = steps.combine_non_trainable(ctx, model.non_trainable_variables, state[1], non_trainable)
    return logs, (trainable, non_trainable, metrics)


def replica_predict(model, state, data):
    with steps.StepContext(model, "predict") as ctx:
        ctx.data_rows = steps.leading_rows(data)
        outputs, non_trainable = model.predict_step(state, data)
    non_trainable = steps.combine_non_trainable(ctx, model.non_trainable_variables, state[1], non_trainable)
    return outputs, (state[0], non_trainable)


REPLICA_STEPS: dict[str, Any] = {"train": replica_train, "test": replica_test, "predict": replica_predict}
