"""Keras callbacks and checkpoints around `fit` on strategax (issue 34, item 5): EarlyStopping,
ReduceLROnPlateau, BackupAndRestore (an interrupted fit resumed) and `sx.Checkpoint(model=...,
optimizer=...)` with Keras objects, and Keras mixed precision skipping a step when one replica's
rows overflow. Reference: the same code run by Keras alone on one device
(a model built outside any scope), on 101 rows in batches of 16 (a last batch of 5: uneven on 2
and 8 replicas)."""
import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402

import strategax as sx  # noqa: E402

ROWS, BATCH = 101, 16
RNG = np.random.default_rng(7)
X = RNG.normal(size=(ROWS, 6)).astype(np.float32)
Y = (X @ RNG.normal(size=(6, 1)) + 0.3 * RNG.normal(size=(ROWS, 1))).astype(np.float32)
INIT = [RNG.normal(scale=0.3, size=(6, 8)).astype(np.float32), np.zeros(8, np.float32),
        RNG.normal(scale=0.3, size=(8, 1)).astype(np.float32), np.zeros(1, np.float32)]


def model_in(strategy, lr=0.05, optimizer=None):
    """A two-layer MLP with INIT's weights, compiled in `strategy`'s scope (None: Keras alone)."""
    def build():
        m = keras.Sequential([keras.layers.Input(shape=(6,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(1)])
        m.compile(loss="mse", optimizer=optimizer() if optimizer else keras.optimizers.SGD(lr))
        m.set_weights(INIT)
        return m
    if strategy is None:
        return build()
    with strategy.scope():
        return build()


def mirrored(n):
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(n)])


def fit(model, callbacks, epochs=12, **kwargs):
    return model.fit(X, Y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks,
                     **kwargs)


def assert_weights_equal(a, b, rtol=1e-5, atol=1e-6):
    for x, y in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


@pytest.mark.parametrize("replicas", [2, 8])
def test_early_stopping_and_reduce_lr_on_plateau_act_on_the_epochs_keras_alone_does(replicas):
    # Intent: the callbacks read the same per-epoch logs as Keras alone, so EarlyStopping stops at
    # the same epoch (before the last) and ReduceLROnPlateau lowers the rate at the same epochs.
    def run(strategy):
        model = model_in(strategy)
        history = fit(model, [keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0,
                                                                min_delta=0.02),
                              keras.callbacks.EarlyStopping(monitor="loss", min_delta=0.005, patience=1)])
        return model, history.history
    ref_model, ref = run(None)
    model, got = run(mirrored(replicas))
    assert len(ref["loss"]) < 12, "the reference must stop early for the test to mean anything"
    assert min(ref["learning_rate"]) < 0.05, "the reference must lower the rate"
    assert len(got["loss"]) == len(ref["loss"])
    np.testing.assert_allclose(got["loss"], ref["loss"], rtol=1e-5)
    np.testing.assert_allclose(got["learning_rate"], ref["learning_rate"], rtol=1e-7)
    assert_weights_equal(model, ref_model)


class Interrupt(keras.callbacks.Callback):
    """Raises at `batch` of `epoch`, as a killed job stops."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.at, self.epoch = (epoch, batch), None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            raise RuntimeError("interrupted")


@pytest.mark.parametrize("save_freq", ["epoch", 3])
def test_backup_and_restore_resumes_as_keras_alone_does(tmp_path, save_freq):
    # Intent: a fit interrupted in epoch 2 (batch 4) and run again with the same BackupAndRestore
    # folder resumes from the backup: per epoch (its weights and epoch) it ends with the
    # uninterrupted run's numbers; every 3 batches (Keras restarts the interrupted epoch from the
    # weights of mid-epoch) with Keras alone's interrupted-and-resumed numbers.
    def run(strategy, folder):
        model = model_in(strategy)
        backup = keras.callbacks.BackupAndRestore(str(folder), save_freq=save_freq)
        with pytest.raises(RuntimeError, match="interrupted"):
            fit(model, [backup, Interrupt(2, 4)], epochs=4)
        model = model_in(strategy)
        history = fit(model, [keras.callbacks.BackupAndRestore(str(folder), save_freq=save_freq)], epochs=4)
        return model, history.history["loss"]
    ref_model, ref_loss = run(None, tmp_path / "ref")
    model, loss = run(mirrored(2), tmp_path / "sx")
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    assert_weights_equal(model, ref_model)
    if save_freq == "epoch":
        whole = model_in(None)
        fit(whole, [], epochs=4)
        assert len(loss) == 2  # epochs 2 and 3 ran again
        assert_weights_equal(model, whole)


def test_sx_checkpoint_saves_and_restores_keras_models_and_optimizers(tmp_path):
    # Intent: sx.Checkpoint(model=..., optimizer=...) takes Keras objects: restoring the weights
    # and the optimizer's state (Adam's moments and step) into a fresh model in a scope and
    # training on gives what training without a break gives (Keras alone, 3 epochs).
    strategy = mirrored(2)
    adam = lambda: keras.optimizers.Adam(0.01)  # noqa: E731
    model = model_in(strategy, optimizer=adam)
    fit(model, [], epochs=2)
    ckpt = sx.Checkpoint(model=model, optimizer=model.optimizer)
    path = ckpt.save(str(tmp_path / "ckpt"))
    fresh = model_in(strategy, optimizer=adam)
    status = sx.Checkpoint(model=fresh, optimizer=fresh.optimizer).restore(path)
    status.assert_consumed()
    fit(fresh, [], epochs=1)
    whole = model_in(None, optimizer=adam)
    fit(whole, [], epochs=3)
    assert_weights_equal(fresh, whole)
    assert int(np.asarray(fresh.optimizer.iterations)) == int(np.asarray(whole.optimizer.iterations))
@pytest.mark.parametrize("replicas", [2, 8])
def test_mixed_precision_skips_the_step_when_any_replica_overflows(replicas):
    # Intent: with mixed_float16 and Keras' LossScaleOptimizer, a batch that overflows float16
    # only on the last replica's rows skips the step on every replica and halves the scale, as
    # Keras alone skips it for the whole batch; the next steps train alike (each replica's loss
    # is weighted by its share before the scaled backward, so on 8 replicas a clean batch does
    # not overflow where one device's does not).
    x = X[:32].copy()
    x[-2:] = 1e5  # beyond float16 (inf in the forward): the last rows, on the last replica under 2 and 8
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        def run(strategy):
            model = model_in(strategy)
            before = [w.copy() for w in model.get_weights()]
            scale0 = float(model.optimizer.initial_scale)  # dynamic_scale exists once built
            model.fit(x, Y[:32], batch_size=32, epochs=1, shuffle=False, verbose=0)
            skipped = all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
            scale1 = float(np.asarray(model.optimizer.dynamic_scale))
            model.fit(X[:32], Y[:32], batch_size=32, epochs=1, shuffle=False, verbose=0)
            return model, skipped, scale0, scale1
        ref_model, ref_skipped, ref_s0, ref_s1 = run(None)
        model, skipped, s0, s1 = run(mirrored(replicas))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert ref_skipped and ref_s1 == ref_s0 / 2, "the reference must overflow and skip"
    assert skipped and (s0, s1) == (ref_s0, ref_s1)
    assert_weights_equal(model, ref_model, rtol=2e-3, atol=1e-4)  # float16 compute: a few float16 roundings
