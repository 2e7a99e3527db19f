"""Variables read inside lax.cond / lax.scan bodies (updates there are a reported gap)."""
import jax
import jax.numpy as jnp
import numpy as np

import strategax as sx


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
