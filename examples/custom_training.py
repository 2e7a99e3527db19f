"""TensorFlow's tutorial "Custom training with tf.distribute.Strategy", ported as written.

The tutorial trains a small CNN on Fashion-MNIST with `MirroredStrategy`: a distributed
dataset, a loss averaged with `compute_average_loss` plus a scaled L2 regularisation, Adam,
Keras metrics, a training step and a test step in `tf.function`s, a checkpoint every second
epoch, and at the end a restore into a fresh model evaluated without the strategy. Here the
same program in strategax, line for line; the model (Conv2D-MaxPool-Conv2D-MaxPool-Dense-
Dropout-Dense) is plain JAX, dropout draws a different mask on each replica (the key folded with
the replica id), and the data are random images of Fashion-MNIST's shape (28x28x1, 10 classes;
each class a noisy template, so there is something to learn): no download.

    python examples/custom_training.py                  # 8 simulated CPU devices
    python examples/custom_training.py --inside         # the epoch loop inside one function
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # before jax

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax import lax  # noqa: E402

import strategax as sx  # noqa: E402

BATCH_SIZE_PER_REPLICA = 64
EPOCHS = 4
L2 = 1e-5  # tf.keras.regularizers.L2(1e-5) on every kernel
DROPOUT = 0.25
LEARNING_RATE = 1e-3


# --- the data: Fashion-MNIST's shape, made up ---------------------------------------------
def fake_fashion_mnist(n_train: int = 4096, n_test: int = 1024, seed: int = 0):
    """(train_images, train_labels), (test_images, test_labels): uint8 28x28 images, labels 0-9."""
    rng = np.random.default_rng(seed)
    templates = rng.uniform(0, 255, size=(10, 28, 28))

    def make(n):
        labels = rng.integers(0, 10, size=n).astype(np.int64)
        images = templates[labels] * 0.5 + rng.uniform(0, 127, size=(n, 28, 28))
        return images.astype(np.uint8), labels
    return make(n_train), make(n_test)


# --- the model: tf.keras.Sequential of the tutorial, in plain JAX ---------------------------
def create_model(seed: int = 0) -> dict:
    """Conv2D(32, 3, relu), MaxPooling2D, Conv2D(64, 3, relu), MaxPooling2D, Flatten,
    Dense(64, relu), Dropout, Dense(10): Glorot-uniform kernels and zero biases, as Keras."""
    rng = np.random.default_rng(seed)

    def glorot(shape, fan_in, fan_out):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-limit, limit, size=shape).astype(np.float32)

    return {"conv1/kernel": glorot((3, 3, 1, 32), 9, 9 * 32), "conv1/bias": np.zeros(32, np.float32),
            "conv2/kernel": glorot((3, 3, 32, 64), 9 * 32, 9 * 64), "conv2/bias": np.zeros(64, np.float32),
            "dense1/kernel": glorot((1600, 64), 1600, 64), "dense1/bias": np.zeros(64, np.float32),
            "dense2/kernel": glorot((64, 10), 64, 10), "dense2/bias": np.zeros(10, np.float32)}


def conv(x, kernel, bias):
    y = lax.conv_general_dilated(x, kernel, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(y + bias)


def max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def model(params: dict, images, training: bool = False, key=None):
    """The logits; with `training`, dropout with `key`."""
    x = max_pool(conv(images, params["conv1/kernel"], params["conv1/bias"]))
    x = max_pool(conv(x, params["conv2/kernel"], params["conv2/bias"]))
    x = x.reshape(x.shape[0], -1)
    x = jax.nn.relu(x @ params["dense1/kernel"] + params["dense1/bias"])
    if training:
        keep = jax.random.bernoulli(key, 1.0 - DROPOUT, x.shape)
        x = jnp.where(keep, x / (1.0 - DROPOUT), 0.0)
    return x @ params["dense2/kernel"] + params["dense2/bias"]


def model_losses(params: dict):
    """The kernels' L2 penalties (Keras' `model.losses`)."""
    return [L2 * jnp.sum(jnp.square(v)) for k, v in params.items() if k.endswith("kernel")]


def loss_object(labels, logits):
    """SparseCategoricalCrossentropy(from_logits=True, reduction=NONE)."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


