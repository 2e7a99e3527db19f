"""Tracing replica functions: nested calls are inlined, control flow stays structured, and the
numbers match the same function run per replica in plain JAX on one device."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import strategax as sx

N = 4


@pytest.fixture
def strategy():
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])


def per_replica_inputs(strategy, shape=(3,)):
    comps = [np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape) * (i + 1)
             for i in range(N)]
    return comps, strategy.experimental_distribute_values_from_function(
        lambda ctx: comps[ctx.replica_id_in_sync_group])


def check_per_replica(strategy, fn, comps, *extra, rtol=1e-5):
    """strategy.run(fn) must equal jit(fn) applied to each replica's component (one device)."""
    values = strategy.experimental_distribute_values_from_function(lambda ctx: comps[ctx.replica_id_in_sync_group])
    out = strategy.run(fn, args=(values, *extra))
    reference = jax.jit(fn)
    for i, got in enumerate(strategy.experimental_local_results(out)):
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6),
                     got, reference(comps[i], *extra))
    return out


@jax.custom_jvp
def smooth_relu(x):
    return jnp.logaddexp(x, 0.0)


smooth_relu.defjvp(lambda p, t: (smooth_relu(p[0]), jax.nn.sigmoid(p[0]) * t[0]))


@jax.custom_vjp
def clip_grad(x):
    return x


clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.1, 0.1),))


def test_nested_jit_custom_jvp_custom_vjp_and_checkpoint_are_inlined(strategy):
    # Intent: jit sub-programs, custom_jvp/vjp and remat become plain ops in the IR.
    comps, values = per_replica_inputs(strategy)

    def fn(x):
        y = jax.jit(lambda a: a * 2.0 + 1.0)(x)
        z = jax.checkpoint(jnp.sin)(smooth_relu(y))
        g = jax.grad(lambda v: jnp.sum(clip_grad(v) ** 2))(x)
        return z + g

    check_per_replica(strategy, fn, comps)
    step = strategy.function(lambda v: strategy.run(fn, args=(v,)))
    text = step.ir(values)
    for name in ("jax.jit", "custom_jvp_call", "custom_vjp_call", "checkpoint", "remat"):
        assert name not in text


def test_cond_with_mirrored_and_per_replica_predicates(strategy):
    # Intent: lax.cond stays a jax.cond op with regions; a per-replica predicate is allowed
    # when the branches hold no collective.
    comps, values = per_replica_inputs(strategy)

    def fn(x):
        big = lax.cond(jnp.sum(x) > 0, lambda a: a * 10.0, lambda a: -a, x)
        return lax.cond(x.shape[0] > 2, lambda a: a + 1.0, lambda a: a - 1.0, big)

    check_per_replica(strategy, fn, comps)
    text = strategy.function(lambda v: strategy.run(fn, args=(v,))).ir(values)
    assert "jax.cond" in text and "^(" in text


def test_while_and_scan(strategy):
    # Intent: while_loop and scan (with carries and stacked outputs) match plain JAX.
    comps, values = per_replica_inputs(strategy)

    def fn(x):
        _, y = lax.while_loop(lambda s: s[0] < 5, lambda s: (s[0] + 1, s[1] * 1.5 + 0.1), (0, x))
        total, cumsum = lax.scan(lambda c, v: (c + v, c * v), 0.0, y)
        return total, cumsum, lax.fori_loop(0, 3, lambda i, a: a + i, x)

    check_per_replica(strategy, fn, comps)


def test_collective_inside_scan(strategy):
    # Intent: an all_reduce inside a scan body runs once per iteration, counted so by stats.
    comps, values = per_replica_inputs(strategy)

    def fn(x):
        ctx = sx.get_replica_context()
        return lax.scan(lambda c, v: (ctx.all_reduce("sum", c * v + 1.0), c), 1.0, x)[0]

    step = strategy.function(lambda v: strategy.run(fn, args=(v,)))
    out = step(values)
    c = np.float32(1.0)
    for k in range(3):
        c = np.sum([c * comps[r][k] + 1.0 for r in range(N)], dtype=np.float32)
    for got in strategy.experimental_local_results(out):
        np.testing.assert_allclose(got, c, rtol=1e-5)
    stats = step.stats(values)
    assert stats.count == 1 and stats.collectives[0].repeats == 3


