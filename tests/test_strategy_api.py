"""The Strategy API surface: devices, contexts, scope, gather, defaults, one-device strategy."""
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx


@pytest.mark.parametrize("spec, index", [
    ("CPU:3", 3), ("cpu:1", 1), ("/device:CPU:2", 2), ("/cpu:0", 0),
    ("/job:localhost/replica:0/task:0/device:CPU:5", 5)])
def test_tensorflow_device_strings(spec, index):
    strategy = sx.MirroredStrategy([spec])
    assert strategy.extended.worker_devices == (jax.devices("cpu")[index],)


def test_default_devices_are_all_local_devices():
    strategy = sx.MirroredStrategy()
    assert strategy.num_replicas_in_sync == 8
    assert list(strategy.extended.worker_devices) == jax.local_devices()


def test_contexts_follow_tensorflow():
    # Intent: outside any scope: default strategy, default replica context; in scope():
    # cross-replica context; in run: replica context of that strategy.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    assert not sx.has_strategy()
    assert isinstance(sx.get_strategy(), sx.DefaultStrategy)
    assert sx.get_replica_context() is not None and not sx.in_cross_replica_context()
    with strategy.scope():
        assert sx.has_strategy() and sx.get_strategy() is strategy
        assert sx.in_cross_replica_context() and sx.get_replica_context() is None
        assert sx.get_cross_replica_context() is strategy
        seen = {}

        def replica_fn():
            ctx = sx.get_replica_context()
            seen["ctx"] = ctx
            seen["cross"] = sx.in_cross_replica_context()
            seen["strategy"] = sx.get_strategy()
            return ctx.replica_id_in_sync_group

        strategy.run(replica_fn)
        assert seen["ctx"].num_replicas_in_sync == 2 and seen["ctx"].strategy is strategy
        assert seen["cross"] is False and seen["strategy"] is strategy
    assert not sx.has_strategy()


def test_mixing_strategy_scopes_raises():
    a, b = sx.MirroredStrategy(["CPU:0"]), sx.MirroredStrategy(["CPU:1"])
    with a.scope():
        with pytest.raises(RuntimeError):
            with b.scope():
                pass


def test_experimental_set_strategy():
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    sx.experimental_set_strategy(strategy)
    try:
        assert sx.get_strategy() is strategy and sx.in_cross_replica_context()
    finally:
        sx.experimental_set_strategy(None)
    assert isinstance(sx.get_strategy(), sx.DefaultStrategy)


def test_default_strategy_runs_eagerly():
    # Intent: the default strategy is a single-replica no-op; reduce returns the value.
    default = sx.get_strategy()
    out = default.run(lambda x: sx.get_replica_context().all_reduce("sum", x) * 2, args=(jnp.ones(2),))
    np.testing.assert_array_equal(out, [2.0, 2.0])
    np.testing.assert_array_equal(default.reduce("SUM", jnp.arange(3.0)), [0.0, 1.0, 2.0])
    assert float(default.reduce("MEAN", jnp.arange(4.0), axis=0)) == 1.5
    assert default.experimental_local_results(out)[0] is out


def test_one_device_strategy_returns_plain_values():
    strategy = sx.OneDeviceStrategy("CPU:2")
    out = strategy.run(lambda x: x * 3.0, args=(jnp.arange(3.0),))
    assert not isinstance(out, sx.DistributedValues)
    np.testing.assert_array_equal(out, [0.0, 3.0, 6.0])
    assert list(out.devices()) == [jax.devices("cpu")[2]]
    assert float(strategy.reduce("SUM", out, axis=0)) == 9.0
    assert len(strategy.experimental_local_results(out)) == 1


def test_gather_and_reduce_on_pytrees():
    # Intent: gather concatenates per-replica values along an axis; reduce maps over pytrees.
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: {"a": np.full((2,), ctx.replica_id_in_sync_group, np.float32),
                     "b": np.float32(ctx.replica_id_in_sync_group)})
    gathered = strategy.gather(values["a"], axis=0)
    np.testing.assert_array_equal(gathered, [0, 0, 1, 1, 2, 2, 3, 3])
    reduced = strategy.reduce("MEAN", values)
    np.testing.assert_array_equal(reduced["a"], [1.5, 1.5])
    assert float(reduced["b"]) == 1.5
    local = strategy.experimental_local_results(values)
    assert len(local) == 4 and float(local[3]["b"]) == 3.0


def test_repr_of_distributed_values():
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    per_replica = strategy.run(lambda: sx.get_replica_context().replica_id_in_sync_group)
    assert repr(per_replica) == "PerReplica:{\n  0: Array(0, dtype=int32),\n  1: Array(1, dtype=int32)\n}"
    mirrored = strategy.run(lambda: sx.get_replica_context().all_reduce("sum", jnp.float32(1.0)))
    assert repr(mirrored) == ("Mirrored:{\n  0: Array(2., dtype=float32),\n"
                              "  1: Array(2., dtype=float32)\n}")


def test_mirrored_value_reads_as_one_array():
    # Intent: a Mirrored value may be used as a single array in cross-replica code.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    mirrored = strategy.run(lambda: sx.get_replica_context().all_reduce("sum", jnp.arange(3.0)))
    np.testing.assert_array_equal(np.asarray(mirrored) + 1, [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(jnp.asarray(mirrored) * 2, [0.0, 4.0, 8.0])
    np.testing.assert_array_equal(mirrored * 2, [0.0, 4.0, 8.0])


def test_call_for_each_replica_is_run():
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    out = strategy.extended.call_for_each_replica(lambda: sx.get_replica_context().replica_id_in_sync_group * 10)
    assert [int(v) for v in strategy.experimental_local_results(out)] == [0, 10]


@pytest.mark.parametrize("op,shape,dtype,recorded", [
    ("MEAN", (0,), jnp.float32, "mean_axis0_shape_0"),
    ("MEAN", (0, 3), jnp.float32, "mean_axis0_shape_0_3"),
    ("MEAN", (0,), jnp.int32, "mean_axis0_int32_shape_0"),
    ("SUM", (0, 3), jnp.float32, "sum_axis0_shape_0_3"),
])
def test_reduce_over_axis_0_of_nothing_is_tensorflows_nan(op, shape, dtype, recorded):
    # Intent: MEAN over axis 0 of zero-size per-replica values divides 0 by 0 elements: NaN,
    # as TensorFlow 2.21 gives (tests/data/tf/gaps.json; it used to fail with "integer modulo
    # by zero" for (0, 3) and give 0.0 for (0,)); SUM is zeros.
    rec = json.loads((pathlib.Path(__file__).parent / "data/tf/gaps.json").read_text())[
        "scenarios"]["hostile_inputs_r2"]["result"][recorded]
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    value = strategy.experimental_distribute_values_from_function(lambda ctx: jnp.zeros(shape, dtype))
    got = np.asarray(strategy.reduce(op, value, axis=0))
    want = np.asarray(rec["value"], np.float32).reshape(rec["shape"])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # NaN equals NaN here
