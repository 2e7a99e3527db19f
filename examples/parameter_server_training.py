"""TensorFlow's tutorial "Parameter server training with ParameterServerStrategy", custom
training loop section, ported: the model (an embedding of 3 features averaged, a dense sigmoid
layer with an L2 penalty) lives on the parameter servers, the embedding sharded by a
MinSizePartitioner; a per-worker dataset; `coordinator.schedule(step_fn, ...)` in a loop,
`join()` at each epoch's end, accuracy from a metric, a final loss from `fetch()`.

The data are the tutorial's: three of seven hero names; the label is "yes" when "avenger" is
among them. The tutorial's StringLookup layers are plain dictionaries here.

    python examples/parameter_server_training.py          # a local Ray cluster: 2 workers, 1 ps
"""
from __future__ import annotations

import argparse
import random

import jax
import jax.numpy as jnp
import numpy as np
import optax

import strategax as sx

FEATURE_VOCAB = ["avenger", "ironman", "batman", "hulk", "spiderman", "kingkong", "wonder_woman"]
LABEL_VOCAB = ["yes", "no"]
EMBEDDING_DIM = 16384  # the tutorial's output_dim
L2 = 1e-4
LEARNING_RATE = 0.1


# --- the data and the lookup layers ---------------------------------------------------------
def feature_and_label_gen(num_examples: int = 200, seed: int = 0) -> dict:
    rng = random.Random(seed)
    examples = {"features": [], "label": []}
    for _ in range(num_examples):
        features = rng.sample(FEATURE_VOCAB, 3)
        examples["features"].append(features)
        examples["label"].append(["yes"] if "avenger" in features else ["no"])
    return examples


def feature_preprocess(features) -> np.ndarray:
    """StringLookup(vocabulary=FEATURE_VOCAB, mask_token=None): index 0 is out of vocabulary."""
    return np.asarray([[1 + FEATURE_VOCAB.index(f) for f in row] for row in features], np.int32)


def label_preprocess(labels) -> np.ndarray:
    """StringLookup(vocabulary=LABEL_VOCAB, num_oov_indices=0, mask_token=None)."""
    return np.asarray([[LABEL_VOCAB.index(x) for x in row] for row in labels], np.int32)


def encoded(examples: dict) -> tuple[np.ndarray, np.ndarray]:
    return feature_preprocess(examples["features"]), label_preprocess(examples["label"])


# --- the model ----------------------------------------------------------------------------
def create_model(embedding_dim: int, seed: int = 0) -> dict:
    """Embedding(8, embedding_dim) (Keras' uniform(-0.05, 0.05)), Dense(1) (Glorot uniform)."""
    rng = np.random.default_rng(seed)
    limit = np.sqrt(6.0 / (embedding_dim + 1))
    return {"embedding": rng.uniform(-0.05, 0.05, (len(FEATURE_VOCAB) + 1, embedding_dim)).astype(np.float32),
            "kernel": rng.uniform(-limit, limit, (embedding_dim, 1)).astype(np.float32),
            "bias": np.zeros(1, np.float32)}


def logits(params: dict, features):
    """The dense layer's input to its sigmoid: the model's output is `jax.nn.sigmoid` of it."""
    emb_output = jnp.mean(jnp.asarray(params["embedding"])[features], axis=1)
    return emb_output @ params["kernel"] + params["bias"]


def predict(params: dict, features):
    return jax.nn.sigmoid(logits(params, features))


def binary_crossentropy(labels, z):
    """tf.keras.losses.BinaryCrossentropy(reduction=NONE) of the sigmoid output: per example,
    from the logits `z` (Keras takes them from the sigmoid, so a saturated output still has a
    gradient)."""
    return jnp.mean(optax.sigmoid_binary_cross_entropy(z, labels.astype(z.dtype)), axis=-1)


# --- the tutorial's custom training loop ----------------------------------------------------
def train(strategy, coordinator=None, num_epochs: int = 4, steps_per_epoch: int = 5,
          embedding_dim: int = EMBEDDING_DIM, examples: dict | None = None, log=print) -> dict:
    """The tutorial's loop on a ParameterServerStrategy (with its coordinator), or, without a
    coordinator, the same steps called directly (e.g. on a MirroredStrategy). Returns the
    accuracies per epoch, the final loss, the optimizer's step count and the trained values."""
    examples = examples or feature_and_label_gen()
    features, labels = encoded(examples)

    def dataset_fn(_):
        raw_dataset = sx.data.Dataset.from_tensor_slices((features, labels))
        return raw_dataset.shuffle(200, seed=0).batch(32).repeat()

    with strategy.scope():
        model = {k: sx.Variable(v, name=k) for k, v in create_model(embedding_dim).items()}
        optimizer = sx.Optimizer(optax.rmsprop(LEARNING_RATE, decay=0.9, eps=1e-7, eps_in_sqrt=False))
        accuracy = sx.metrics.Accuracy()

    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    if coordinator is not None:
        per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
        per_worker_iterator = iter(per_worker_dataset)
    else:
        per_worker_iterator = iter(per_worker_dataset_fn())

    @strategy.function
    def step_fn(iterator):

        def replica_fn(batch_data, labels):
            def loss_fn(values):
                z = logits(values, batch_data)
                pred = jax.nn.sigmoid(z)
                per_example_loss = binary_crossentropy(labels, z)
                loss = sx.nn.compute_average_loss(per_example_loss)
                loss += sx.nn.scale_regularization_loss(L2 * jnp.sum(jnp.square(values["kernel"])))
                return loss, pred

            values = {k: v.read_value() for k, v in model.items()}
            (loss, pred), gradients = jax.value_and_grad(loss_fn, has_aux=True)(values)
            optimizer.apply_gradients([(gradients[k], model[k]) for k in model])
            actual_pred = (pred > 0.5).astype(jnp.int32)
            accuracy.update_state(labels, actual_pred)
            return loss

        batch_data, labels = next(iterator)
        losses = strategy.run(replica_fn, args=(batch_data, labels))
        return strategy.reduce(sx.ReduceOp.SUM, losses, axis=None)

    def schedule(*args):
        return coordinator.schedule(step_fn, args=args) if coordinator else step_fn(*args)

    accuracies = []
    for i in range(num_epochs):
        accuracy.reset_state()
        for _ in range(steps_per_epoch):
            schedule(per_worker_iterator)
        if coordinator is not None:
            coordinator.join()  # wait at epoch boundaries
        accuracies.append(float(accuracy.result()))
        log("Finished epoch %d, accuracy is %f." % (i, accuracies[-1]))

    loss = schedule(per_worker_iterator)
    final_loss = float(loss.fetch() if coordinator is not None else loss)
    log("Final loss is %f" % final_loss)
    return {"accuracy": accuracies, "final_loss": final_loss, "iterations": int(optimizer.iterations.numpy()),
            "params": {k: np.asarray(v.numpy()) for k, v in model.items()}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=1)
    parser.add_argument("--embedding-dim", type=int, default=EMBEDDING_DIM)
    args = parser.parse_args(argv)
    cluster_resolver = sx.cluster_resolver.RayClusterResolver(num_workers=args.workers, num_ps=args.ps)
    variable_partitioner = sx.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=(256 << 10), max_shards=args.ps)
    strategy = sx.experimental.ParameterServerStrategy(cluster_resolver, variable_partitioner=variable_partitioner)
    coordinator = sx.experimental.coordinator.ClusterCoordinator(strategy)
    return train(strategy, coordinator, embedding_dim=args.embedding_dim)


if __name__ == "__main__":
    main()
