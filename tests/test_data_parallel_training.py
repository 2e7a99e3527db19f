"""Data-parallel training on 8 replicas equals one-device training on the global batch."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

import strategax as sx


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (16, 32)) * 0.3, "b1": jnp.zeros(32),
            "w2": jax.random.normal(k2, (32, 4)) * 0.3, "b2": jnp.zeros(4)}


def test_eight_replicas_match_one_device_adam():
    # Intent: MEAN all_reduce of per-replica gradients + optax update on every replica gives
    # the same parameters as the full batch on one device (plain JAX + optax), 10 steps.
    rng = np.random.default_rng(1)
    x = rng.normal(size=(10, 64, 16)).astype(np.float32)
    y = rng.integers(0, 4, size=(10, 64)).astype(np.int32)
    tx = optax.adam(1e-2)
    params = init(jax.random.key(0))

    strategy = sx.MirroredStrategy()

    @strategy.function
    def step(params, opt_state, batch):
        def replica_step(params, opt_state, batch):
            loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
            grads = sx.get_replica_context().all_reduce("mean", grads)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss
        params, opt_state, loss = strategy.run(replica_step, args=(params, opt_state, batch))
        return params, opt_state, strategy.reduce("mean", loss)

    @jax.jit
    def reference_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    sx_params, sx_state = params, tx.init(params)
    ref_params, ref_state = params, tx.init(params)
    dataset = strategy.experimental_distribute_dataset(list(zip(x, y)))
    for i, batch in enumerate(dataset):
        sx_params, sx_state, sx_loss = step(sx_params, sx_state, batch)
        ref_params, ref_state, ref_loss = reference_step(ref_params, ref_state, x[i], y[i])
        np.testing.assert_allclose(float(sx_loss), float(ref_loss), rtol=1e-5)
    for k in params:
        np.testing.assert_allclose(np.asarray(sx_params[k]), ref_params[k], rtol=1e-5, atol=1e-6)
    assert isinstance(sx_params["w1"], sx.Mirrored)
    assert len(step._cache) == 1  # plain arrays and Mirrored parameters share one program
    stats = step.stats(sx_params, sx_state, batch)
    # 4 gradient leaves + the loss reduction, packed into one bucket (bytes_per_pack=0)
    assert stats.count == 1 and len(stats.collectives[0].members) == 5
