"""TensorFlow's tutorial "Custom training loop with Keras and MultiWorkerMirroredStrategy"
(its `main.py` and `mnist.py`), ported as written: one worker of a job described by TF_CONFIG.

Each worker reads its shard of MNIST-shaped data through `distribute_datasets_from_function`
(`dataset.shard(num_input_pipelines, input_pipeline_id)`), takes the next batch inside the
compiled step (`next(iterator)`), trains a CNN (flax here, Keras there) with RMSprop at Keras'
defaults, and saves a checkpoint after every epoch in the tutorial's pattern: the chief into
the checkpoint folder, every other worker into a temporary folder it deletes right after. A
restarted job restores the chief's latest checkpoint and resumes after the last saved epoch.
The data are random images of MNIST's shape (each class a noisy template): no download.

    # one terminal per worker (TF_CONFIG as in the tutorial, task index 0 and 1)
    TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:23456"]},
                "task": {"type": "worker", "index": 0}}' python examples/multi_worker_custom_training.py
    # one command: 2 workers on Ray (a local Ray cluster; `--ray-address auto` joins `ray start`'s)
    python examples/multi_worker_custom_training.py --ray 2
    # one machine, all its devices
    python examples/multi_worker_custom_training.py
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile

import strategax as sx  # the strategy joins the cluster before any other JAX call

# --- mnist.py -------------------------------------------------------------------------------


def load_data(size: int = 28, n: int = 60000):
    """MNIST's shape made up (tf.keras.datasets.mnist.load_data's training part): `n` uint8
    images of size x size and their labels 0-9."""
    import numpy as np

    rng = np.random.default_rng(0)
    templates = rng.uniform(0, 255, size=(10, size, size))
    y_train = rng.integers(0, 10, size=n).astype(np.uint8)
    x_train = (templates[y_train] * 0.5 + rng.uniform(0, 127, size=(n, size, size))).astype(np.uint8)
    return x_train, y_train


def mnist_dataset(size: int = 28, n: int = 60000, shuffle: bool = True):
    import numpy as np

    x_train, y_train = load_data(size, n)
    # The `x` arrays are in uint8 and have values in the range [0, 255].
    # You need to convert them to float32 with values in the range [0, 1]
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = sx.data.Dataset.from_tensor_slices((x_train, y_train))
    return train_dataset.shuffle(60000) if shuffle else train_dataset


def dataset_fn(global_batch_size, input_context, **data):
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    dataset = mnist_dataset(**data)
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    dataset = dataset.batch(batch_size)
    return dataset


def build_cnn_model(size: int = 28, filters: int = 32, units: int = 128):
    """Keras' Sequential([Input((28, 28)), Reshape((28, 28, 1)), Conv2D(32, 3, relu), Flatten,
    Dense(128, relu), Dense(10)]) in flax, with Keras' initializers (Glorot-uniform kernels,
    zero biases)."""
    import flax.linen as nn

    glorot = nn.initializers.glorot_uniform()

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = x.reshape((x.shape[0], size, size, 1))
            x = nn.relu(nn.Conv(filters, (3, 3), padding="VALID", kernel_init=glorot)(x))
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(units, kernel_init=glorot)(x))
            return nn.Dense(10, kernel_init=glorot)(x)
    return CNN()


# --- main.py --------------------------------------------------------------------------------
def _is_chief(task_type, task_id, cluster_spec):
    return (task_type is None
            or task_type == 'chief'
            or (task_type == 'worker'
                and task_id == 0
                and 'chief' not in cluster_spec.as_dict()))


def _get_temp_dir(dirpath, task_id):
    base_dirpath = 'workertemp_' + str(task_id)
    temp_dir = os.path.join(dirpath, base_dirpath)
    os.makedirs(temp_dir, exist_ok=True)  # tf.io.gfile.makedirs
    return temp_dir


def write_filepath(filepath, task_type, task_id, cluster_spec):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id, cluster_spec):
        dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=70)
    parser.add_argument("--per-worker-batch", type=int, default=64)
    parser.add_argument("--checkpoint-dir", default=os.path.join(tempfile.gettempdir(), "ckpt"))
    parser.add_argument("--size", type=int, default=28, help="image side (MNIST: 28)")
    parser.add_argument("--examples", type=int, default=60000)
    parser.add_argument("--filters", type=int, default=32)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--no-shuffle", action="store_true", help="keep the data's order")
    parser.add_argument("--timeout", type=float, default=None, help="CommunicationOptions.timeout_seconds")
    args = parser.parse_args(argv)

    # Define Strategy (first: its cluster, from TF_CONFIG, Ray Train or this machine alone, gives
    # the number of workers; the tutorial reads it from TF_CONFIG)
    strategy = sx.MultiWorkerMirroredStrategy(
        communication_options=sx.CommunicationOptions(timeout_seconds=args.timeout))

    per_worker_batch_size = args.per_worker_batch
    num_workers = strategy.cluster_resolver.cluster_spec().num_tasks('worker') or 1
    global_batch_size = per_worker_batch_size * num_workers

    num_epochs = args.epochs
    num_steps_per_epoch = args.steps_per_epoch
    checkpoint_dir = args.checkpoint_dir

    import jax  # after the strategy: it joins the cluster before JAX starts
    import jax.numpy as jnp
    import numpy as np
    import optax

    data = dict(size=args.size, n=args.examples, shuffle=not args.no_shuffle)
    model = build_cnn_model(args.size, args.filters, args.units)
    with strategy.scope():
        # Model building/compiling need to be within `strategy.scope()`.
        # jitted: the same values as flax's eager init, one compilation instead of one per op
        params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, args.size, args.size)))
        multi_worker_model = jax.tree_util.tree_map(sx.Variable, params)

        multi_worker_dataset = strategy.distribute_datasets_from_function(
            lambda input_context: dataset_fn(global_batch_size, input_context, **data))
        # Keras' RMSprop: rho 0.9, epsilon 1e-7 (inside the square root, as optax's)
        optimizer = sx.Optimizer(optax.rmsprop(learning_rate=0.001, decay=0.9, eps=1e-7))
        train_accuracy = sx.metrics.SparseCategoricalAccuracy(name='train_accuracy')

    @strategy.function
    def train_step(iterator):
        """Training step function."""

        def step_fn(inputs):
            """Per-Replica step function."""
            x, y = inputs

            def loss_fn(values):
                predictions = model.apply(values, x)
                per_batch_loss = optax.softmax_cross_entropy_with_integer_labels(predictions, y)
                loss = sx.nn.compute_average_loss(per_batch_loss, global_batch_size=global_batch_size)
                return loss, predictions

            values = jax.tree_util.tree_map(lambda v: v.read_value(), multi_worker_model)
            (loss, predictions), grads = jax.value_and_grad(loss_fn, has_aux=True)(values)
            optimizer.apply_gradients(zip(jax.tree_util.tree_leaves(grads),
                                          jax.tree_util.tree_leaves(multi_worker_model)))
            train_accuracy.update_state(y, predictions)
            return loss

        per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(sx.ReduceOp.SUM, per_replica_losses, axis=None)

    epoch = sx.Variable(np.int64(0), name='epoch')
    step_in_epoch = sx.Variable(np.int64(0), name='step_in_epoch')

    task_type, task_id, cluster_spec = (strategy.cluster_resolver.task_type,
                                        strategy.cluster_resolver.task_id,
                                        strategy.cluster_resolver.cluster_spec())

    checkpoint = sx.Checkpoint(model=multi_worker_model, epoch=epoch, step_in_epoch=step_in_epoch)

    write_checkpoint_dir = write_filepath(checkpoint_dir, task_type, task_id, cluster_spec)
    checkpoint_manager = sx.CheckpointManager(checkpoint, directory=write_checkpoint_dir, max_to_keep=1)

    # Restoring the checkpoint
    latest_checkpoint = sx.latest_checkpoint(checkpoint_dir)
    if latest_checkpoint:
        checkpoint.restore(latest_checkpoint)

    # Resume our CTL training
    history = {"restored": latest_checkpoint, "epochs": [], "loss": [], "accuracy": []}
    while epoch.numpy() < num_epochs:
        iterator = iter(multi_worker_dataset)
        total_loss = 0.0
        num_batches = 0

        while step_in_epoch.numpy() < num_steps_per_epoch:
            total_loss += train_step(iterator)
            num_batches += 1
            step_in_epoch.assign_add(1)

        if num_batches:  # the tutorial divides by zero when it resumes after a saved epoch
            train_loss = total_loss / num_batches
            print('Epoch: %d, accuracy: %f, train_loss: %f.'
                  % (epoch.numpy(), train_accuracy.result(), train_loss), flush=True)
            history["epochs"].append(int(epoch.numpy()))
            history["loss"].append(float(train_loss))
            history["accuracy"].append(float(train_accuracy.result()))

        train_accuracy.reset_state()

        checkpoint_manager.save()
        if not _is_chief(task_type, task_id, cluster_spec):
            shutil.rmtree(write_checkpoint_dir)  # tf.io.gfile.rmtree

        epoch.assign_add(1)
        step_in_epoch.assign(0)

    history["params"] = jax.tree_util.tree_map(lambda v: np.asarray(v.numpy()).tolist(), multi_worker_model)
    return history


# --- on a Ray cluster -----------------------------------------------------------------------
def train_loop_per_worker(config: dict) -> None:
    """What each Ray Train worker runs: the same `main`, its cluster from Ray Train."""
    history = main(config["argv"])
    if config.get("out"):  # one JSON file of the history per worker
        import ray.train

        rank = ray.train.get_context().get_world_rank()
        with open(os.path.join(config["out"], f"worker{rank}.json"), "w") as f:
            json.dump(history, f)


def run_on_ray(argv: list[str], num_workers: int, address: str | None = None, max_failures: int = 0):
    """Start `num_workers` workers of this script on the Ray cluster at `address` ("auto": the
    one `ray start` made; None: a new local one) with Ray Train, restarted up to `max_failures`
    times from the last checkpoint when a worker is lost."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.jax import JaxTrainer

    ray.init(address=address)
    trainer = JaxTrainer(train_loop_per_worker, train_loop_config={"argv": argv},
                         scaling_config=ScalingConfig(num_workers=num_workers),
                         run_config=RunConfig(failure_config=FailureConfig(max_failures=max_failures)))
    return trainer.fit()


if __name__ == "__main__":
    import sys

    argv = sys.argv[1:]
    if "--ray" in argv:  # python multi_worker_custom_training.py --ray 2 [--ray-address auto] ...
        at = argv.index("--ray")
        workers, argv = int(argv[at + 1]), argv[:at] + argv[at + 2:]
        address = None
        if "--ray-address" in argv:
            at = argv.index("--ray-address")
            address, argv = argv[at + 1], argv[:at] + argv[at + 2:]
        run_on_ray(argv, workers, address, max_failures=3)
    else:
        print(json.dumps(main(argv)), flush=True)
