"""The examples in the docstrings of tf.distribute.Strategy.run, reduce,
experimental_local_results, experimental_distribute_values_from_function and
DistributedValues (the seed pages), each with TensorFlow's printed numbers."""
import jax.numpy as jnp
import numpy as np

import strategax as sx


def two_replicas():
    # The seed uses ["GPU:0", "GPU:1"]; the tests run on simulated CPU devices.
    return sx.MirroredStrategy(["CPU:0", "CPU:1"])


def first_batch(strategy):
    # tf.data.Dataset.from_tensor_slices([5., 6., 7., 8.]).batch(2)
    dataset = [np.array([5.0, 6.0], np.float32), np.array([7.0, 8.0], np.float32)]
    return next(iter(strategy.experimental_distribute_dataset(dataset)))


# --- DistributedValues, examples 1-5 (seeds 000 and 001) ------------------------------------
def test_distributed_values_from_dataset():
    # Intent: the first global batch [5, 6] is split one element per replica.
    values = first_batch(two_replicas())
    assert isinstance(values, sx.PerReplica)
    assert [np.asarray(v).tolist() for v in values.values] == [[5.0], [6.0]]
    assert repr(values) == ("PerReplica:{\n  0: Array([5.], dtype=float32),\n"
                            "  1: Array([6.], dtype=float32)\n}")


def test_distributed_values_returned_by_run():
    # Intent: replica_id_in_sync_group is 0 and 1, an int32 scalar per replica.
    strategy = two_replicas()

    def run():
        ctx = sx.get_replica_context()
        return ctx.replica_id_in_sync_group

    values = strategy.run(run)
    assert isinstance(values, sx.PerReplica)
    local = strategy.experimental_local_results(values)
    assert [int(v) for v in local] == [0, 1]
    assert all(v.dtype == jnp.int32 and v.shape == () for v in local)


def test_distributed_values_as_input_to_run():
    # Intent: each replica adds 1 to its own component: [6.] and [7.].
    strategy = two_replicas()
    values = first_batch(strategy)
    updated = strategy.run(lambda x: x + 1.0, args=(values,))
    assert [np.asarray(v).tolist() for v in strategy.experimental_local_results(updated)] == [[6.0], [7.0]]


def test_distributed_values_reduce_sum_axis_0():
    # Intent: SUM over replicas and over the batch axis of [5.] and [6.] is 11.
    strategy = two_replicas()
    reduced = strategy.reduce(sx.ReduceOp.SUM, first_batch(strategy), axis=0)
    assert float(reduced) == 11.0
    assert reduced.shape == ()


def test_distributed_values_local_results():
    # Intent: the local results are the two per-replica tensors, placed on their devices.
    strategy = two_replicas()
    local = strategy.experimental_local_results(first_batch(strategy))
    assert isinstance(local, tuple) and len(local) == 2
    assert [np.asarray(v).tolist() for v in local] == [[5.0], [6.0]]
    assert [list(v.devices())[0] for v in local] == list(strategy.extended.worker_devices)


# --- Strategy.run examples (seed 003) -------------------------------------------------------
def test_run_constant_tensor_input_single_replica():
    # Intent: with one replica, run returns a plain tensor: 3.0 * 2.0 = 6.0.
    strategy = sx.MirroredStrategy(["CPU:0"])
    result = strategy.run(lambda x: x * 2.0, args=(jnp.float32(3.0),))
    assert not isinstance(result, sx.DistributedValues)
    assert float(result) == 6.0


def test_run_distributed_values_input_inside_function():
    # Intent: values_from_function inside a compiled function; num_replicas_in_sync * 2 = 2.
    strategy = sx.MirroredStrategy(["CPU:0"])

    @strategy.function
    def run():
        values = strategy.experimental_distribute_values_from_function(
            lambda ctx: ctx.num_replicas_in_sync)
        return strategy.run(lambda x: x * 2, args=(values,))

    result = run()
    assert int(result) == 2 and result.dtype == jnp.int32


def test_run_constant_input_two_replicas_is_mirrored():
    # Intent: a value computed from a mirrored input is the same on both replicas: 6.0 each.
    strategy = two_replicas()
    result = strategy.run(lambda x: x * 2.0, args=(jnp.float32(3.0),))
    assert [float(v) for v in strategy.experimental_local_results(result)] == [6.0, 6.0]


# --- Strategy.reduce (seed 003): per-example values, 2 replicas, global batch 8 -------------
def test_reduce_across_replicas_only_and_over_batch():
    # Intent: examples [0..3] on replica 0 and [4..7] on replica 1; reduce without axis gives
    # [0+4, 1+5, 2+6, 3+7]; with axis=0 it gives 0+1+...+7 = 28 (MEAN: 3.5).
    strategy = two_replicas()
    batch = [np.arange(8, dtype=np.float32)]
    values = next(iter(strategy.experimental_distribute_dataset(batch)))
    assert np.asarray(strategy.reduce("SUM", values, axis=None)).tolist() == [4.0, 6.0, 8.0, 10.0]
    assert float(strategy.reduce("SUM", values, axis=0)) == 28.0
    assert float(strategy.reduce("MEAN", values, axis=0)) == 3.5
    assert np.asarray(strategy.reduce("MEAN", values)).tolist() == [2.0, 3.0, 4.0, 5.0]


# --- experimental_distribute_values_from_function (seed 003) --------------------------------
def test_values_from_function_constant():
    # Intent: example 1, one replica: local results are (1.0,).
    strategy = sx.MirroredStrategy(["CPU:0"])
    values = strategy.experimental_distribute_values_from_function(lambda ctx: jnp.float32(1.0))
    local = strategy.experimental_local_results(values)
    assert len(local) == 1 and float(local[0]) == 1.0


def test_values_from_function_array_by_replica_id():
    # Intent: example 2, one replica takes array_value[0] = 3.0; with 3 replicas, 3, 2, 1.
    array_value = np.array([3.0, 2.0, 1.0])
    for devices, expect in ((["CPU:0"], [3.0]), (["CPU:0", "CPU:1", "CPU:2"], [3.0, 2.0, 1.0])):
        strategy = sx.MirroredStrategy(devices)
        values = strategy.experimental_distribute_values_from_function(
            lambda ctx: array_value[ctx.replica_id_in_sync_group])
        assert [float(v) for v in strategy.experimental_local_results(values)] == expect


def test_values_from_function_num_replicas():
    # Intent: example 3: each replica gets num_replicas_in_sync (1 on one replica, 4 on four).
    for n in (1, 4):
        strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(n)])
        values = strategy.experimental_distribute_values_from_function(lambda ctx: ctx.num_replicas_in_sync)
        assert [int(v) for v in strategy.experimental_local_results(values)] == [n] * n


def test_values_from_function_placed_on_devices():
    # Intent: example 4: value i lives on worker device i and feeds replica i.
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    multiple_values = [jnp.float32(i + 1.0) for i in range(4)]
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: multiple_values[ctx.replica_id_in_sync_group])
    local = strategy.experimental_local_results(values)
    assert [list(v.devices())[0] for v in local] == list(strategy.extended.worker_devices)
    doubled = strategy.run(lambda x: 2 * x, args=(values,))
    assert [float(v) for v in strategy.experimental_local_results(doubled)] == [2.0, 4.0, 6.0, 8.0]


def test_local_results_of_plain_value_is_one_tuple():
    # Intent: experimental_local_results of a non-distributed value is a 1-tuple.
    strategy = two_replicas()
    x = jnp.ones(3)
    assert strategy.experimental_local_results(x) == (x,)
