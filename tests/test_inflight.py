"""Many steps dispatched without waiting: XLA:CPU's collectives deadlock when dozens of
multi-device programs are queued, so strategax bounds the runs in flight (backends/inflight.py).
Without the bound this test hangs and XLA aborts the process after 40 s."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def sgd_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads), loss


# the round-trip recorder reads every output back (a host sync per call), which would hide the hang
@pytest.mark.no_round_trip
def test_300_queued_steps_finish_and_match_one_device():
    # Intent: a data-parallel loop of 300 steps fed by a prefetching dataset that never reads a
    # result back (no host sync) completes, with one-device plain JAX's parameters.
    strategy = sx.MirroredStrategy()
    rng = np.random.default_rng(0)
    data = [(rng.normal(size=(1024, 256)).astype(np.float32),
             rng.integers(0, 10, size=(1024,)).astype(np.int32)) for _ in range(30)] * 10
    params = {"w1": jnp.asarray(rng.normal(size=(256, 512)).astype(np.float32) * 0.05),
              "b1": jnp.zeros(512), "w2": jnp.asarray(rng.normal(size=(512, 10)).astype(np.float32) * 0.05),
              "b2": jnp.zeros(10)}

    @strategy.function
    def step(params, batch):
        def replica(params, batch):
            x, y = batch
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            grads = sx.get_replica_context().all_reduce("MEAN", grads)
            return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads), loss
        params, loss = strategy.run(replica, args=(params, batch))
        return params, strategy.reduce("MEAN", loss)

    sx_params = params
    for batch in strategy.experimental_distribute_dataset(
            data, sx.InputOptions(experimental_per_replica_buffer_size=2)):
        sx_params, _ = step(sx_params, batch)
    ref = jax.jit(sgd_step)
    for x, y in data:
        params, _ = ref(params, x, y)
    for k in params:
        np.testing.assert_allclose(np.asarray(sx_params[k].values[0]), np.asarray(params[k]),
                                   rtol=1e-2, atol=1e-4)
