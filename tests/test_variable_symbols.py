"""Programs traced one after another in one process whose variables share IR symbol names
(two optimizers' slots are both `Optimizer/slot_0_0`, ...) each see their own shapes."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

import strategax as sx


def one_adam_step(shape):
    """One sx.Optimizer(adam) step on 2 replicas; returns the updated parameter."""
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    with strategy.scope():
        w = sx.Variable(np.ones(shape, np.float32), name="w")
        optimizer = sx.Optimizer(optax.adam(0.1))

    @strategy.function
    def step(x):
        def replica_fn(x):
            grad = jax.grad(lambda v: jnp.sum(v * jnp.sum(x)))(w.read_value())
            optimizer.apply_gradients([(grad, w)])
            return jnp.sum(x)
        return strategy.reduce("SUM", strategy.run(replica_fn, args=(x,)), axis=None)

    batch = next(iter(strategy.experimental_distribute_dataset([np.arange(4, dtype=np.float32)])))
    step(batch)
    return np.asarray(w.numpy())


def plain_adam_step(shape):
    """The same step on one device: the gradient is the sum of the whole batch, 6, everywhere."""
    params = jnp.ones(shape)
    tx = optax.adam(0.1)
    updates, _ = tx.update(jnp.full(shape, 6.0), tx.init(params), params)
    return np.asarray(optax.apply_updates(params, updates))


def test_two_programs_with_same_symbol_names_and_different_shapes():
    # Intent: the second program's slot reads have its own shapes (JAX caches abstract
    # evaluation by parameters, and a variable read's parameters are only its symbol name).
    for shape in [(64, 3), (5,)]:
        np.testing.assert_allclose(one_adam_step(shape), plain_adam_step(shape), rtol=1e-6)


def test_creating_unnamed_variables_probes_each_symbol_a_constant_number_of_times(monkeypatch):
    # Intent: variable creation is linear: the n-th unnamed variable ("Variable", "Variable_1",
    # ...) finds its free symbol in at most two probes of the issued names, not n (creating
    # the 8,000th thousand once took 9x the first); symbols stay unique and never reused.
    from strategax.dialects import variables as var_ops

    class CountingSet(set):
        probes = 0

        def __contains__(self, name):
            CountingSet.probes += 1
            return super().__contains__(name)

    monkeypatch.setattr(var_ops, "_ISSUED", CountingSet(var_ops._ISSUED))
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    with strategy.scope():
        made = [sx.Variable(np.float32(i)) for i in range(2000)]
    symbols = [v._symbol for v in made]
    assert len(set(symbols)) == len(symbols) and all(s.startswith("Variable") for s in symbols)
    assert CountingSet.probes <= 2 * len(made)
    assert [float(v.numpy()) for v in made[:3] + made[-1:]] == [0.0, 1.0, 2.0, 1999.0]
