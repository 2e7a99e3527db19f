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


@pytest.mark.parametrize("replicas", [2, 8])
@pytest.mark.parametrize("rows", [101, 97])
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
    np.testing.assert_allclose(got["evaluate"], want["evaluate"], rtol=1e-5)
    assert got["predict"].shape == (rows, 1)
    np.testing.assert_allclose(got["predict"], want["predict"], rtol=1e-5, atol=1e-5)


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
