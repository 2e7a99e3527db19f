"""The inputs Keras' `fit`/`evaluate`/`predict` take (issue 34, item 3), read by a model compiled
in a strategax scope: a `keras.utils.PyDataset` (a partial last batch, `workers` and
`use_multiprocessing` left default), a Python generator with `steps_per_epoch`, NumPy arrays with
`validation_split`, `validation_data` (arrays and an `sx.data.Dataset`), `shuffle=True` under a
fixed seed, `sample_weight`, and a distributed dataset from `distribute_datasets_from_function`. Reference: Keras
alone on one device (a model built outside any scope) on the same inputs and global batches, from
the same weights (101 rows in batches of 16: a last batch of 5, uneven on 2 and 8 replicas).
`sx.data.Dataset` and `experimental_distribute_dataset`: tests/test_keras_datasets.py."""
import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402

import strategax as sx  # noqa: E402
from conftest import assert_names_this_line, here  # noqa: E402
from strategax.keras._keras3 import runner_of  # noqa: E402
from test_keras_callbacks import INIT, X, Y  # noqa: E402

BATCH, TOL = 16, 1e-5
STEPS = -(-len(X) // BATCH)  # 7 batches, the last of 5 rows


def build():
    """A two-layer MLP with INIT's weights, plain SGD (its step count is its only state) and a metric."""
    m = keras.Sequential([keras.layers.Input(shape=(6,)), keras.layers.Dense(8, activation="tanh"),
                          keras.layers.Dense(1)])
    m.compile(loss="mse", optimizer=keras.optimizers.SGD(0.05), metrics=["mae"])
    m.set_weights(INIT)
    return m


class Batches(keras.utils.PyDataset):
    """X, Y in batches of 16 (the last partial), `workers`/`use_multiprocessing` left default."""

    def __init__(self, features_only=False, **kwargs):
        super().__init__(**kwargs)
        self.features_only = features_only

    def __len__(self):
        return STEPS

    def __getitem__(self, i):
        rows = slice(i * BATCH, (i + 1) * BATCH)
        return (X[rows],) if self.features_only else (X[rows], Y[rows])


def batches(features_only=False, repeat=True):
    """A Python generator of the same batches, forever (`repeat`) or once."""
    while True:
        for i in range(STEPS):
            rows = slice(i * BATCH, (i + 1) * BATCH)
            yield (X[rows],) if features_only else (X[rows], Y[rows])
        if not repeat:
            return


def py_dataset(model):
    history = model.fit(Batches(), epochs=2, shuffle=False, verbose=0).history
    return history, model.evaluate(Batches(), verbose=0), model.predict(Batches(features_only=True), verbose=0)


def generator(model):
    history = model.fit(batches(), steps_per_epoch=STEPS, epochs=2, shuffle=False, verbose=0).history
    return (history, model.evaluate(batches(repeat=False), verbose=0),
            model.predict(batches(features_only=True), steps=STEPS, verbose=0))


def validation_split(model):
    # 0.25 of 101 rows: 75 to train (a last batch of 11), the last 26 to validate (16 + 10)
    history = model.fit(X, Y, batch_size=BATCH, epochs=2, validation_split=0.25, shuffle=False, verbose=0).history
    return history, model.evaluate(X[75:], Y[75:], batch_size=BATCH, verbose=0), None


def validation_data(model):
    arrays = model.fit(X[:75], Y[:75], batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
                       validation_data=(X[75:], Y[75:]), validation_batch_size=7).history
    # the same validation batches as an sx.data.Dataset (Keras alone, the reference: as arrays)
    dataset = sx.data.Dataset.from_tensor_slices((X[75:], Y[75:])).batch(BATCH)
    kwargs = ({"validation_data": (X[75:], Y[75:]), "validation_batch_size": BATCH} if runner_of(model) is None
              else {"validation_data": dataset})
    more = model.fit(X[:75], Y[:75], batch_size=BATCH, epochs=1, shuffle=False, verbose=0, **kwargs).history
    return {**arrays, **{f"ds_{k}": v for k, v in more.items()}}, None, None


def shuffled(model):
    keras.utils.set_random_seed(3)  # Keras' shuffle draws from NumPy's global generator
    history = model.fit(X, Y, batch_size=BATCH, epochs=3, shuffle=True, verbose=0).history
    return history, None, model.predict(X, batch_size=BATCH, verbose=0)


def sample_weights(model):
    w = np.linspace(0.1, 2.0, len(X)).astype(np.float32)
    history = model.fit(X, Y, sample_weight=w, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history
    return history, model.evaluate(X, Y, sample_weight=w, batch_size=BATCH, verbose=0), None


def from_function(model):
    # each replica's batches from dataset_fn (per-replica batch size 16 / N); Keras alone: the
    # same global batches as arrays
    runner = runner_of(model)
    if runner is None:
        return (model.fit(X, Y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history,
                model.evaluate(X, Y, batch_size=BATCH, verbose=0), model.predict(X, batch_size=BATCH, verbose=0))
    strategy = runner.strategy

    def dataset_fn(ctx):
        return sx.data.Dataset.from_tensor_slices((X, Y)).batch(ctx.get_per_replica_batch_size(BATCH))

    data = strategy.distribute_datasets_from_function(dataset_fn)
    return model.fit(data, epochs=2, verbose=0).history, model.evaluate(data, verbose=0), model.predict(data, verbose=0)


KINDS = {"py_dataset": py_dataset, "generator": generator, "validation_split": validation_split,
         "validation_data": validation_data, "shuffle": shuffled, "sample_weight": sample_weights,
         "from_function": from_function}


def reset(model):
    model.set_weights(INIT)
    model.optimizer.iterations.assign(0)


def run(model, kind):
    reset(model)
    history, evaluated, predicted = KINDS[kind](model)
    return history, [np.asarray(w) for w in model.get_weights()], evaluated, predicted


@pytest.fixture(scope="module")
def reference():
    """Keras alone on one device, per input kind (one model, reset between kinds)."""
    model = build()
    return {kind: run(model, kind) for kind in KINDS}


@pytest.fixture(scope="module", params=[2, 8], ids=["2-replicas", "8-replicas"])
def distributed(request):
    """One model per replica count (its programs shared by every input kind)."""
    with sx.MirroredStrategy([f"CPU:{i}" for i in range(request.param)]).scope():
        return build()


@pytest.mark.parametrize("kind", KINDS)
def test_input_kind_trains_evaluates_and_predicts_as_keras_alone(reference, distributed, kind):
    # Intent: every input kind Keras takes gives one device's numbers on the same batches, the
    # partial last batch included: per-epoch logs (validation's too), weights, evaluate, predict.
    history, weights, evaluated, predicted = run(distributed, kind)
    ref_history, ref_weights, ref_evaluated, ref_predicted = reference[kind]
    assert sorted(history) == sorted(ref_history)
    for key, want in ref_history.items():
        np.testing.assert_allclose(history[key], want, rtol=TOL, atol=TOL, err_msg=key)
    for w, r in zip(weights, ref_weights, strict=True):
        np.testing.assert_allclose(w, r, rtol=TOL, atol=TOL)
    if ref_evaluated is not None:
        np.testing.assert_allclose(evaluated, ref_evaluated, rtol=TOL, atol=TOL)
    if ref_predicted is not None:
        assert np.shape(predicted) == (len(X), 1)
        np.testing.assert_allclose(predicted, ref_predicted, rtol=TOL, atol=TOL)


def test_from_function_datasets_keras_cannot_read_as_global_batches_raise_naming_the_fit_line(monkeypatch):
    # Intent: replicas' batches of different widths make no global batch, and a multi-worker
    # pipeline holds only its own replicas' rows: each raises at the user's fit line with the fix,
    # rather than training on a batch strategax cannot prove right.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    with strategy.scope():
        model = build()
    ragged = strategy.distribute_datasets_from_function(lambda ctx: [(X[:8], Y[:8]), (X[8:16, :5], Y[8:16])])
    line = here() + 2
    with pytest.raises(sx.DistributionValueError, match="differ in shape beyond the batch axis") as err:
        model.fit(ragged, epochs=1, verbose=0)
    assert_names_this_line(err, line)
    monkeypatch.setattr(strategy, "_input_pipeline", lambda: (2, 0), raising=False)  # as on worker 0 of 2
    data = strategy.distribute_datasets_from_function(
        lambda ctx: sx.data.Dataset.from_tensor_slices((X, Y)).batch(ctx.get_per_replica_batch_size(BATCH)))
    line = here() + 2
    with pytest.raises(sx.DistributionValueError, match="multi-worker strategy") as err:
        model.fit(data, epochs=1, verbose=0)
    assert_names_this_line(err, line)
    assert "experimental_distribute_dataset" in str(err.value)
