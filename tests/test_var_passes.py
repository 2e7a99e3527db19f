"""insert-collectives end to end: the collectives a traced step gets for its variable updates.
(The pass-by-pass cases are IR text in tests/passes/insert_collectives.sxir and
check_locality.sxir, run by tests/passes/test_pass_suite.py.)"""
import jax.numpy as jnp
import numpy as np

import strategax as sx


def test_one_all_reduce_per_aggregated_update_in_a_traced_step():
    # Intent: "Done when": exactly one all_reduce per aggregated update, with reason and this
    # file's line; sync-on-read updates in replica context show none.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2", "CPU:3"])
    with st.scope():
        a = sx.Variable(jnp.zeros(3), aggregation="SUM")
        b = sx.Variable(jnp.zeros(()), aggregation="MEAN")
        acc = sx.Variable(0.0, synchronization="ON_READ", aggregation="SUM")

    @st.function
    def step(x):
        def fn(x):
            a.assign_add(x)
            b.assign(jnp.sum(x))
            acc.assign_add(jnp.sum(x))
        st.run(fn, args=(x,))

    x = st.experimental_distribute_values_from_function(
        lambda ctx: jnp.full(3, ctx.replica_id_in_sync_group + 1.0))
    text = step.ir(x, stage="insert-collectives")
    reduces = [line for line in text.splitlines() if "sx.all_reduce" in line]
    assert len(reduces) == 2, text
    assert all("aggregation of an update" in line and "test_var_passes.py\":" in line for line in reduces)
    traced = step.ir(x, stage="traced")
    assert "sx.all_reduce" not in traced
    step(x)
    assert np.asarray(a.values[0]).tolist() == [10.0] * 3  # 1+2+3+4
    assert float(b.values[0]) == 7.5  # mean of 3, 6, 9, 12
    assert [float(c) for c in acc.values] == [3.0, 6.0, 9.0, 12.0]
