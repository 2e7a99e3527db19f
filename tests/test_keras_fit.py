"""Keras 3 `fit`/`evaluate`/`predict` of a model compiled inside a strategax scope give what one
device's Keras gives for the same weights and data, partial batches included (a batch that does
not divide by the replica count, replicas with no rows, a last batch of one row): the loss and
metrics per epoch, the weights after training, evaluate's results and predict's rows.

The reference is Keras alone on one device (its own jitted steps, no strategax)."""
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import strategax as sx  # noqa: E402

SIZES = (1, 105, 127, 1001, 1025)
BATCH = 64
TOL = 1e-5


def _model(steps_per_execution=1):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), steps_per_execution=steps_per_execution,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def _data(n):
    rng = np.random.default_rng(n)
    return rng.normal(size=(n, 4)).astype("float32"), rng.integers(0, 3, size=(n,)).astype("int32")


def _reset(model, weights):
    """The model back to its initial weights and a fresh optimizer (its programs kept)."""
    model.set_weights(weights)
    model.optimizer.iterations.assign(0)  # plain SGD: the step count is its only state


def _run(model, n):
    x, y = _data(n)
    history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history
    evaluated = model.evaluate(x, y, batch_size=BATCH, verbose=0)
    predicted = model.predict(x, batch_size=BATCH, verbose=0)
    return history, [np.asarray(w) for w in model.get_weights()], evaluated, np.asarray(predicted)


@pytest.fixture(scope="module")
def reference():
    """One device's Keras, per size (one model, reset between sizes)."""
    model = _model()
    initial = model.get_weights()
    out = {}
    for n in SIZES:
        _reset(model, initial)
        out[n] = _run(model, n)
    return initial, out


@pytest.fixture(scope="module", params=[2, 8], ids=["2-replicas", "8-replicas"])
def distributed(request):
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(request.param)])
    with strategy.scope():
        model = _model()
    return model


@pytest.fixture(scope="module", params=[2, 8], ids=["2-replicas", "8-replicas"])
def distributed_loop(request):
    """The model with steps_per_execution=4: fit's and evaluate's steps in one on-device loop."""
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(request.param)])
    with strategy.scope():
        model = _model(steps_per_execution=4)
    return model


