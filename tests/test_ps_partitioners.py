"""The partitioners give TensorFlow 2.21's partitions, and a ParameterServerStrategy with one
gives TensorFlow's shards: shapes, names, values and parameter servers (round-robin, counted
per variable and per shard), recorded from an in-process TensorFlow cluster of 2 workers and 2
parameter servers (tools/tf_record/record_parameter_server.py). The job here comes from a
TF_CONFIG (its tasks on this machine's Ray node), and a worker reads the sharded variables."""
import json
from pathlib import Path

import numpy as np
import pytest

import strategax as sx
from parameter_servers import TF_CONFIG, server_of, shared

DATA = json.loads((Path(__file__).parent / "data" / "tf" / "parameter_server.json").read_text())["scenarios"]
PARTITIONS = DATA["partitions_r1"]["result"]["partitions"]
SHARDED = DATA["sharded_variables_r1"]["result"]


def make(name, kwargs):
    return getattr(sx.experimental.partitioners, name)(**kwargs)


@pytest.mark.parametrize("rec", PARTITIONS, ids=lambda r: f"{r['partitioner']}{r['kwargs']}")
def test_partitions_are_tensorflows(rec):
    # Intent: every partitioner, on every recorded shape and dtype, returns TF's list.
    p = make(rec["partitioner"], rec["kwargs"])
    for case in rec["cases"]:
        assert p(case["shape"], np.dtype(case["dtype"])) == case["partitions"], case


def test_shard_rows_split_as_tensorflow():
    # Intent: the first rows % k shards take one row more (TF's "div" partitioning).
    from strategax.variables.sharded import shard_rows
    for rec in SHARDED["partitioned"]:
        for var in rec["variables"]:
            if "shards" in var:
                got = shard_rows(var["shape"][0], len(var["shards"]))
                assert got == [s["shape"][0] for s in var["shards"]]


def test_bad_partitioner_arguments_raise():
    # Intent: misuse fails where the partitioner is made, naming the argument.
    with pytest.raises(ValueError, match="num_shards must be >= 1"):
        sx.experimental.partitioners.FixedShardsPartitioner(0)
    with pytest.raises(TypeError, match="max_shard_bytes must be an int"):
        sx.experimental.partitioners.MaxSizePartitioner(2.5)


def _device_task(device: str) -> int:
    return int(device.split("/task:")[1].split("/")[0])


def tf_config_resolver(monkeypatch, config):
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    return sx.cluster_resolver.TFConfigClusterResolver()


def test_sharded_variables_are_tensorflows(ray_cluster):
    # Intent: for each recorded partitioner, the variables made in TF's order get TF's shards
    # (shapes, names, values, servers) or stay whole where TF kept them whole; without a
    # partitioner variables go to the servers in turn; a scheduled step reads a sharded
    # variable whole.
    strategy = shared("TF_CONFIG: 1 worker, 2 ps", tf_config=TF_CONFIG)
    assert (strategy._cluster.num_workers, strategy._cluster.num_ps) == (1, 2)
    for rec in SHARDED["partitioned"]:
        strategy._partitioner = make(rec["partitioner"], rec["kwargs"])
        strategy._placed = 0  # TF counts placements per strategy object: one per recorded case
        with strategy.scope():
            for i, want in enumerate(rec["variables"]):
                shape = want["shape"]
                init = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
                v = sx.Variable(init, name=f"v{i}")
                if "shards" not in want:
                    assert not isinstance(v, sx.experimental.ShardedVariable)
                    assert server_of(v) == _device_task(want["device"])
                    continue
                assert isinstance(v, sx.experimental.ShardedVariable)
                assert v.shape == tuple(shape)
                for shard, s in zip(v.variables, want["shards"], strict=True):
                    assert shard.name + ":0" == s["name"]
                    assert shard.shape == tuple(s["shape"])
                    np.testing.assert_array_equal(shard.numpy(), np.asarray(s["value"], np.float32))
                    assert server_of(shard) == _device_task(s["device"])
                np.testing.assert_array_equal(v.numpy(), init)
    strategy._partitioner, strategy._placed = None, 0
    with strategy.scope():
        plain = [sx.Variable(float(i), name=f"p{i}") for i in range(5)]
    assert [server_of(v) for v in plain] == [_device_task(r["device"]) for r in SHARDED["round_robin"]]

    strategy._partitioner = sx.experimental.partitioners.FixedShardsPartitioner(3)
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    with strategy.scope():
        sharded = sx.Variable(table, name="table")
    coordinator = sx.experimental.coordinator.ClusterCoordinator(strategy)
    read = strategy.function(lambda: strategy.run(lambda: sharded.read_value()[::3] + 1.0))
    np.testing.assert_array_equal(coordinator.schedule(read).fetch(), table[::3] + 1.0)


@pytest.mark.parametrize("change, message", [
    ({"task": {"type": "worker", "index": 0}}, "only the chief runs the program"),
    ({"cluster": {"chief": ["127.0.0.1:2222"], "worker": ["192.0.2.7:2223"], "ps": ["127.0.0.1:2224"]}},
     "is not a node of the Ray cluster"),
    ({"cluster": {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}}, 'needs "worker" and "ps" tasks'),
])
def test_tf_config_mistakes_are_named(ray_cluster, monkeypatch, change, message):
    # Intent: a TF_CONFIG that cannot map onto the Ray cluster fails before any actor starts.
    with pytest.raises(sx.cluster_resolver.ClusterConfigError, match=message):
        sx.experimental.ParameterServerStrategy(tf_config_resolver(monkeypatch, {**TF_CONFIG, **change}))
