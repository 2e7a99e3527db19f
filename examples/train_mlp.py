"""Data-parallel training of a small MLP on 8 simulated CPU devices with strategax.

Prints the loss falling, the IR of the compiled step, and the collectives strategax put in it.
Run: python examples/train_mlp.py
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import strategax as sx  # noqa: E402

GLOBAL_BATCH, STEPS, LEARNING_RATE = 1024, 40, 0.05


def make_data(n: int, seed: int = 0):
    """A learnable 10-class problem: labels from a random teacher network."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 256)).astype(np.float32)
    teacher = rng.normal(size=(256, 10)).astype(np.float32)
    y = np.argmax(x @ teacher, axis=1).astype(np.int32)
    return x, y


def init_params(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (256, 512)) * 0.05, "b1": jnp.zeros(512),
            "w2": jax.random.normal(k2, (512, 10)) * 0.05, "b2": jnp.zeros(10)}


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def main() -> None:
    strategy = sx.MirroredStrategy()
    print(f"strategy: {strategy} ({strategy.num_replicas_in_sync} replicas)")
    tx = optax.sgd(LEARNING_RATE, momentum=0.9)

    @strategy.function
    def train_step(params, opt_state, batch):
        def replica_step(params, opt_state, batch):
            x, y = batch
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            grads = sx.get_replica_context().all_reduce(sx.ReduceOp.MEAN, grads)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        params, opt_state, loss = strategy.run(replica_step, args=(params, opt_state, batch))
        return params, opt_state, strategy.reduce(sx.ReduceOp.MEAN, loss)

    x, y = make_data(GLOBAL_BATCH * 8)
    batches = [(x[i:i + GLOBAL_BATCH], y[i:i + GLOBAL_BATCH]) for i in range(0, len(x), GLOBAL_BATCH)]
    dataset = strategy.experimental_distribute_dataset(batches)
    params = init_params(jax.random.key(0))
    opt_state = tx.init(params)

    step = 0
    while step < STEPS:
        for batch in dataset:
            params, opt_state, loss = train_step(params, opt_state, batch)
            if step % 5 == 0 or step == STEPS - 1:
                print(f"step {step:3d}  loss {float(loss):.4f}")
            step += 1
            if step == STEPS:
                break

    print("\n== IR of the training step (after passes) ==")
    print(train_step.ir(params, opt_state, batch))
    print("== collectives in the step ==")
    print(train_step.stats(params, opt_state, batch))


if __name__ == "__main__":
    main()
