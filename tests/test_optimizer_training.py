"""sx.Optimizer over optax: a 2-layer MLP trained 20 steps on 8 replicas matches the same
training on one device in plain JAX + optax, and a checkpoint saved after 10 steps and restored
on 4 replicas continues to the same numbers."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import strategax as sx

STEPS, BATCH, NIN, NHID, NOUT = 20, 64, 8, 16, 4
NAMES = ("b1", "b2", "w1", "w2")


def init_params():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {"w1": jax.random.normal(k1, (NIN, NHID)) * 0.3, "b1": jnp.zeros(NHID),
            "w2": jax.random.normal(k2, (NHID, NOUT)) * 0.3, "b2": jnp.zeros(NOUT)}


def batches():
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(STEPS, BATCH, NIN)).astype(np.float32)
    ys = rng.normal(size=(STEPS, BATCH, NOUT)).astype(np.float32)
    return xs, ys


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    pred = h @ params["w2"] + params["b2"]
    return jnp.sum((pred - y) ** 2) / BATCH  # per-replica share of the global mean


def tx():
    return optax.adam(1e-2)


def reference_training():
    """One device, plain JAX + optax: the losses of every step and the parameters after each."""
    params, opt = init_params(), tx()
    state = opt.init(params)
    xs, ys = batches()
    losses, history = [], []

    @jax.jit
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    for i in range(STEPS):
        params, state, loss = step(params, state, xs[i], ys[i])
        losses.append(float(loss))
        history.append(jax.tree_util.tree_map(np.asarray, params))
    return losses, history


def make_trainer(strategy, params):
    with strategy.scope():
        variables = {k: sx.Variable(v, name=k) for k, v in params.items()}
        optimizer = sx.Optimizer(tx())

    @strategy.function
    def train_step(x, y):
        def step(x, y):
            values = {k: variables[k].read_value() for k in NAMES}
            loss, grads = jax.value_and_grad(loss_fn)(values, x, y)
            optimizer.apply_gradients([(grads[k], variables[k]) for k in NAMES])
            return loss
        return strategy.reduce("SUM", strategy.run(step, args=(x, y)))
    return variables, optimizer, train_step


def distributed(strategy, xs, ys):
    return iter(strategy.experimental_distribute_dataset([(x, y) for x, y in zip(xs, ys)]))


def assert_params(variables, want):
    for k in NAMES:
        for component in variables[k].values:
            np.testing.assert_allclose(np.asarray(component), want[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.fixture(scope="module")
def reference():
    return reference_training()


def test_mlp_20_steps_on_8_replicas_matches_one_device(reference):
    # Intent: "Done when": 8 replicas + sx.Optimizer == one device + optax, to 1e-5 relative.
    ref_losses, ref_params = reference
    strategy = sx.MirroredStrategy()
    assert strategy.num_replicas_in_sync == 8
    variables, optimizer, train_step = make_trainer(strategy, init_params())
    xs, ys = batches()
    for i, (x, y) in enumerate(distributed(strategy, xs, ys)):
        loss = train_step(x, y)
        np.testing.assert_allclose(float(loss), ref_losses[i], rtol=1e-5)
    assert_params(variables, ref_params[-1])
    assert int(optimizer.iterations.numpy()) == STEPS
    assert len(train_step._cache) == 1  # one trace, one executable
    text = train_step.ir(x, y, stage="insert-collectives")
    reduces = [line for line in text.splitlines() if "sx.all_reduce " in line]
    assert len(reduces) == len(NAMES) + 1, text  # one per gradient (batch_reduce_to) + the loss
    final = train_step.ir(x, y)  # fuse-collectives packs them: one bucket (bytes_per_pack=0)
    assert [line for line in final.splitlines() if "sx.all_reduce" in line] == [
        line for line in final.splitlines() if "sx.all_reduce_bucket" in line], final


def test_checkpoint_restored_on_4_replicas_continues(tmp_path, reference):
    # Intent: save after 10 steps on 8 replicas, restore into fresh variables on 4, continue 10.
    ref_losses, ref_params = reference
    xs, ys = batches()
    eight = sx.MirroredStrategy()
    variables, optimizer, train_step = make_trainer(eight, init_params())
    for x, y in distributed(eight, xs[:10], ys[:10]):
        train_step(x, y)
    path = sx.Checkpoint(params=variables, optimizer=optimizer).save(str(tmp_path))
    assert sx.latest_checkpoint(str(tmp_path)) == path

    four = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    zeros = jax.tree_util.tree_map(jnp.zeros_like, init_params())
    variables4, optimizer4, train_step4 = make_trainer(four, zeros)
    sx.Checkpoint(params=variables4, optimizer=optimizer4).restore(path)
    assert_params(variables4, ref_params[9])
    assert int(optimizer4.iterations.numpy()) == 10
    for i, (x, y) in enumerate(distributed(four, xs[10:], ys[10:]), start=10):
        np.testing.assert_allclose(float(train_step4(x, y)), ref_losses[i], rtol=1e-5)
    assert_params(variables4, ref_params[-1])
