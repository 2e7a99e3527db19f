"""`keras.layers.BatchNormalization(synchronized=True)` under a strategax strategy (issue 34):
its batch statistics are the global batch's, over its real rows only, so `fit` (training mode:
losses, metrics, weights and moving statistics), `evaluate` and `predict` (inference: the
moving statistics) equal one device's `BatchNormalization` on the whole batch, partial
batches included (101 rows in batches of 16: a last batch of 5, on 8 replicas some with no
rows; 97 rows: a last batch of one row). Reference: Keras alone on one device
(`synchronized=False`, which on one device is the same layer; Keras refuses `True` off
TensorFlow)."""
import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402

import strategax as sx  # noqa: E402
from strategax.keras.errors import KerasAdapterError  # noqa: E402

RNG = np.random.default_rng(11)
X = (RNG.normal(size=(101, 6)) * 2 + 1).astype(np.float32)
Y = (X @ RNG.normal(size=(6, 1))).astype(np.float32)
BATCH, EPOCHS = 16, 2


def build(synchronized: bool):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.layers.Input(shape=(6,)), keras.layers.Dense(8),
                              keras.layers.BatchNormalization(synchronized=synchronized, momentum=0.5),
                              keras.layers.Activation("relu"), keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer=keras.optimizers.SGD(0.05), metrics=["mae"])
    return model


def train(model, rows: int) -> dict:
    history = model.fit(X[:rows], Y[:rows], batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0).history
    return {"history": history, "weights": model.get_weights(),
            "evaluate": model.evaluate(X[:rows], Y[:rows], batch_size=BATCH, verbose=0),
            "predict": model.predict(X[:rows], batch_size=BATCH, verbose=0)}


@pytest.fixture(scope="module")
def one_device():
    return {rows: train(build(False), rows) for rows in (101, 97)}


@pytest.mark.parametrize("rows,replicas", [(101, 2), (101, 8), (97, 8)])
def test_synchronized_batch_norm_equals_one_device_on_the_whole_batch(one_device, replicas, rows):
    # Intent: with the statistics of the global batch's real rows (per-replica statistics, or
    # padded rows counted, move the weights by ~1e-2 here), every number fit, evaluate and
    # predict give equals Keras alone on one device; the batch's gradient flows through the
    # all-reduced statistics with each replica's loss weighted by its share of the rows.
    want = one_device[rows]
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(replicas)])
    with strategy.scope():
        model = build(True)
    assert model.layers[1].synchronized and model.layers[1].get_config()["synchronized"]
    got = train(model, rows)
    for key in ("loss", "mae"):
        np.testing.assert_allclose(got["history"][key], want["history"][key], rtol=1e-5, err_msg=key)
    for g, w, v in zip(got["weights"], want["weights"], model.weights, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=v.path)  # moving statistics included
    # evaluate and predict: one device's for the same weights (two epochs of float rounding in the
    # weights, each within 1e-5 of one device's above, move the loss by up to ~1e-5 on their own)
    same = build(False)
    same.set_weights(got["weights"])
    np.testing.assert_allclose(got["evaluate"], same.evaluate(X[:rows], Y[:rows], batch_size=BATCH, verbose=0),
                               rtol=1e-5)
    assert got["predict"].shape == (rows, 1)
    np.testing.assert_allclose(got["predict"], same.predict(X[:rows], batch_size=BATCH, verbose=0),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["predict"], want["predict"], rtol=1e-4, atol=1e-4)


def test_in_a_custom_loop_the_training_outputs_use_the_global_batch(one_device):
    # Intent: model(x, training=True) inside strategy.run (the custom-loop form) normalizes with
    # the statistics of the whole batch of 13 rows over 4 replicas (the last one with one row),
    # as one device's layer on the whole batch.
    ref = build(False)
    want = np.asarray(ref(X[:13], training=True))
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    with strategy.scope():
        model = build(True)
    model.set_weights(ref.get_weights())

    @strategy.function
    def forward(batch):
        def step(x):
            weights = [v.value for v in model.trainable_variables]
            with keras.StatelessScope(state_mapping=zip(model.trainable_variables, weights)):
                return model(x, training=True)
        return strategy.gather(strategy.run(step, args=(batch,)), axis=0)

    batch = next(iter(strategy.experimental_distribute_dataset([X[:13]])))
    got = np.asarray(jax.device_get(forward(batch)))
    assert got.shape == (13, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_outside_every_scope_keras_refuses_it_as_alone():
    # Intent: a layer made outside any strategax scope is Keras' own, which refuses the flag off
    # TensorFlow (nothing changes for Keras alone).
    with pytest.raises(ValueError, match="synchronized=True is only supported with the TensorFlow backend"):
        keras.layers.BatchNormalization(synchronized=True)


SEQ = np.concatenate([X[:, None, :3], X[:, None, 3:]], axis=1)  # [rows, 2 steps, 3 features]
SEQ[::3, 1] = 0.0  # every third row's second step masked


def masked_model(synchronized: bool):
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.layers.Input(shape=(2, 3)), keras.layers.Masking(0.0),
                              keras.layers.BatchNormalization(synchronized=synchronized, momentum=0.5),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer=keras.optimizers.SGD(0.05))
    return model


def test_a_masked_synchronized_batch_norm_weights_the_real_steps_of_every_replica():
    # Intent: with a Keras mask (Masking: some steps masked), the statistics are Keras' masked
    # ones (the mask's weighted mean and variance) over every replica's real rows: fit's losses
    # and weights equal one device's on 101 rows in batches of 16 over 8 replicas.
    want = masked_model(False)
    want_history = want.fit(SEQ, Y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0).history
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(8)])
    with strategy.scope():
        model = masked_model(True)
    history = model.fit(SEQ, Y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0).history
    np.testing.assert_allclose(history["loss"], want_history["loss"], rtol=1e-5)
    for g, w, v in zip(model.get_weights(), want.get_weights(), model.weights, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=v.path)


def test_statistics_of_a_value_that_is_not_the_batch_raise_naming_the_layer():
    # Intent: a synchronized layer given a value whose first axis is not the batch's rows
    # (reshaped to twice the rows) cannot tell real rows from padded ones: fit raises at trace
    # time naming the layer, this file's fit line and the fix, instead of counting padded rows.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input(shape=(6,)), keras.layers.Dense(8),
                                  keras.layers.Reshape((2, 4)),
                                  keras.layers.Lambda(lambda v: keras.ops.reshape(v, (-1, 4))),
                                  keras.layers.BatchNormalization(synchronized=True, name="pairs"),
                                  keras.layers.Lambda(lambda v: keras.ops.reshape(v, (-1, 8))),
                                  keras.layers.Dense(1)])
        model.compile(loss="mse", optimizer=keras.optimizers.SGD(0.05))
    with pytest.raises(KerasAdapterError, match="synchronized BatchNormalization 'pairs'") as err:
        model.fit(X[:21], Y[:21], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert err.value.file == __file__ and "whose first axis is the batch" in str(err.value)
