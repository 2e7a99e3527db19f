"""examples/custom_training.py (TensorFlow's custom-training tutorial ported as written) trains
to the losses and accuracies of the same model trained in plain JAX on one device: the same
data order, the same per-replica dropout keys (the step key folded with the replica id), the
tutorial's loss (compute_average_loss's TensorFlow divisor plus the scaled L2 penalty, summed
over replicas), Adam; its checkpoint restores into a fresh model outside the strategy."""
import importlib.util
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

import strategax as sx

PATH = Path(__file__).resolve().parent.parent / "examples" / "custom_training.py"
spec = importlib.util.spec_from_file_location("custom_training", PATH)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

N = 2
GLOBAL = example.BATCH_SIZE_PER_REPLICA * N


def small_data():
    return example.fake_fashion_mnist(n_train=GLOBAL * 2 + 40, n_test=GLOBAL + 8, seed=1)


def batches(images, labels):
    return [(images[i:i + GLOBAL], labels[i:i + GLOBAL]) for i in range(0, len(images), GLOBAL)]


def replica_chunks(x, y):
    """TensorFlow's split of a global batch: ceil(B / N) rows each, the last replicas fewer."""
    per = math.ceil(len(x) / N)
    return [(x[r * per:(r + 1) * per], y[r * per:(r + 1) * per]) for r in range(N)]


OPT = optax.adam(example.LEARNING_RATE)


@jax.jit  # one program per batch shape, shared by the tests (eagerly every op compiles: seconds)
def plain_step(params, state, chunks, key):
    """One step of the tutorial's training on one device, `chunks` the replicas' parts of the batch."""
    def f(p):
        loss, logits = 0.0, []
        for r, (cx, cy) in enumerate(chunks):
            out = example.model(p, cx, training=True, key=jax.random.fold_in(key, r))
            loss += jnp.sum(example.loss_object(cy, out)) / (len(cx) * N)
            loss += sum(example.model_losses(p)) / N
            logits.append(out)
        return loss, jnp.concatenate(logits)

    (loss, logits), grads = jax.value_and_grad(f, has_aux=True)(params)
    updates, state = OPT.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss, logits


evaluate = jax.jit(example.model)


def plain_jax(data, epochs, key_of):
    """The tutorial's training on one device; key_of(epoch, step, num_batches) is the step's key."""
    (train_x, train_y), (test_x, test_y) = data
    train_x, test_x = train_x[..., None] / np.float32(255), test_x[..., None] / np.float32(255)
    params = {k: jnp.asarray(v) for k, v in example.create_model().items()}
    state = OPT.init(params)

    history = {"loss": [], "accuracy": [], "test_loss": [], "test_accuracy": []}
    train = batches(train_x, train_y)
    for epoch in range(epochs):
        losses, correct, seen = [], 0.0, 0
        for step, (x, y) in enumerate(train):
            key = key_of(epoch, epoch * len(train) + step, len(train))
            params, state, loss, logits = plain_step(params, state, replica_chunks(x, y), key)
            losses.append(float(loss))
            correct += float(jnp.sum(jnp.argmax(logits, -1) == y))
            seen += len(y)
        logits = evaluate(params, test_x)
        history["loss"].append(float(np.mean(losses)))
        history["accuracy"].append(correct / seen)
        history["test_loss"].append(float(jnp.mean(example.loss_object(test_y, logits))))
        history["test_accuracy"].append(float(jnp.mean(jnp.argmax(logits, -1) == test_y)))
    return history


def step_key(epoch, step, num_batches):
    return jax.random.fold_in(jax.random.key(42), step)


def epoch_key(epoch, step, num_batches):
    return jax.random.split(jax.random.fold_in(jax.random.key(42), epoch), num_batches)[step % num_batches]


def assert_same_history(got, want):
    for name in ("loss", "accuracy", "test_loss", "test_accuracy"):
        np.testing.assert_allclose(got[name], want[name], rtol=2e-4, atol=1e-5, err_msg=name)


def test_tutorial_trains_to_plain_jax_losses(tmp_path, capsys):
    # Intent: two epochs of the ported tutorial on 2 replicas (one partial batch per epoch)
    # match plain JAX on one device, loss for loss; the checkpoint of epoch 1, restored into a
    # fresh model without the strategy, has epoch 1's test accuracy.
    data = small_data()
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])
    got = example.main(["--epochs", "2", "--no-shuffle", "--checkpoint-dir", str(tmp_path)],
                       strategy=strategy, data=data)
    want = plain_jax(data, 2, step_key)
    assert_same_history(got, want)
    assert got["loss"][1] < got["loss"][0]
    np.testing.assert_allclose(got["restored_accuracy"], want["test_accuracy"][0], rtol=1e-6)
    assert "Epoch 2, Loss:" in capsys.readouterr().out


def test_iterate_inside_a_function_variant_matches_plain_jax(tmp_path):
    # Intent: the tutorial's "iterate inside a tf.function" variant (one sx.range loop per
    # epoch, next(iterator) inside) gives plain JAX's losses too.
    data = small_data()
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])
    got = example.main(["--epochs", "1", "--no-shuffle", "--inside", "--checkpoint-dir", str(tmp_path)],
                       strategy=strategy, data=data)
    assert_same_history(got, plain_jax(data, 1, epoch_key))
