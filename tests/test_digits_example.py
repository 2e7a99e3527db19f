"""examples/digits.py, shortened: its training matches plain JAX + optax on one device, and a
second run resumes from the checkpoint the first one saved."""
import functools
import importlib.util
import pathlib

import jax
import numpy as np
import optax
import pytest


_path = pathlib.Path(__file__).parents[1] / "examples" / "digits.py"
_spec = importlib.util.spec_from_file_location("digits_example", _path)
digits = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(digits)


@functools.cache  # both tests compare with two epochs: trained once
def reference_training(epochs: int) -> dict:
    """The same training in plain JAX + optax on one device: same data order, same batches,
    same initial parameters, the mean loss over each global batch."""
    (x, y), _ = digits.load_data()
    params = {k: jax.numpy.asarray(v) for k, v in digits.init_params().items()}
    tx = optax.adam(digits.LEARNING_RATE)
    state = tx.init(params)

    @jax.jit
    def step(params, state, x, y):
        grads = jax.grad(lambda p: digits.loss_fn(p, x, y)[0])(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    for _ in range(epochs):
        for bx, by in digits.batches(x, y):
            params, state = step(params, state, bx, by)
    return {k: np.asarray(v) for k, v in params.items()}


@pytest.mark.no_round_trip  # the steps are checked against plain JAX instead (and are large)
def test_digits_trains_like_plain_jax_and_resumes(tmp_path, capsys):
    # Intent: two one-epoch runs (the second resuming from the first's checkpoint) end with
    # the parameters of two epochs of one-device JAX + optax training on the same batches.
    first = digits.main(["--epochs", "1", "--ckpt-dir", str(tmp_path), "--quiet"])
    second = digits.main(["--epochs", "1", "--ckpt-dir", str(tmp_path), "--quiet"])
    out = capsys.readouterr().out
    assert (first["start_epoch"], first["epoch"]) == (0, 1)
    assert (second["start_epoch"], second["epoch"]) == (1, 2)
    assert "resumed from" in out and "collectives in one training step" in out
    expected = reference_training(epochs=2)
    for k, v in expected.items():
        np.testing.assert_allclose(second["params"][k], v, rtol=1e-4, atol=1e-5)
    assert second["accuracy"] > 0.8  # two epochs already separate most digits


@pytest.mark.no_round_trip  # checked against plain JAX instead
def test_digits_trains_to_the_same_accuracy_with_bf16_gradients(tmp_path):
    # Intent: two epochs with the gradients all-reduced in bfloat16 stay within bf16's rounding
    # of plain JAX + optax's float32 training on the same batches: held-out accuracy within two
    # points, each parameter within 2% of the reference (relative L2 norm: Adam's normalised
    # steps amplify a few tiny gradients' rounding, so single entries move more).
    run = digits.main(["--epochs", "2", "--ckpt-dir", str(tmp_path), "--quiet", "--compression", "bf16"])
    expected = reference_training(epochs=2)
    _, (x_test, y_test) = digits.load_data()
    logits = digits.forward({k: jax.numpy.asarray(v) for k, v in expected.items()}, x_test)
    reference_accuracy = float(np.mean(np.argmax(np.asarray(logits), -1) == y_test))
    assert abs(run["accuracy"] - reference_accuracy) <= 0.02, (run["accuracy"], reference_accuracy)
    for k, v in expected.items():
        error = np.linalg.norm(run["params"][k] - v) / np.linalg.norm(v)
        assert 1e-6 < error < 0.02, (k, error)  # rounded (bf16 on the wire), and only that
