"""The MLP, its data and its step, shared by the worker script and the in-process references."""
import jax
import jax.numpy as jnp
import numpy as np
import optax


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def init_params():
    rng = np.random.default_rng(0)
    return {"w1": (rng.normal(size=(16, 32)) * 0.3).astype(np.float32), "b1": np.zeros(32, np.float32),
            "w2": (rng.normal(size=(32, 4)) * 0.3).astype(np.float32), "b2": np.zeros(4, np.float32)}


def data(steps: int, batch: int = 32):
    """`steps` global batches; data(n)[:m] == data(m) (separate streams for x and y)."""
    x = np.random.default_rng(1).normal(size=(steps, batch, 16)).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 4, size=(steps, batch)).astype(np.int32)
    return x, y


TX = optax.adam(1e-2)


def make_step(strategy):
    """The data-parallel step: per-replica gradients, MEAN all_reduce, Adam on every replica."""
    tx = TX

    @strategy.function
    def step(params, opt_state, batch):
        def replica_step(params, opt_state, batch):
            loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
            grads = sx_ctx().all_reduce("mean", grads)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss
        params, opt_state, loss = strategy.run(replica_step, args=(params, opt_state, batch))
        return params, opt_state, strategy.reduce("mean", loss)

    return tx, step


GLOBAL_BATCH = 32


def make_variable_training(strategy, shard_state: bool = False):
    """The MLP in sx.Variables with sx.Optimizer(TX, shard_state=...): (variables, optimizer,
    train_step, seen), `seen` a sync-on-read SUM variable counting the examples trained on."""
    import strategax as sx

    names = sorted(init_params())
    with strategy.scope():
        variables = {k: sx.Variable(v, name=k) for k, v in init_params().items()}
        optimizer = sx.Optimizer(TX, shard_state=shard_state)
        seen = sx.Variable(0.0, synchronization="ON_READ", aggregation="SUM", name="seen")

    @strategy.function
    def train_step(x, y):
        def step(x, y):
            values = {k: variables[k].read_value() for k in names}
            # this replica's share of the global mean: the optimizer SUMs the gradients
            loss, grads = jax.value_and_grad(lambda p: loss_fn(p, x, y) * x.shape[0] / GLOBAL_BATCH)(values)
            optimizer.apply_gradients([(grads[k], variables[k]) for k in names])
            seen.assign_add(float(x.shape[0]))
            return loss
        return strategy.reduce("SUM", strategy.run(step, args=(x, y)))
    return variables, optimizer, train_step, seen


def sx_ctx():
    import strategax as sx

    return sx.get_replica_context()


def reference_training(steps: int):
    """One device, plain JAX + optax, the global batch: losses per step and final parameters."""
    x, y = data(steps)
    tx = TX

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    params = init_params()
    opt_state = tx.init(params)
    losses = []
    for i in range(steps):
        params, opt_state, loss = step(params, opt_state, x[i], y[i])
        losses.append(float(loss))
    return losses, {k: np.asarray(v) for k, v in params.items()}
