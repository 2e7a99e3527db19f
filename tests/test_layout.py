"""Per-replica inputs become one global array without copies when already on their devices."""
import jax
import jax.numpy as jnp
import numpy as np

import strategax as sx
from strategax.backends import transfer
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


def test_numpy_components_are_copied_when_assembled():
    # Intent: a PerReplica of the user's NumPy arrays is assembled from copies strategax owns:
    # JAX's CPU transfer can alias an aligned host array, and the global array (kept with the
    # value for later calls) then changed when the user refilled their array after the call.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    originals = [np.full((1024, 64), float(r + 1), np.float32) for r in range(2)]
    comps = [transfer.host_array(o.shape, o.dtype, fill=o) for o in originals]  # aligned: aliasable
    values = sx.PerReplica(tuple(comps))
    step = strategy.function(lambda v: strategy.run(lambda x: x * 2.0, args=(v,)))
    first = step(values)
    for c in comps:  # the user reuses their buffers
        c[...] = -7.0
    again = step(values)  # the same value: its global array, assembled at the first call
    for r, (a, b) in enumerate(zip(strategy.experimental_local_results(first),
                                   strategy.experimental_local_results(again))):
        np.testing.assert_array_equal(np.asarray(a), 2.0 * originals[r])
        np.testing.assert_array_equal(np.asarray(b), 2.0 * originals[r])
