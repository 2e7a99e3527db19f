"""Variables read and updated inside lax.cond, while_loop, fori_loop and scan: every update
reaches the variable once per iteration, aggregated updates all-reduce inside the loop, and
the numbers match the same steps written in plain JAX on one device."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import assert_names_this_line, here

import strategax as sx

N = 4


@pytest.fixture
def st():
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])


def per_replica(st, comps):
    return st.experimental_distribute_values_from_function(lambda c: comps[c.replica_id_in_sync_group])


def test_variable_read_inside_cond_and_scan():
    # Intent: reads inside control-flow regions see the variable's value on every replica.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    with st.scope():
        w = sx.Variable(3.0)
        acc = sx.Variable(0.0, synchronization="ON_READ", aggregation="SUM")

    def fn():
        r = sx.get_replica_context().replica_id_in_sync_group
        a = jax.lax.cond(r > 0, lambda: w.read_value() * 2.0, lambda: acc.read_value() + 1.0)
        total, _ = jax.lax.scan(lambda c, x: (c + w.read_value() * x, None), 0.0, jnp.arange(3.0))
        return a + total

    out = st.experimental_local_results(st.run(fn))
    # replica 0: acc(0) + 1 + 3*(0+1+2) = 10; replica 1: 3*2 + 9 = 15 (plain arithmetic)
    np.testing.assert_allclose([float(o) for o in out], [10.0, 15.0])


def test_updates_inside_cond_match_one_device_jax(st):
    # Intent: a SUM mirrored update in a branch chosen by a mirrored predicate all-reduces
    # inside the branch; a sync-on-read update may sit under a per-replica predicate.
    comps = [np.array([1.0, -2.0, 0.5], np.float32) * (i - 1.5) for i in range(N)]
    with st.scope():
        w = sx.Variable(jnp.ones(3), aggregation="SUM")
        acc = sx.Variable(jnp.zeros(3), synchronization="ON_READ", aggregation="SUM")

    @st.function
    def step(x, scale):
        def fn(x):
            jax.lax.cond(scale > 0, lambda: w.assign_add(x * scale), lambda: w.assign_sub(x))
            jax.lax.cond(jnp.sum(x) > 0, lambda: acc.assign_add(x), lambda: acc.assign(-x))
            return w.read_value()
        return st.run(fn, args=(x,))

    x = per_replica(st, comps)
    step(x, jnp.float32(2.0))
    out = step(x, jnp.float32(-1.0))
    # one device: w += 2 * sum_i x_i, then w -= sum_i x_i; acc_i by its own branch twice
    want_w = np.ones(3, np.float32) + 2 * sum(comps) - sum(comps)
    want_acc = [2 * c if c.sum() > 0 else -c for c in comps]
    for got in st.experimental_local_results(out):
        np.testing.assert_allclose(got, want_w, rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-6)
    for got, want in zip(acc.values, want_acc):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    assert "writes = (@" in step.ir(x, jnp.float32(2.0))


def test_updates_inside_while_and_fori_loops_match_one_device_jax(st):
    # Intent: a MEAN assign that reads the variable it writes, in a while_loop (traced trip
    # count) and a fori_loop (static: a scan), sees each iteration's value; the all_reduce of
    # the aggregation runs inside the body, once per iteration.
    comps = [np.full(2, i + 1.0, np.float32) for i in range(N)]
    with st.scope():
        w = sx.Variable(jnp.zeros(2), aggregation="MEAN")
        count = sx.Variable(0, dtype=jnp.int32)

    def fn(x, n):
        def body(i, carry):
            w.assign(w.read_value() * 0.5 + x * carry)  # per replica, then MEAN
            count.assign_add(1)
            return carry + 1.0
        jax.lax.fori_loop(0, n, body, 1.0)  # n traced: a while loop
        return jax.lax.fori_loop(0, 3, body, 1.0)  # static bounds: a scan

    step = st.function(lambda x, n: st.run(fn, args=(x, n)))
    x = per_replica(st, comps)
    out = step(x, jnp.int32(2))
    w_ref, mean_x = np.zeros(2, np.float32), np.mean(comps, axis=0)
    for n in (2, 3):
        for k in range(n):
            w_ref = w_ref * 0.5 + mean_x * (1.0 + k)
    np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-6)
    assert int(count.numpy()) == 5
    np.testing.assert_allclose(st.experimental_local_results(out)[0], 4.0)
    stats = step.stats(x, jnp.int32(2))
    loops = sorted((c.repeats, bool(c.per_iteration_of)) for c in stats.collectives)
    assert loops == [(1, True), (3, False)], stats.table()  # while: per iteration; scan: x3
    assert "[per iteration of jax.while at " in stats.table()


def test_gradient_steps_inside_scan_match_one_device_jax(st):
    # Intent: an optimizer step per scan iteration (merge_call, batch_reduce_to and the slot
    # updates inside the body) gives the weights of the same steps in plain JAX and optax.
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(5, N * 4, 3)).astype(np.float32)  # 5 steps of a global batch of 16
    ys = rng.normal(size=(5, N * 4)).astype(np.float32)
    w0 = np.array([0.5, -0.25, 1.0], np.float32)
    tx = optax.sgd(0.1, momentum=0.9)
    with st.scope():
        w = sx.Variable(w0)
        opt = sx.Optimizer(tx)

    def loss(w, x, y):
        return jnp.sum((x @ w - y) ** 2) / (N * 4)

    def fn(x_steps, y_steps):
        def body(_, xy):
            g = jax.grad(loss)(w.read_value(), *xy)
            opt.apply_gradients([(g, w)])
            return None, None
        jax.lax.scan(body, None, (x_steps, y_steps))

    pieces = lambda a: per_replica(st, [a[:, i * 4:(i + 1) * 4] for i in range(N)])  # noqa: E731
    st.function(lambda x, y: st.run(fn, args=(x, y)))(pieces(xs), pieces(ys))
    params, state = jnp.asarray(w0), tx.init(jnp.asarray(w0))
    for t in range(5):
        g = jax.grad(loss)(params, xs[t], ys[t])
        updates, state = tx.update(g, state, params)
        params = optax.apply_updates(params, updates)
    np.testing.assert_allclose(w.numpy(), params, rtol=1e-5)


def test_mirrored_update_under_per_replica_predicate_raises(st):
    # Intent: replicas that take different branches would leave a mirrored variable's copies
    # different (aggregation NONE) or hang in its all_reduce (SUM): both raise at trace time.
    with st.scope():
        plain = sx.Variable(1.0)
        summed = sx.Variable(1.0, aggregation="SUM")
    rid = lambda: sx.get_replica_context().replica_id_in_sync_group  # noqa: E731
    line = here() + 2
    def local():
        jax.lax.cond(rid() > 0, lambda: plain.assign(2.0) * 0, lambda: jnp.float32(0))
    with pytest.raises(ValueError) as err:
        st.run(local)
    assert_names_this_line(err, line)
    assert "copies would no longer be identical" in str(err.value)
    line = here() + 2
    def aggregated():
        jax.lax.while_loop(lambda i: i < rid(), lambda i: i + 1 + 0 * summed.assign_add(1.0), 0)
    with pytest.raises(RuntimeError) as err:
        st.run(aggregated)
    assert_names_this_line(err, line)
    assert "would hang" in str(err.value)