# --- the tutorial ----------------------------------------------------------------------------
def main(argv: list[str] | None = None, *, strategy: sx.Strategy | None = None, data=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--checkpoint-dir", default=None, help="default: a temporary folder")
    parser.add_argument("--inside", action="store_true",
                        help="iterate the dataset inside one strategy.function per epoch")
    parser.add_argument("--no-shuffle", action="store_true", help="keep the data's order")
    args = parser.parse_args(argv)

    (train_images, train_labels), (test_images, test_labels) = data or fake_fashion_mnist()
    train_images = train_images[..., None] / np.float32(255)  # add the channel axis, scale to [0, 1]
    test_images = test_images[..., None] / np.float32(255)

    strategy = strategy or sx.MirroredStrategy()
    print(f"Number of devices: {strategy.num_replicas_in_sync}")

    BUFFER_SIZE = len(train_images)  # noqa: N806 - the tutorial's names
    GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync  # noqa: N806

    train_dataset = sx.data.Dataset.from_tensor_slices((train_images, train_labels))
    if not args.no_shuffle:
        train_dataset = train_dataset.shuffle(BUFFER_SIZE, seed=0)
    train_dataset = train_dataset.batch(GLOBAL_BATCH_SIZE)
    test_dataset = sx.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)
    train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
    test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)

    checkpoint_dir = args.checkpoint_dir or tempfile.mkdtemp(prefix="training_checkpoints_")

    with strategy.scope():
        def compute_loss(labels, predictions, model_losses):
            per_example_loss = loss_object(labels, predictions)
            loss = sx.nn.compute_average_loss(per_example_loss)
            if model_losses:
                loss += sx.nn.scale_regularization_loss(sum(model_losses))
            return loss

    with strategy.scope():
        test_loss = sx.metrics.Mean(name="test_loss")
        train_accuracy = sx.metrics.SparseCategoricalAccuracy(name="train_accuracy")
        test_accuracy = sx.metrics.SparseCategoricalAccuracy(name="test_accuracy")

    with strategy.scope():
        params = {k: sx.Variable(v, name=k) for k, v in create_model().items()}
        optimizer = sx.Optimizer(optax.adam(LEARNING_RATE))
        checkpoint = sx.Checkpoint(optimizer=optimizer, model=params)
        manager = sx.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=3)

    def train_step(inputs, key):
        images, labels = inputs
        # dropout: a different mask on every replica, the same on a rerun
        key = jax.random.fold_in(key, sx.get_replica_context().replica_id_in_sync_group)

        def loss_fn(values):
            predictions = model(values, images, training=True, key=key)
            return compute_loss(labels, predictions, model_losses(values)), predictions

        values = {k: v.read_value() for k, v in params.items()}
        (loss, predictions), gradients = jax.value_and_grad(loss_fn, has_aux=True)(values)
        optimizer.apply_gradients([(gradients[k], params[k]) for k in params])
        train_accuracy.update_state(labels, predictions)
        return loss

    def test_step(inputs):
        images, labels = inputs
        predictions = model({k: v.read_value() for k, v in params.items()}, images, training=False)
        t_loss = loss_object(labels, predictions)
        test_loss.update_state(t_loss)
        test_accuracy.update_state(labels, predictions)

    @strategy.function
    def distributed_train_step(dataset_inputs, key):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs, key))
        return strategy.reduce(sx.ReduceOp.SUM, per_replica_losses, axis=None)

    @strategy.function
    def distributed_test_step(dataset_inputs):
        return strategy.run(test_step, args=(dataset_inputs,))

    @strategy.function
    def distributed_train_epoch(dataset, keys):  # the iterate-inside-a-function variant
        total_loss = 0.0
        num_batches = 0
        for x in dataset:  # one on-device loop over the epoch
            per_replica_losses = strategy.run(train_step, args=(x, keys[num_batches]))
            total_loss += strategy.reduce(sx.ReduceOp.SUM, per_replica_losses, axis=None)
            num_batches += 1
        return total_loss / num_batches

    base_key = jax.random.key(42)
    history = {"loss": [], "accuracy": [], "test_loss": [], "test_accuracy": []}
    step = 0
    for epoch in range(args.epochs):
        # TRAIN LOOP
        if args.inside:
            num_batches = len(train_dataset)
            keys = jax.random.split(jax.random.fold_in(base_key, epoch), num_batches)
            train_loss = float(distributed_train_epoch(train_dist_dataset, keys))
        else:
            total_loss = 0.0
            num_batches = 0
            for x in train_dist_dataset:
                key = jax.random.fold_in(base_key, step)
                total_loss += float(distributed_train_step(x, key))
                num_batches += 1
                step += 1
            train_loss = total_loss / num_batches

        # TEST LOOP
        for x in test_dist_dataset:
            distributed_test_step(x)

        if epoch % 2 == 0:
            manager.save()

        template = "Epoch {}, Loss: {:.4f}, Accuracy: {:.2f}, Test Loss: {:.4f}, Test Accuracy: {:.2f}"
        print(template.format(epoch + 1, train_loss, float(train_accuracy.result()) * 100,
                              float(test_loss.result()), float(test_accuracy.result()) * 100))
        history["loss"].append(train_loss)
        history["accuracy"].append(float(train_accuracy.result()))
        history["test_loss"].append(float(test_loss.result()))
        history["test_accuracy"].append(float(test_accuracy.result()))
        test_loss.reset_state()
        train_accuracy.reset_state()
        test_accuracy.reset_state()

    # Restore the latest checkpoint into a new model and evaluate it without a strategy.
    eval_accuracy = sx.metrics.SparseCategoricalAccuracy(name="eval_accuracy")
    new_model = {k: sx.Variable(np.zeros_like(v), name=k) for k, v in create_model().items()}
    new_optimizer = sx.Optimizer(optax.adam(LEARNING_RATE))
    new_checkpoint = sx.Checkpoint(optimizer=new_optimizer, model=new_model)
    new_checkpoint.restore(sx.latest_checkpoint(checkpoint_dir))

    @jax.jit
    def eval_logits(values, images):
        return model(values, images, training=False)

    values = {k: jnp.asarray(v.read_value()) for k, v in new_model.items()}
    for images, labels in test_dataset:
        eval_accuracy.update_state(labels, eval_logits(values, images))
    history["restored_accuracy"] = float(eval_accuracy.result())
    print(f"Accuracy after restoring the saved model without strategy: {history['restored_accuracy'] * 100:.2f}")
    if args.checkpoint_dir is None:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return history


if __name__ == "__main__":
    main()
