"""@strategy.function with variables: one module and one executable per input signature,
variable buffers donated (updated in place), retraces logged; options reach the IR."""
import logging

import jax.numpy as jnp
import numpy as np

import strategax as sx


def strategy4():
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])


def test_whole_step_is_one_program_cached_by_signature(caplog):
    # Intent: run + reduce + variable updates + Python control flow in one module; retraces only
    # on a new shape/dtype/structure/static value, each logged at debug level.
    st = strategy4()
    with st.scope():
        total = sx.Variable(0.0, aggregation="SUM")
        steps = sx.Variable(0, dtype=jnp.int32, aggregation="ONLY_FIRST_REPLICA")
    traces = []

    @st.function
    def step(x, double):
        traces.append(1)
        def fn(x):
            total.assign_add(jnp.sum(x) * (2.0 if double else 1.0))  # Python control flow
            steps.assign_add(1)
            return jnp.sum(x)
        return st.reduce("SUM", st.run(fn, args=(x,)))

    x = st.experimental_distribute_values_from_function(lambda c: jnp.full(2, c.replica_id_in_sync_group + 1.0))
    with caplog.at_level(logging.DEBUG, logger="strategax"):
        for _ in range(3):
            assert float(step(x, False)) == 20.0
        assert len(traces) == 1 and len(step._cache) == 1
        assert float(total.numpy()) == 60.0 and int(steps.numpy()) == 3
        step(x, True)  # a new static value
        assert float(total.numpy()) == 100.0
        x64 = st.experimental_distribute_values_from_function(
            lambda c: jnp.full(2, c.replica_id_in_sync_group + 1, jnp.int32))
        step(x64, False)  # a new dtype
        wider = st.experimental_distribute_values_from_function(lambda c: jnp.ones(3))
        step(wider, False)  # a new shape
    assert len(traces) == 4
    assert sum("retracing" in r.getMessage() for r in caplog.records) == 3
    text = step.ir(x, False)
    assert text.count("func @") == 1 and text.count("var @") == 2


def test_variable_buffers_are_donated():
    # Intent: an update is in place: the executable donates the variable's buffer.
    st = strategy4()
    with st.scope():
        w = sx.Variable(jnp.ones(1000))
    def fn():
        w.assign_sub(jnp.full(1000, 0.5))
    step = st.function(lambda: st.run(fn))
    step()
    before = w._store.array
    step()
    assert before.is_deleted()
    np.testing.assert_allclose(w.values[0], np.zeros(1000))
    assert "tf.aliasing_output" in step.stablehlo()  # the input buffer is the output buffer


def test_bytes_per_pack_reaches_the_ir():
    # Intent: batch_reduce_to(options=CommunicationOptions(bytes_per_pack)) tags each all_reduce,
    # so fuse-collectives can bucket them; the numbers are unchanged.
    st = strategy4()
    with st.scope():
        a, b = sx.Variable(jnp.zeros(3)), sx.Variable(jnp.zeros(2))
    options = sx.CommunicationOptions(bytes_per_pack=1024)

    def merge_fn(strategy, ga, gb):
        ra, rb = strategy.extended.batch_reduce_to("SUM", [(ga, a), (gb, b)], options=options)
        strategy.extended.update(a, lambda v, t: v.assign(t), args=(ra,))
        strategy.extended.update(b, lambda v, t: v.assign(t), args=(rb,))

    def fn():
        r = sx.get_replica_context().replica_id_in_sync_group.astype(jnp.float32)
        sx.get_replica_context().merge_call(merge_fn, args=(jnp.full(3, r), jnp.full(2, 2 * r)))

    step = st.function(lambda: st.run(fn))
    step()
    lines = [line for line in step.ir(stage="traced").splitlines() if "sx.all_reduce" in line]
    assert len(lines) == 2 and all("bytes_per_pack = 1024" in line for line in lines)
    np.testing.assert_allclose(a.values[3], [6.0] * 3)
    np.testing.assert_allclose(b.values[0], [12.0] * 2)


def test_variable_read_inside_a_cached_jax_jit():
    # Intent: a jax.jit-ed helper reading a variable is traced once and reused by JAX's cache;
    # every program that inlines it must still read that variable (symbols are never reused).
    import jax
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    with st.scope():
        a, b = sx.Variable(1.0), sx.Variable(5.0)

    @jax.jit
    def scaled(x):
        return x * a.read_value()

    first = st.function(lambda: st.run(lambda: scaled(2.0)))
    second = st.function(lambda: st.run(lambda: b.read_value() + scaled(2.0)))
    assert float(first().values[0]) == 2.0
    assert [float(v) for v in second().values] == [7.0, 7.0]
