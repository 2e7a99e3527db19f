"""Per-replica inputs become one global array without copies when already on their devices."""
import jax
import jax.numpy as jnp
import numpy as np

import strategax as sx
from strategax.trace.distributed_values import Form


def test_assembly_reuses_device_buffers():
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: jnp.full((2, 3), ctx.replica_id_in_sync_group, jnp.float32))
    step = strategy.function(lambda v: strategy.run(lambda x: x * 2.0, args=(v,)))
    out = step(values)
    global_array, layout = values.held_global  # assembled on first use and memoised
    assert global_array.shape == (8, 3)
    shards = layout.components(global_array)
    for comp, shard in zip(values.values, shards):
        assert comp.unsafe_buffer_pointer() == shard.unsafe_buffer_pointer()
    for i, comp in enumerate(strategy.experimental_local_results(out)):
        np.testing.assert_array_equal(comp, np.full((2, 3), 2.0 * i))


def test_outputs_feed_the_next_call_without_reassembly():
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: jnp.ones(2) * ctx.replica_id_in_sync_group)
    step = strategy.function(lambda v: strategy.run(lambda x: x + 1.0, args=(v,)))
    out = step(step(values))
    assert out.form is Form.GLOBAL  # still a view of the program's global output
    for i, comp in enumerate(out.values):
        np.testing.assert_array_equal(comp, [i + 2.0, i + 2.0])
        assert list(comp.devices()) == [jax.devices()[i]]