def test_scatter_gather_and_sort(strategy):
    # Intent: scatter (its combiner is a derived parameter), gather and sort import and lower.
    comps, values = per_replica_inputs(strategy, (6,))

    def fn(x):
        y = x.at[jnp.array([0, 2])].add(5.0).at[1].set(-1.0).at[3].max(100.0)
        noise = jnp.cos(jnp.arange(6, dtype=jnp.float32))
        return y[jnp.array([5, 0])], jnp.sort(x) + noise

    check_per_replica(strategy, fn, comps)


def test_pytree_arguments_and_results(strategy):
    # Intent: dicts and tuples in and out; run regroups each leaf into a distributed value.
    comps, values = per_replica_inputs(strategy)
    out = strategy.run(lambda d: {"s": d["x"] * d["w"], "t": (d["x"].sum(), 2.0)},
                       args=({"x": values, "w": jnp.float32(3.0)},))
    assert isinstance(out["s"], sx.PerReplica) and isinstance(out["t"][0], sx.PerReplica)
    assert isinstance(out["t"][1], sx.Mirrored)
    for i in range(N):
        np.testing.assert_allclose(out["s"].values[i], comps[i] * 3.0)
        np.testing.assert_allclose(out["t"][0].values[i], comps[i].sum(), rtol=1e-6)
        assert float(out["t"][1].values[i]) == 2.0


def test_retrace_only_on_new_signature(strategy):
    # Intent: one compiled program per input signature (shape, dtype, structure, statics).
    comps, values = per_replica_inputs(strategy)
    calls = []

    def fn(x, scale):
        calls.append(1)
        return x * scale

    step = strategy.function(lambda v, scale: strategy.run(fn, args=(v, scale)))
    for _ in range(3):
        step(values, 2.0)
    assert len(calls) == 1
    step(values, 3.0)  # a new static Python value
    assert len(calls) == 2
    np.testing.assert_allclose(step(values, 3.0).values[1], comps[1] * 3.0)
    _, wider = per_replica_inputs(strategy, (5,))
    step(wider, 3.0)  # a new shape
    assert len(calls) == 3


def test_python_side_effects_happen_at_trace_time(strategy):
    # Intent: run traces once per signature (API.md's deliberate difference).
    comps, values = per_replica_inputs(strategy)
    seen = []

    def fn(x):
        seen.append(x.shape)
        return x + 1

    strategy.run(fn, args=(values,))
    strategy.run(fn, args=(values,))
    assert seen == [(3,)]


def test_stats_of_broadcast_and_real_gather(strategy):
    # Intent: a broadcast (an ONLY_FIRST_REPLICA variable's update) and a gather of a partial
    # batch's real rows (sx.all_gather_real) each move (N-1)/N of their bytes per replica, as
    # stats' legend says (an all-reduce moves twice that); before issue 35 both were charged 2x.
    with strategy.scope():
        v = sx.Variable(np.zeros(5, np.float32), aggregation=sx.VariableAggregation.ONLY_FIRST_REPLICA)
    comps, values = per_replica_inputs(strategy, (5,))
    step = strategy.function(lambda x: strategy.run(lambda x: v.assign(x), args=(x,)))
    step(values)
    np.testing.assert_array_equal(v.read_value(), comps[0])
    [c] = step.stats(values).collectives
    assert (c.op, c.payload_bytes, c.bytes_moved) == ("sx.broadcast", 20, 20 * (N - 1) // N)

    rows = np.arange(18, dtype=np.float32).reshape(6, 3)  # 6 rows in a batch of 8: a partial batch
    batch = next(iter(strategy.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices(rows).batch(8))))
    gather = strategy.function(lambda b: strategy.gather(b, axis=0))
    np.testing.assert_array_equal(gather(batch), rows)
    [c] = gather.stats(batch).collectives
    # the gathered f32[8, 3] (96 bytes) and every replica's i32 row count (4 x 4 bytes)
    assert (c.op, c.payload_bytes, c.bytes_moved) == ("sx.all_gather_real", 96 + 16, (96 + 16) * (N - 1) // N)
