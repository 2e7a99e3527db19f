"""A digit classifier trained data-parallel with strategax on 8 simulated CPU devices.

The data is scikit-learn's bundled 8x8 digits (1797 images, shipped inside the package: no
download). Each run trains `--epochs` more epochs, saves a checkpoint after every epoch (an
`sx.CheckpointManager` keeping the last three, written in the background while the next epoch
trains) and, when re-run, resumes from the latest one. At the end it prints the held-out
accuracy.

    pip install ".[examples]"
    python examples/digits.py                 # 15 epochs, then held-out accuracy
    python examples/digits.py                 # resumes: 15 more epochs
    python examples/digits.py --fresh         # forget the checkpoints and start over
    python examples/digits.py --compression bf16   # gradients all-reduced in bfloat16
    python examples/digits.py --epochs 0 --report digits.html   # the training program's report
"""
from __future__ import annotations

import argparse
import os
import shutil

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # before jax

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import strategax as sx  # noqa: E402

GLOBAL_BATCH = 128  # 1437 training images: 11 full batches and a partial one of 29
HIDDEN = 128
STEPS_PER_CALL = 4  # train_steps: this many steps in one program (one on-device loop)
LEARNING_RATE = 3e-3
DEFAULT_CKPT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits_checkpoints")


def load_data(seed: int = 0):
    """The digits scaled to [0, 1], split 80/20 into training and held-out sets."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_train = int(0.8 * len(x))
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def batches(x: np.ndarray, y: np.ndarray, size: int = GLOBAL_BATCH) -> list:
    """Global batches in order; the last one is partial."""
    return [(x[i:i + size], y[i:i + size]) for i in range(0, len(x), size)]


def init_params(seed: int = 0) -> dict:
    """A 64-HIDDEN-10 MLP, Glorot-uniform weights and zero biases (NumPy, one device)."""
    rng = np.random.default_rng(seed)

    def glorot(n_in, n_out):
        limit = np.sqrt(6.0 / (n_in + n_out))
        return rng.uniform(-limit, limit, size=(n_in, n_out)).astype(np.float32)

    return {"w1": glorot(64, HIDDEN), "b1": np.zeros(HIDDEN, np.float32),
            "w2": glorot(HIDDEN, 10), "b2": np.zeros(10, np.float32)}


def forward(params: dict, x):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def loss_fn(params: dict, x, y):
    """Cross-entropy summed over this replica's real examples (a partial batch is padded, and
    `sx.nn.compute_average_loss` skips the padding), divided by the global batch size: the
    optimizer sums the replicas' gradients, so the total is the mean over the global batch."""
    logits = forward(params, x)
    per_example = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    return sx.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH), per_example


def make_training(strategy: sx.Strategy):
    """Variables, optimizer, checkpoint, the compiled train and evaluation steps, and
    `train_steps`: STEPS_PER_CALL training steps in one program, each taking its batch from an
    iterator of the distributed dataset inside one on-device loop (the report shows it)."""
    with strategy.scope():
        params = {k: sx.Variable(v, name=k) for k, v in init_params().items()}
        optimizer = sx.Optimizer(optax.adam(LEARNING_RATE))
        epoch = sx.Variable(0, trainable=False, name="epoch")
    checkpoint = sx.Checkpoint(params=params, optimizer=optimizer, epoch=epoch)

    def replica_step(batch):
        x, y = batch
        values = {k: v.read_value() for k, v in params.items()}
        (_, per_example), grads = jax.value_and_grad(loss_fn, has_aux=True)(values, x, y)
        optimizer.apply_gradients([(grads[k], params[k]) for k in params])
        return per_example

    @strategy.function
    def train_step(batch):
        per_example = strategy.run(replica_step, args=(batch,))
        return strategy.reduce(sx.ReduceOp.MEAN, per_example, axis=0)  # true count, partial too

    @strategy.function
    def train_steps(iterator):
        for _ in sx.range(STEPS_PER_CALL):
            per_example = strategy.run(replica_step, args=(next(iterator),))
            loss = strategy.reduce(sx.ReduceOp.MEAN, per_example, axis=0)
        return loss  # the last step's

    @strategy.function
    def eval_step(batch):
        def replica_fn(batch):
            x, y = batch
            logits = forward({k: v.read_value() for k, v in params.items()}, x)
            return (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)

        correct = strategy.run(replica_fn, args=(batch,))
        return strategy.reduce(sx.ReduceOp.SUM, correct, axis=0)

    return params, optimizer, epoch, checkpoint, train_step, eval_step, train_steps


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15, help="epochs to train in this run")
    parser.add_argument("--ckpt-dir", default=DEFAULT_CKPT_DIR, help="where checkpoints go")
    parser.add_argument("--fresh", action="store_true", help="delete old checkpoints first")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--compression", choices=["bf16", "f16"], help="send the gradients in this type")
    parser.add_argument("--report", metavar="PATH", help="write the HTML report of train_steps to PATH")
    args = parser.parse_args(argv)
    from tqdm import tqdm

    if args.fresh:
        shutil.rmtree(args.ckpt_dir, ignore_errors=True)
    strategy = sx.MirroredStrategy(communication_options=sx.CommunicationOptions(compression=args.compression))
    print(f"strategy: {strategy.num_replicas_in_sync} replicas on {jax.devices()[0].platform}")
    (x_train, y_train), (x_test, y_test) = load_data()
    print(f"data: {len(x_train)} training and {len(x_test)} held-out 8x8 digits, "
          f"global batch {GLOBAL_BATCH} (last batch {len(x_train) % GLOBAL_BATCH})")
    params, optimizer, epoch, checkpoint, train_step, eval_step, train_steps = make_training(strategy)

    manager = sx.CheckpointManager(checkpoint, args.ckpt_dir, max_to_keep=3, async_save=True)
    latest = manager.restore_or_initialize()
    if latest:
        print(f"resumed from {latest} (epoch {int(epoch.numpy())})")
    start = int(epoch.numpy())
    train_batches = batches(x_train, y_train)
    train_data = strategy.experimental_distribute_dataset(train_batches)
    test_data = strategy.experimental_distribute_dataset(batches(x_test, y_test))
    if args.report:  # compiles train_steps; takes no batch from the iterator
        print(f"report of train_steps written to {train_steps.report(iter(train_data), path=args.report)}")

    losses = []
    for e in range(start, start + args.epochs):
        bar = tqdm(zip(train_data, train_batches), total=len(train_batches), desc=f"epoch {e + 1}",
                   unit="batch", disable=args.quiet)
        total, count = 0.0, 0
        for batch, (_, labels) in bar:
            loss = float(train_step(batch))  # mean over the batch's real examples
            total, count = total + loss * len(labels), count + len(labels)
            bar.set_postfix(loss=f"{total / count:.4f}")
        losses.append(total / count)
        epoch.assign(e + 1)
        manager.save()  # returns once the values are off the devices; written while we go on
        if e == start:
            print(f"collectives in one training step:\n{train_step.stats(batch)}")
    manager.sync()
    correct = sum(float(eval_step(batch)) for batch in test_data)
    accuracy = correct / len(x_test)
    print(f"held-out accuracy after {int(epoch.numpy())} epochs: {accuracy:.2%}")
    return {"start_epoch": start, "epoch": int(epoch.numpy()), "losses": losses,
            "accuracy": accuracy, "params": {k: np.asarray(v.numpy()) for k, v in params.items()}}


if __name__ == "__main__":
    main()
