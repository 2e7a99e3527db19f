"""`fit`/`evaluate` read strategax's datasets (issue 34, item 3): an `sx.data.Dataset` of (x, y)
batches, and what `experimental_distribute_dataset` makes of it, through Keras' DataAdapter
contract (strategax/keras/datasets.py). Reference: Keras alone on one device with the same rows
as NumPy arrays (101 rows in batches of 16: a last batch of 5, uneven on 2 replicas)."""
import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402, F401 - imported with the JAX backend before strategax

import strategax as sx  # noqa: E402
from strategax.keras.errors import KerasAdapterError  # noqa: E402
from test_keras_callbacks import X, Y, model_in  # noqa: E402


def test_fit_and_evaluate_read_sx_datasets_and_distributed_datasets_as_keras_reads_arrays():
    # Intent: an sx.data.Dataset (len from its cardinality) and its distributed form train to
    # Keras alone's numbers on the same rows; y= beside a dataset raises, as Keras' tf.data path does.
    ref = model_in(None)
    want = ref.fit(X, Y, batch_size=16, epochs=2, shuffle=False, verbose=0).history["loss"]
    want_eval = ref.evaluate(X, Y, batch_size=16, verbose=0)
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    ds = sx.data.Dataset.from_tensor_slices((X, Y)).batch(16).prefetch(sx.data.AUTOTUNE)
    for data in (ds, strategy.experimental_distribute_dataset(ds)):
        model = model_in(strategy)
        got = model.fit(data, epochs=2, verbose=0).history["loss"]
        np.testing.assert_allclose(got, want, rtol=1e-5)
        for a, b in zip(model.get_weights(), ref.get_weights(), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(model.evaluate(data, verbose=0), want_eval, rtol=1e-5)
    with pytest.raises(KerasAdapterError, match="`y`"):
        model_in(strategy).fit(ds, Y, epochs=1, verbose=0)
