"""strategax's primitives under JAX transformations: variable accesses and collectives are
JAX effects, so no transformation drops or repeats them; each primitive has a batching rule,
so `vmap` gives per batch element what the unbatched op gives. References: the same maths
written without the transformation, or by hand."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from conftest import assert_names_this_line, here

N = 4


@pytest.fixture
def strategy():
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])


def counting_step(strategy, wrap):
    """A step whose loss calls a `wrap`ped helper that bumps `count`, under jax.grad."""
    with strategy.scope():
        count = sx.Variable(0.0, aggregation=sx.VariableAggregation.SUM)
        w = sx.Variable(jnp.arange(3.0))
    helper = wrap(lambda v: bump_then_double(count, v))  # variables are captured, not passed

    @strategy.function
    def step(x):
        def replica(x):
            def loss(w):
                return jnp.sum(helper(w * x) ** 2)
            return jax.grad(loss)(w.read_value())
        return strategy.run(replica, args=(x,))
    return count, step


def bump_then_double(count, v):
    count.assign_add(1.0)
    return 2.0 * v


@pytest.mark.parametrize("wrap", [jax.jit, jax.checkpoint, functools.partial(jax.checkpoint, prevent_cse=False)],
                         ids=["jit", "checkpoint", "checkpoint_no_cse"])
def test_update_in_wrapped_helper_under_grad_applies_once(strategy, wrap):
    # Intent: an assign_add inside a jit- or checkpoint-wrapped helper, differentiated, is
    # neither dropped (JAX's DCE keeps effects) nor repeated (remat never recomputes them):
    # each replica adds 1 once per step, summed over the 4 replicas (SUM aggregation).
    count, step = counting_step(strategy, wrap)
    x = jnp.ones(3)
    grads = step(x)
    assert float(count.numpy()) == N
    step(x)
    assert float(count.numpy()) == 2 * N
    # the gradient itself: d/dw sum((2 w x)^2) = 8 w x^2
    for g in strategy.experimental_local_results(grads):
        np.testing.assert_allclose(g, 8 * np.arange(3.0), rtol=1e-6)


def test_update_in_custom_vjp_forward_applies_once(strategy):
    # Intent: a custom_vjp whose forward rule updates a variable runs that update once per step.
    with strategy.scope():
        count = sx.Variable(0.0, aggregation=sx.VariableAggregation.SUM)

    @jax.custom_vjp
    def f(v):
        return bump_then_double(count, v)

    def fwd(v):
        return bump_then_double(count, v), None

    def bwd(_, ct):
        return (2.0 * ct,)

    f.defvjp(fwd, bwd)

    @strategy.function
    def step(x):
        return strategy.run(lambda x: jax.grad(lambda v: jnp.sum(f(v)))(x), args=(x,))

    g = step(jnp.ones(3))
    assert float(count.numpy()) == N
    np.testing.assert_allclose(strategy.experimental_local_results(g)[0], 2.0 * np.ones(3))


def test_unused_read_in_jit_helper_still_orders_after_update(strategy):
    # Intent: a read whose result is used after an update inside the same jit helper sees the
    # update (program order survives jit inlining).
    with strategy.scope():
        v = sx.Variable(1.0, aggregation=sx.VariableAggregation.MEAN)

    @jax.jit
    def helper():
        v.assign_add(2.0)
        return v.read_value() * 10.0

    @strategy.function
    def step():
        return strategy.run(helper)

    out = step()
    np.testing.assert_allclose(strategy.experimental_local_results(out), [30.0] * N)
    assert float(v.numpy()) == 3.0


def rid():
    return sx.get_replica_context().replica_id_in_sync_group.astype(jnp.float32)


def test_vmap_of_all_reduce_matches_unbatched(strategy):
    # Intent: vmap over all_reduce (SUM and MEAN) equals reducing each batch element on its own.
    @strategy.function
    def step(xs):
        def replica(xs):
            ctx = sx.get_replica_context()
            mine = xs * (rid() + 1.0)
            batched = jax.vmap(lambda x: ctx.all_reduce("SUM", x))(mine)
            unbatched = jnp.stack([ctx.all_reduce("SUM", mine[i]) for i in range(mine.shape[0])])
            batched_mean = jax.vmap(lambda x: ctx.all_reduce("MEAN", x), in_axes=1, out_axes=1)(mine)
            return batched, unbatched, batched_mean
        return strategy.run(replica, args=(xs,))

    xs = jnp.arange(6.0).reshape(3, 2)
    batched, unbatched, mean = step(xs)
    total = sum(r + 1.0 for r in range(N))
    for b, u, m in zip(*(strategy.experimental_local_results(t) for t in (batched, unbatched, mean))):
        np.testing.assert_allclose(b, xs * total)
        np.testing.assert_allclose(u, xs * total)
        np.testing.assert_allclose(m, xs * total / N)


@pytest.mark.parametrize("axis,in_axes", [(0, 0), (0, 1), (1, 0), (1, 2)])
def test_vmap_of_all_gather_matches_unbatched(strategy, axis, in_axes):
    # Intent: vmap over all_gather, with the batch axis before or after the gathered axis,
    # equals gathering each batch element on its own (numbers from NumPy).
    xs = jnp.arange(24.0).reshape(2, 3, 4)

    @strategy.function
    def step(xs):
        def replica(xs):
            ctx = sx.get_replica_context()
            mine = xs + 100.0 * rid()
            return jax.vmap(lambda x: ctx.all_gather(x, axis), in_axes=in_axes, out_axes=0)(mine)
        return strategy.run(replica, args=(xs,))

    out = strategy.experimental_local_results(step(xs))[0]
    pieces = [np.asarray(xs) + 100.0 * r for r in range(N)]
    expect = np.stack([np.concatenate([np.moveaxis(p, in_axes, 0)[b] for p in pieces], axis=axis)
                       for b in range(np.moveaxis(np.asarray(xs), in_axes, 0).shape[0])])
    np.testing.assert_allclose(out, expect)


def test_vmap_of_replica_id_and_variable_read(strategy):
    # Intent: unbatched operands (replica id, a variable read) broadcast against the batch.
    with strategy.scope():
        w = sx.Variable(jnp.array([1.0, 2.0]))

    @strategy.function
    def step(xs):
        return strategy.run(lambda xs: jax.vmap(lambda x: x * w.read_value() + rid())(xs), args=(xs,))

    xs = jnp.arange(6.0).reshape(3, 2)
    for r, out in enumerate(strategy.experimental_local_results(step(xs))):
        np.testing.assert_allclose(out, np.asarray(xs) * [1.0, 2.0] + r)


def test_vmap_of_a_variable_update_is_an_error(strategy):
    # Intent: a batched update would write one variable once per batch element: refused.
    with strategy.scope():
        v = sx.Variable(0.0, aggregation=sx.VariableAggregation.SUM)

    line = here() + 4

    @strategy.function
    def step(xs):
        return strategy.run(lambda xs: jax.vmap(lambda x: v.assign_add(x))(xs), args=(xs,))

    with pytest.raises(ValueError, match="inside jax.vmap with a batched value") as err:
        step(jnp.ones(3))
    assert_names_this_line(err, line)