def _check(got, ref, n) -> None:
    history, weights, evaluated, predicted = got
    ref_history, ref_weights, ref_evaluated, ref_predicted = ref
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(history[key], ref_history[key], rtol=TOL, atol=TOL, err_msg=key)
    for w, r in zip(weights, ref_weights):
        np.testing.assert_allclose(w, r, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(evaluated, ref_evaluated, rtol=TOL, atol=TOL)
    assert predicted.shape == (n, 3)
    np.testing.assert_allclose(predicted, ref_predicted, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("n", SIZES)
def test_fit_evaluate_predict_equal_one_device(reference, distributed, n):
    # Intent: every batch, partial ones included, gives one device's numbers (API.md, Deliberate differences).
    initial, ref = reference
    _reset(distributed, initial)
    _check(_run(distributed, n), ref[n], n)


@pytest.mark.parametrize("n", [105, 1025])
def test_steps_per_execution_loop_equals_one_device(reference, distributed_loop, n):
    # Intent: steps_per_execution=4 runs fit's and evaluate's steps as one on-device loop per
    # call (105 rows: one call of 2 batches, the last partial; 1025: calls of 4, 4, 4, 4 and 1
    # batches, the last of one row) with one device's numbers.
    initial, ref = reference
    _reset(distributed_loop, initial)
    _check(_run(distributed_loop, n), ref[n], n)
    x, y = _data(BATCH)
    for kind, function in (("train", sx.keras.train_function), ("test", sx.keras.test_function)):
        ir = function(distributed_loop).ir(*sx.keras.step_arguments(distributed_loop, x, y, kind=kind))
        assert ir.count("jax.while") == 1, kind  # the 4 steps: one loop, the step in it once


def test_model_outside_any_scope_is_untouched(reference):
    # Intent: a model compiled outside every strategax scope runs Keras' own steps.
    from strategax.keras import _keras3
    model = _model()
    assert _keras3.runner_of(model) is None
    initial, ref = reference
    _reset(model, initial)
    history, weights, _, _ = _run(model, 105)
    np.testing.assert_allclose(history["loss"], ref[105][0]["loss"], rtol=0, atol=0)
    with pytest.raises(sx.DistributionValueError, match="not compiled inside a strategax"):
        sx.keras.train_function(model)


def test_unsupported_keras_version_is_refused():
    # Intent: the adapter touches Keras internals only for the versions it names.
    from strategax.keras import _keras3
    _keras3.check_version(keras.__version__)
    with pytest.raises(sx.DistributionRuntimeError, match="supports Keras 3.15") as e:
        _keras3.check_version("3.9.2")
    assert e.value.file == __file__


def test_import_is_lazy_and_other_backends_are_refused():
    # Intent: importing strategax never imports Keras; Keras on another backend inside a scope raises
    # naming the fix (KERAS_BACKEND=jax) and the user's compile line.
    script = textwrap.dedent("""
        import sys
        import strategax as sx
        assert "keras" not in sys.modules, "importing strategax imported keras"
        import keras
        assert keras.backend.backend() == "numpy"
        s = sx.OneDeviceStrategy("CPU:0")
        with s.scope():
            model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
            try:
                model.compile(loss="mse")  # line 11
            except sx.DistributionRuntimeError as e:
                print("RAISED", e.line, "KERAS_BACKEND=jax" in str(e))
    """)
    env = dict(os.environ, KERAS_BACKEND="numpy", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RAISED 11 True" in out.stdout, out.stdout + out.stderr[-2000:]


def test_train_step_is_an_inspectable_strategax_function():
    # Intent: the Keras train step is a strategax function like any other (IR, stats). A partial
    # batch (7 rows on 2 replicas): one all-reduce of the batch's real row count, and one bucket
    # holding exactly the model's gradients and the metrics' increments (their sizes read from
    # the Keras model itself). A full batch (6 rows) runs Keras' own step, with no padded-row
    # mask: the bucket alone, without the metrics' counts (3 rows a replica, a constant the
    # compiler sums). Both give one device's loss on those rows.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    with strategy.scope():
        model = _model()
    f = sx.keras.train_function(model)
    assert isinstance(f, sx.StrategyFunction)
    for rows in (7, 6):
        x, y = _data(rows)
        args = sx.keras.step_arguments(model, x, y)
        gradient_bytes = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_variables)
        counts = [v for v in model.metrics_variables if v.path.endswith("/count")]
        assert len(counts) == 2, [v.path for v in model.metrics_variables]  # the loss's and accuracy's
        metric_bytes = sum(int(np.prod(v.shape)) * 4 for v in model.metrics_variables
                           if rows == 7 or not v.path.endswith("/count"))
        expected_collectives = [4, gradient_bytes + metric_bytes] if rows == 7 else [gradient_bytes + metric_bytes]
        stats = f.stats(*args)
        assert sorted(c.payload_bytes for c in stats.collectives) == expected_collectives, rows
        text = str(f.ir(*args))
        assert "sx.all_reduce" in text
        assert ("sx.mask_rows" in text) is (rows == 7), rows
        logs, state = f(*args)  # the step runs as fit runs it: the loss of one device on these rows
        reference = _model()
        expected = reference.train_on_batch(x, y, return_dict=True)
        np.testing.assert_allclose(float(logs["loss"]), expected["loss"], rtol=TOL)


def test_steps_per_execution_equals_one_device():
    # Intent: steps_per_execution=3 over 5 batches (the last partial: 44 rows) takes every batch
    # once, in order, with one device's numbers (Adam: its state carried from call to call).
    def model(steps):
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        m.compile(optimizer=keras.optimizers.Adam(0.01), metrics=["accuracy"], steps_per_execution=steps,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m
    x, y = _data(300)
    reference = model(1)
    expected = reference.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history
    with sx.MirroredStrategy(["CPU:0", "CPU:1"]).scope():
        distributed = model(3)
    history = distributed.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(history[key], expected[key], rtol=TOL, atol=TOL, err_msg=key)
    for w, r in zip(distributed.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(w, r, rtol=TOL, atol=TOL)
